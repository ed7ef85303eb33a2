#include "cluster/etcd_store.h"

#include <utility>

#include "base/status_macros.h"

namespace ps::cluster {
namespace {

class EtcdStoreWatch final : public StoreWatch {
 public:
  explicit EtcdStoreWatch(std::unique_ptr<net::EtcdWatch> watch)
      : watch_(std::move(watch)) {}
  void Cancel() override { watch_->Cancel(); }
  absl::Status status() override { return watch_->status(); }

 private:
  const std::unique_ptr<net::EtcdWatch> watch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationStore>> EtcdStore::Connect(
    const net::EtcdOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<net::EtcdClient> client,
                   net::EtcdClient::Connect(options));
  return std::unique_ptr<CoordinationStore>(new EtcdStore(std::move(client)));
}

absl::StatusOr<EtcdValue> EtcdStore::Get(absl::string_view key) {
  return client_->Get(key);
}

absl::StatusOr<EtcdPosition> EtcdStore::Position() {
  return client_->Position();
}

absl::StatusOr<std::vector<EtcdValue>> EtcdStore::GetPrefix(
    absl::string_view prefix) {
  return client_->GetPrefix(prefix);
}

absl::StatusOr<int64_t> EtcdStore::Put(absl::string_view key,
                                       absl::string_view value, int64_t lease) {
  return client_->Put(key, value, lease);
}

absl::StatusOr<bool> EtcdStore::PutIf(absl::string_view key,
                                      absl::string_view value,
                                      int64_t expected_mod_revision,
                                      int64_t lease,
                                      const std::vector<EtcdCondition>& also) {
  return client_->PutIf(key, value, expected_mod_revision, lease, also);
}

absl::StatusOr<int64_t> EtcdStore::Delete(absl::string_view key) {
  return client_->Delete(key);
}

absl::StatusOr<int64_t> EtcdStore::DeletePrefix(absl::string_view prefix) {
  return client_->DeletePrefix(prefix);
}

absl::StatusOr<int64_t> EtcdStore::GrantLease(absl::Duration ttl) {
  return client_->GrantLease(ttl);
}

absl::StatusOr<absl::Duration> EtcdStore::KeepAlive(int64_t lease,
                                                    absl::Duration timeout) {
  return client_->KeepAlive(lease, timeout);
}

absl::StatusOr<absl::Duration> EtcdStore::LeaseTimeLeft(
    int64_t lease, absl::Duration timeout) {
  return client_->LeaseTimeLeft(lease, timeout);
}

absl::Status EtcdStore::RevokeLease(int64_t lease, absl::Duration timeout) {
  return client_->RevokeLease(lease, timeout);
}

absl::StatusOr<std::unique_ptr<StoreWatch>> EtcdStore::WatchPrefix(
    absl::string_view prefix, int64_t start_revision,
    std::function<void(const EtcdEvent&)> on_event) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<net::EtcdWatch> watch,
      client_->WatchPrefix(prefix, start_revision, std::move(on_event)));
  return std::unique_ptr<StoreWatch>(new EtcdStoreWatch(std::move(watch)));
}

}  // namespace ps::cluster
