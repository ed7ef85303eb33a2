#include "cluster/coordinator_election.h"

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cluster/shard_directory.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

absl::Time MonotonicNow() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

std::string CoordinatorTermKey(const std::string& job) {
  return absl::StrCat("/ps/", job, "/coordinator_epoch");
}

std::string CoordinatorLeaseKey(const std::string& job) {
  return absl::StrCat("/ps/", job, "/coordinator_lease");
}

absl::StatusOr<std::unique_ptr<CoordinatorElection>> CoordinatorElection::Start(
    CoordinationStore* etcd, Leadership* clocks,
    const ElectionOptions& options) {
  RETURN_IF_ERROR(CheckJobName(options.job));
  if (options.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "the coordinator's etcd lease must be at least 1 s");
  }
  auto election = std::unique_ptr<CoordinatorElection>(
      new CoordinatorElection(etcd, clocks, options));
  election->key_ = CoordinatorKey(options.job);
  election->value_ = absl::StrCat(options.shard_index, " ", options.address);
  CoordinatorElection* raw = election.get();
  election->thread_ = std::thread([raw] { raw->Run(); });
  return election;
}

CoordinatorElection::~CoordinatorElection() {
  // Stops answering before waiting for the thread, which may be in an etcd
  // call (and checks stop_ before it takes over).
  stop_.Notify();
  clocks_->StepDown();
  if (thread_.joinable()) thread_.join();
  clocks_->StepDown();
  if (lease_ != 0) {
    // Briefly: a shard that stops must not wait on an etcd that is gone.
    if (absl::Status revoked = etcd_->RevokeLease(lease_, absl::Seconds(1));
        !revoked.ok()) {
      LOG(WARNING) << key_ << ": " << revoked << " (the key goes with its "
                   << "lease)";
    }
  }
}

void CoordinatorElection::Run() {
  while (true) {
    if (!leading_.load()) {
      if (Campaign()) continue;
      if (stop_.WaitForNotificationWithTimeout(options_.poll)) return;
    } else {
      if (stop_.WaitForNotificationWithTimeout(options_.ttl / 3)) return;
      if (!Renew()) {
        leading_.store(false);
        clocks_->StepDown();
      }
    }
  }
}

bool CoordinatorElection::Campaign() {
  absl::StatusOr<net::EtcdValue> held = etcd_->Get(key_);
  if (held.ok()) {
    if (lease_ == 0 || held->lease != lease_) {
      // Another's: whose lease to wait out if the key goes while it lives.
      holder_lease_ = held->lease;
      return false;
    }
    // Ours from an answer that was lost, or taken while the last holder's
    // lease lived on: lead once that lease is gone (the key is ours).
    if (LastLeaderMayAnswer(holder_lease_)) {
      etcd_->KeepAlive(lease_, options_.ttl / 3).IgnoreError();
      return false;
    }
  } else if (!absl::IsNotFound(held.status())) {
    LOG_EVERY_N(WARNING, 20) << "coordinator election: " << held.status();
    return false;
  }
  const absl::Time sent = MonotonicNow();
  if (lease_ != 0) {
    absl::StatusOr<absl::Duration> renewed =
        etcd_->KeepAlive(lease_, options_.ttl / 3);
    if (!renewed.ok()) lease_ = 0;
  }
  if (lease_ == 0) {
    absl::StatusOr<int64_t> granted = etcd_->GrantLease(options_.ttl);
    if (!granted.ok()) {
      LOG_EVERY_N(WARNING, 20) << "coordinator election: " << granted.status();
      return false;
    }
    lease_ = *granted;
  }
  if (!held.ok()) {
    absl::StatusOr<bool> created = etcd_->PutIf(key_, value_, 0, lease_);
    if (!created.ok() || !*created) {
      // Another shard was quicker, or the answer was lost: the next look
      // at the key says which.
      return false;
    }
  }
  return Lead(sent + options_.ttl);
}

bool CoordinatorElection::Lead(absl::Time leading_until) {
  // All or nothing: a coordinator that does not know the last term could
  // give out incarnations another gave, and one that does not know the
  // workers could let one run past the staleness bound. Either way the key
  // is given up and the campaign goes on.
  auto give_up = [this](absl::string_view why, const absl::Status& status) {
    LOG(ERROR) << "not coordinating after all: " << why << ": " << status;
    etcd_->RevokeLease(lease_, options_.ttl / 3).IgnoreError();
    lease_ = 0;
    return false;
  };
  const std::string term_key = CoordinatorTermKey(options_.job);
  uint64_t last_term = 0;  // none yet
  int64_t last_lease = 0;  // the last coordinator's, when it says
  int64_t term_revision = 0;
  absl::StatusOr<net::EtcdValue> stored = etcd_->Get(term_key);
  if (stored.ok()) {
    if (!absl::SimpleAtoi(stored->value, &last_term)) {
      return give_up("reading the last coordinator's term",
                     absl::DataLossError(absl::StrCat(
                         term_key, " holds '", stored->value,
                         "', not a term (etcdctl del it to go on)")));
    }
    term_revision = stored->mod_revision;
  } else if (!absl::IsNotFound(stored.status())) {
    return give_up("reading the last coordinator's term", stored.status());
  }
  // The last coordinator's lease (recorded beside the term, or seen
  // holding the key): while it lives, that coordinator answers until its
  // next renewal finds the key another's. The key stays this shard's; it
  // leads once that lease is gone (Campaign() waits it out).
  const std::string lease_key = CoordinatorLeaseKey(options_.job);
  absl::StatusOr<net::EtcdValue> recorded = etcd_->Get(lease_key);
  if (recorded.ok()) {
    if (!absl::SimpleAtoi(recorded->value, &last_lease)) last_lease = 0;
  } else if (!absl::IsNotFound(recorded.status())) {
    return give_up("reading the last coordinator's lease", recorded.status());
  }
  if (last_lease == 0) last_lease = holder_lease_;
  if (LastLeaderMayAnswer(last_lease)) {
    LOG(INFO) << key_ << " is this shard's, but the last coordinator's "
              << "lease " << last_lease << " lives on: coordinating once "
              << "it ends";
    holder_lease_ = last_lease;
    return false;
  }
  absl::StatusOr<std::vector<RegisteredWorker>> registered =
      RegisteredWorkers(*etcd_, options_.job);
  if (!registered.ok())
    return give_up("reading the registered workers", registered.status());
  // Recorded before any incarnation of it is given out.
  const uint64_t term = clocks_->NextTerm(last_term + 1);
  absl::StatusOr<bool> saved =
      etcd_->PutIf(term_key, absl::StrCat(term), term_revision);
  if (!saved.ok()) return give_up("recording the term", saved.status());
  if (!*saved) {
    return give_up("recording the term", absl::AbortedError(absl::StrCat(
                                             term_key, " changed meanwhile")));
  }
  // Beside the term (which the release before this one reads alone).
  if (absl::Status put = etcd_->Put(lease_key, absl::StrCat(lease_)).status();
      !put.ok()) {
    return give_up("recording this coordinator's lease", put);
  }
  holder_lease_ = 0;
  waiting_since_ = absl::InfinitePast();
  if (stop_.HasBeenNotified()) return false;  // the destructor revokes
  clocks_->Lead(*registered, term, leading_until);
  leading_.store(true);
  LOG(INFO) << "this shard is the job's clock coordinator (term " << term
            << ")";
  return true;
}

bool CoordinatorElection::LastLeaderMayAnswer(int64_t lease) {
  if (lease == 0 || lease == lease_) return false;
  absl::StatusOr<absl::Duration> left =
      etcd_->LeaseTimeLeft(lease, options_.ttl / 3);
  if (left.ok() && *left <= absl::ZeroDuration()) {
    waiting_since_ = absl::InfinitePast();
    return false;
  }
  if (!left.ok()) {
    LOG_EVERY_N(WARNING, 20) << "coordinator election: asking lease " << lease
                             << "'s time left: " << left.status();
  }
  // A coordinator stops answering within a lease of its last renewal
  // (Renew() extends it only while the key is its own): past that, it
  // answers no more, whatever etcd says of its lease.
  const absl::Time now = MonotonicNow();
  if (waiting_since_ == absl::InfinitePast()) waiting_since_ = now;
  // (etcd may grant more than asked: two leases and a second.)
  if (now - waiting_since_ > 2 * options_.ttl + absl::Seconds(1)) {
    LOG(WARNING) << "the last coordinator's lease " << lease
                 << " outlived a lease of waiting: coordinating anyway";
    waiting_since_ = absl::InfinitePast();
    return false;
  }
  return true;
}

bool CoordinatorElection::Renew() {
  const absl::Time sent = MonotonicNow();
  absl::StatusOr<absl::Duration> renewed =
      etcd_->KeepAlive(lease_, options_.ttl / 3);
  if (renewed.ok()) {
    // Still ours? (Deleted, or etcd's state lost.) Unknown is not yes.
    absl::StatusOr<net::EtcdValue> held = etcd_->Get(key_);
    if (!held.ok() && !absl::IsNotFound(held.status())) return true;
    if (!held.ok() || held->lease != lease_) {
      LOG(WARNING) << key_ << " is no longer this shard's: stepping down";
      // Not answering before the lease goes: the next coordinator leads
      // once it is gone.
      leading_.store(false);
      clocks_->StepDown();
      etcd_->RevokeLease(lease_, options_.ttl / 3).IgnoreError();
      lease_ = 0;
      return false;
    }
    clocks_->ExtendLeadership(sent + *renewed);
    return true;
  }
  if (absl::IsNotFound(renewed.status())) {
    LOG(WARNING) << "the coordinator's etcd lease ran out: stepping down";
    lease_ = 0;
    return false;
  }
  // etcd unreachable: the leadership ends by itself once the time the lease
  // had left is over; if the lease outlives this, renewing goes on.
  LOG_EVERY_N(WARNING, 10) << "renewing the coordinator's lease: "
                           << renewed.status();
  return true;
}

}  // namespace ps::cluster
