#include "cluster/in_memory_store.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps::cluster {

// A watch's events wait in a queue that its own thread empties, calling
// back outside every lock, as a real watch's stream does.
class InMemoryWatch final : public StoreWatch {
 public:
  InMemoryWatch(InMemoryStore* store, std::string prefix,
                std::function<void(const EtcdEvent&)> on_event)
      : store_(store),
        prefix_(std::move(prefix)),
        on_event_(std::move(on_event)) {}
  ~InMemoryWatch() override { Cancel(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Cancel() override {
    absl::MutexLock cancel_lock(&cancel_mu_);
    if (thread_.joinable()) {
      store_->Forget(this);
      {
        absl::MutexLock lock(&mu_);
        cancelled_ = true;
      }
      thread_.join();
    }
  }
  absl::Status status() override { return absl::OkStatus(); }

  const std::string& prefix() const { return prefix_; }
  void Add(const EtcdEvent& event) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(event);
  }

 private:
  void Run() {
    while (true) {
      EtcdEvent event;
      {
        absl::MutexLock lock(&mu_);
        // Await() calls the condition with mu_ held, which the analysis
        // cannot see through a function pointer.
        mu_.Await(absl::Condition(
            +[](InMemoryWatch* watch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return watch->cancelled_ || !watch->queue_.empty();
            },
            this));
        if (cancelled_) return;
        event = std::move(queue_.front());
        queue_.pop_front();
      }
      on_event_(event);
    }
  }

  InMemoryStore* const store_;
  const std::string prefix_;
  const std::function<void(const EtcdEvent&)> on_event_;
  absl::Mutex cancel_mu_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<EtcdEvent> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

namespace {

EtcdValue ValueOf(const std::string& key, int64_t create_revision,
                  int64_t mod_revision, int64_t lease,
                  const std::string& value) {
  EtcdValue read;
  read.key = key;
  read.value = value;
  read.create_revision = create_revision;
  read.mod_revision = mod_revision;
  read.lease = lease;
  return read;
}

absl::Status OutOfReach() {
  return absl::UnavailableError("the in-memory store is out of reach");
}

absl::Duration WholeSeconds(absl::Duration ttl) {
  return std::max(absl::Seconds(1), absl::Ceil(ttl, absl::Seconds(1)));
}

}  // namespace

InMemoryStore::InMemoryStore()
    : cluster_id_(absl::Uniform<uint64_t>(absl::BitGen(), 1, ~uint64_t{0})) {
  reaper_ = std::thread([this] { ReapLeases(); });
}

InMemoryStore::~InMemoryStore() {
  stop_.Notify();
  reaper_.join();
}

void InMemoryStore::ReapLeases() {
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    absl::MutexLock lock(&mu_);
    ExpireDue();
  }
}

void InMemoryStore::SetUnreachable(bool unreachable) {
  absl::MutexLock lock(&mu_);
  unreachable_ = unreachable;
}

void InMemoryStore::ExpireDue() {
  const absl::Time now = absl::Now();
  std::vector<int64_t> due;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires <= now) due.push_back(id);
  }
  for (int64_t id : due) EndLease(id);
}

void InMemoryStore::EndLease(int64_t lease) {
  auto found = leases_.find(lease);
  if (found == leases_.end()) return;
  const std::vector<std::string> keys(found->second.keys.begin(),
                                      found->second.keys.end());
  leases_.erase(found);
  DeleteKeys(keys);
}

void InMemoryStore::DeleteKeys(const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  ++revision_;
  for (const std::string& key : keys) {
    auto found = keys_.find(key);
    if (found->second.lease != 0) {
      auto lease = leases_.find(found->second.lease);
      if (lease != leases_.end()) lease->second.keys.erase(key);
    }
    keys_.erase(found);
    EtcdEvent event;
    event.type = EtcdEvent::Type::kDelete;
    event.kv.key = key;
    event.kv.mod_revision = revision_;
    Publish(event);
  }
}

int64_t InMemoryStore::SetKey(absl::string_view key, absl::string_view value,
                              int64_t lease) {
  ++revision_;
  Key& held = keys_[std::string(key)];
  if (held.create_revision == 0) held.create_revision = revision_;
  if (held.lease != 0 && held.lease != lease) {
    auto old = leases_.find(held.lease);
    if (old != leases_.end()) old->second.keys.erase(std::string(key));
  }
  held.value = std::string(value);
  held.mod_revision = revision_;
  held.lease = lease;
  if (lease != 0) leases_[lease].keys.insert(std::string(key));
  EtcdEvent event;
  event.kv = ValueOf(std::string(key), held.create_revision, revision_, lease,
                     held.value);
  Publish(event);
  return revision_;
}

void InMemoryStore::Publish(const EtcdEvent& event) {
  history_.push_back(event);
  for (InMemoryWatch* watch : watches_) {
    if (absl::StartsWith(event.kv.key, watch->prefix())) watch->Add(event);
  }
}

void InMemoryStore::Forget(InMemoryWatch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.erase(watch);
}

absl::StatusOr<EtcdValue> InMemoryStore::Get(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  auto found = keys_.find(std::string(key));
  if (found == keys_.end()) {
    return absl::NotFoundError(absl::StrCat("no key ", key, " in the store"));
  }
  const Key& held = found->second;
  return ValueOf(found->first, held.create_revision, held.mod_revision,
                 held.lease, held.value);
}

absl::StatusOr<EtcdPosition> InMemoryStore::Position() {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  EtcdPosition position;
  position.cluster_id = cluster_id_;
  position.revision = revision_;
  return position;
}

absl::StatusOr<std::vector<EtcdValue>> InMemoryStore::GetPrefix(
    absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  std::vector<EtcdValue> values;
  for (auto it = keys_.lower_bound(std::string(prefix));
       it != keys_.end() && absl::StartsWith(it->first, prefix); ++it) {
    values.push_back(ValueOf(it->first, it->second.create_revision,
                             it->second.mod_revision, it->second.lease,
                             it->second.value));
  }
  return values;
}

absl::StatusOr<int64_t> InMemoryStore::Put(absl::string_view key,
                                           absl::string_view value,
                                           int64_t lease) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  if (lease != 0 && leases_.count(lease) == 0) {
    return absl::NotFoundError(
        absl::StrCat("writing ", key, ": lease ", lease, " not found"));
  }
  return SetKey(key, value, lease);
}

absl::StatusOr<bool> InMemoryStore::PutIf(
    absl::string_view key, absl::string_view value,
    int64_t expected_mod_revision, int64_t lease,
    const std::vector<EtcdCondition>& also) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  auto mod_revision = [this](const std::string& compared)
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> int64_t {
    auto found = keys_.find(compared);
    return found == keys_.end() ? 0 : found->second.mod_revision;
  };
  if (mod_revision(std::string(key)) != expected_mod_revision) return false;
  for (const EtcdCondition& condition : also) {
    if (mod_revision(condition.key) != condition.mod_revision) return false;
  }
  if (lease != 0 && leases_.count(lease) == 0) {
    return absl::NotFoundError(
        absl::StrCat("swapping ", key, ": lease ", lease, " not found"));
  }
  SetKey(key, value, lease);
  return true;
}

absl::StatusOr<int64_t> InMemoryStore::Delete(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  if (keys_.count(std::string(key)) == 0) return 0;
  DeleteKeys({std::string(key)});
  return 1;
}

absl::StatusOr<int64_t> InMemoryStore::DeletePrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  std::vector<std::string> keys;
  for (auto it = keys_.lower_bound(std::string(prefix));
       it != keys_.end() && absl::StartsWith(it->first, prefix); ++it) {
    keys.push_back(it->first);
  }
  DeleteKeys(keys);
  return static_cast<int64_t>(keys.size());
}

absl::StatusOr<int64_t> InMemoryStore::GrantLease(absl::Duration ttl) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  const int64_t id = next_lease_++;
  Lease& lease = leases_[id];
  lease.ttl = WholeSeconds(ttl);
  lease.expires = absl::Now() + lease.ttl;
  return id;
}

absl::StatusOr<absl::Duration> InMemoryStore::KeepAlive(int64_t lease,
                                                        absl::Duration) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  auto found = leases_.find(lease);
  if (found == leases_.end()) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired"));
  }
  found->second.expires = absl::Now() + found->second.ttl;
  return found->second.ttl;
}

absl::StatusOr<absl::Duration> InMemoryStore::LeaseTimeLeft(int64_t lease,
                                                            absl::Duration) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  auto found = leases_.find(lease);
  if (found == leases_.end()) return absl::ZeroDuration();
  return absl::Ceil(found->second.expires - absl::Now(), absl::Seconds(1));
}

absl::Status InMemoryStore::RevokeLease(int64_t lease, absl::Duration) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) return OutOfReach();
  ExpireDue();
  if (leases_.count(lease) == 0) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " not found"));
  }
  EndLease(lease);
  return absl::OkStatus();
}

void InMemoryStore::ExpireLease(int64_t lease) {
  absl::MutexLock lock(&mu_);
  EndLease(lease);
}

absl::StatusOr<std::unique_ptr<StoreWatch>> InMemoryStore::WatchPrefix(
    absl::string_view prefix, int64_t start_revision,
    std::function<void(const EtcdEvent&)> on_event) {
  auto watch = std::make_unique<InMemoryWatch>(this, std::string(prefix),
                                               std::move(on_event));
  {
    absl::MutexLock lock(&mu_);
    if (unreachable_) {
      return OutOfReach();
    }
    if (start_revision > 0) {
      for (const EtcdEvent& event : history_) {
        if (event.kv.mod_revision >= start_revision &&
            absl::StartsWith(event.kv.key, prefix)) {
          watch->Add(event);
        }
      }
    }
    watches_.insert(watch.get());
  }
  watch->Start();
  return std::unique_ptr<StoreWatch>(std::move(watch));
}

}  // namespace ps::cluster
