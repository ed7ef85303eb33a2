// File: cluster/coordination_store.h
//
// CoordinationStore is what the cluster's coordination stands on: etcd's
// keys with revisions, compare-and-swap, leases that take their keys with
// them, and watches. Two implementations: EtcdStore (cluster/etcd_store.h),
// a client of a real etcd cluster, and InMemoryStore
// (cluster/in_memory_store.h), one process's map with etcd's semantics, so
// that role choice, promotion, fencing and election are unit-tested without
// starting etcd. Everything in cluster/ takes a CoordinationStore, never a
// client.
//
// Implementations are thread-safe. A watch calls back from a thread of its
// own.

#ifndef PS_CLUSTER_COORDINATION_STORE_H_
#define PS_CLUSTER_COORDINATION_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "net/etcd_values.h"

namespace ps::cluster {

using net::EtcdCondition;
using net::EtcdEvent;
using net::EtcdPosition;
using net::EtcdValue;

// A running watch; destroying it (or Cancel()) stops the callbacks.
class StoreWatch {
 public:
  virtual ~StoreWatch() = default;
  // Stops the watch and waits for a callback in progress. Idempotent; not
  // from inside the watch's own callback.
  virtual void Cancel() = 0;
  // Why the watch ended on its own (OK while it runs or after Cancel()).
  virtual absl::Status status() = 0;
};

class CoordinationStore {
 public:
  virtual ~CoordinationStore() = default;

  // The value at `key`; NOT_FOUND when there is none.
  virtual absl::StatusOr<EtcdValue> Get(absl::string_view key) = 0;
  // The store and its revision now.
  virtual absl::StatusOr<EtcdPosition> Position() = 0;
  // Every key that starts with `prefix`, in key order.
  virtual absl::StatusOr<std::vector<EtcdValue>> GetPrefix(
      absl::string_view prefix) = 0;

  // Sets `key`, attached to `lease` unless it is 0 (NOT_FOUND for a lease
  // that does not exist); the revision it made.
  virtual absl::StatusOr<int64_t> Put(absl::string_view key,
                                      absl::string_view value,
                                      int64_t lease = 0) = 0;
  // Compare-and-swap: sets `key` only if its mod revision is
  // `expected_mod_revision` (0: only if the key does not exist), in one
  // transaction, and only if every one of `also` holds too. Whether it did.
  virtual absl::StatusOr<bool> PutIf(
      absl::string_view key, absl::string_view value,
      int64_t expected_mod_revision, int64_t lease = 0,
      const std::vector<EtcdCondition>& also = {}) = 0;
  // Deletes `key`, or every key under `prefix`; how many went.
  virtual absl::StatusOr<int64_t> Delete(absl::string_view key) = 0;
  virtual absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix) = 0;

  // A lease of at least `ttl` (whole seconds, at least 1); its id.
  virtual absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) = 0;
  // Renews `lease` once; the time it has left. NOT_FOUND once it expired
  // (its keys are gone). `timeout` (zero: the store's own) bounds how long
  // a renewal may block.
  virtual absl::StatusOr<absl::Duration> KeepAlive(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) = 0;
  // At most the time `lease` has left without a renewal (whole seconds,
  // rounded up); zero once it expired (or never existed). `timeout` as
  // for KeepAlive().
  virtual absl::StatusOr<absl::Duration> LeaseTimeLeft(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) = 0;
  // Ends `lease` now, deleting its keys; `timeout` as for KeepAlive().
  virtual absl::Status RevokeLease(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration()) = 0;

  // Calls `on_event` for every change to a key under `prefix` from
  // `start_revision` on (0: from now), in revision order, until the watch
  // is cancelled or ends (then status() says why).
  virtual absl::StatusOr<std::unique_ptr<StoreWatch>> WatchPrefix(
      absl::string_view prefix, int64_t start_revision,
      std::function<void(const EtcdEvent&)> on_event) = 0;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_COORDINATION_STORE_H_
