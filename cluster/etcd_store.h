// File: cluster/etcd_store.h
//
// EtcdStore is the CoordinationStore of a real etcd cluster: each call is
// the same call of a net::EtcdClient, which it owns.
//
// Thread-safe.

#ifndef PS_CLUSTER_ETCD_STORE_H_
#define PS_CLUSTER_ETCD_STORE_H_

#include <memory>

#include "cluster/coordination_store.h"
#include "net/etcd_client.h"

namespace ps::cluster {

class EtcdStore final : public CoordinationStore {
 public:
  // net::EtcdClient::Connect()'s errors: INVALID_ARGUMENT without
  // endpoints, or for a user without a password; a cluster that is down
  // fails the first call, not this (unless a user must authenticate).
  static absl::StatusOr<std::unique_ptr<CoordinationStore>> Connect(
      const net::EtcdOptions& options);

  absl::StatusOr<EtcdValue> Get(absl::string_view key) override;
  absl::StatusOr<EtcdPosition> Position() override;
  absl::StatusOr<std::vector<EtcdValue>> GetPrefix(
      absl::string_view prefix) override;
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease) override;
  absl::StatusOr<bool> PutIf(absl::string_view key, absl::string_view value,
                             int64_t expected_mod_revision, int64_t lease,
                             const std::vector<EtcdCondition>& also) override;
  absl::StatusOr<int64_t> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix) override;
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) override;
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease,
                                           absl::Duration timeout) override;
  absl::StatusOr<absl::Duration> LeaseTimeLeft(int64_t lease,
                                               absl::Duration timeout) override;
  absl::Status RevokeLease(int64_t lease, absl::Duration timeout) override;
  absl::StatusOr<std::unique_ptr<StoreWatch>> WatchPrefix(
      absl::string_view prefix, int64_t start_revision,
      std::function<void(const EtcdEvent&)> on_event) override;

 private:
  explicit EtcdStore(std::unique_ptr<net::EtcdClient> client)
      : client_(std::move(client)) {}

  const std::unique_ptr<net::EtcdClient> client_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_ETCD_STORE_H_
