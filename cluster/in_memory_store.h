// File: cluster/in_memory_store.h
//
// InMemoryStore is a CoordinationStore held in one process: etcd's
// semantics (one revision per change, compare-and-swap on mod revisions,
// leases whose keys go when they end, watches replaying from a revision)
// over a map. Unit tests run the cluster's protocol on it, with two things
// a real etcd cannot be asked for: a lease ended at once, as if its holder
// died past its TTL (ExpireLease()), and a store out of reach
// (SetUnreachable()).
//
// Thread-safe. Outlives its watches.

#ifndef PS_CLUSTER_IN_MEMORY_STORE_H_
#define PS_CLUSTER_IN_MEMORY_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cluster/coordination_store.h"

namespace ps::cluster {

class InMemoryWatch;

class InMemoryStore final : public CoordinationStore {
 public:
  // Starts the thread that ends leases past their time.
  InMemoryStore();
  ~InMemoryStore() override;

  absl::StatusOr<EtcdValue> Get(absl::string_view key) override;
  absl::StatusOr<EtcdPosition> Position() override;
  absl::StatusOr<std::vector<EtcdValue>> GetPrefix(
      absl::string_view prefix) override;
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease = 0) override;
  absl::StatusOr<bool> PutIf(
      absl::string_view key, absl::string_view value,
      int64_t expected_mod_revision, int64_t lease = 0,
      const std::vector<EtcdCondition>& also = {}) override;
  absl::StatusOr<int64_t> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix) override;
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) override;
  absl::StatusOr<absl::Duration> KeepAlive(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) override;
  absl::StatusOr<absl::Duration> LeaseTimeLeft(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) override;
  absl::Status RevokeLease(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) override;
  absl::StatusOr<std::unique_ptr<StoreWatch>> WatchPrefix(
      absl::string_view prefix, int64_t start_revision,
      std::function<void(const EtcdEvent&)> on_event) override;

  // Ends `lease` now, as its TTL running out would (its holder died):
  // its keys go; a later renewal is NOT_FOUND. Nothing for an unknown one.
  void ExpireLease(int64_t lease);
  // While `unreachable`, every call answers UNAVAILABLE (the store cut off
  // from this process); leases keep running out meanwhile.
  void SetUnreachable(bool unreachable);

 private:
  friend class InMemoryWatch;

  struct Key {
    std::string value;
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
    int64_t lease = 0;
  };
  struct Lease {
    absl::Duration ttl;
    absl::Time expires;
    std::set<std::string> keys;
  };

  // Ends the leases whose time ran out.
  void ExpireDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `lease`, deleting its keys at one revision.
  void EndLease(int64_t lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes `keys` (each present) at one new revision.
  void DeleteKeys(const std::vector<std::string>& keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t SetKey(absl::string_view key, absl::string_view value, int64_t lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `event` and hands it to the watches of its prefix.
  void Publish(const EtcdEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(InMemoryWatch* watch) ABSL_LOCKS_EXCLUDED(mu_);
  void ReapLeases();

  const uint64_t cluster_id_;
  absl::Mutex mu_;
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Key> keys_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // Every change, in revision order: what a watch from a past revision
  // replays.
  std::vector<EtcdEvent> history_ ABSL_GUARDED_BY(mu_);
  std::set<InMemoryWatch*> watches_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_IN_MEMORY_STORE_H_
