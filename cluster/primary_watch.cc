#include "cluster/primary_watch.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "cluster/data_dir_generation.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

// A promotion's token: what tells it from another one to the same
// generation.
std::string NewPromotionToken() {
  absl::BitGen random;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(random));
}

}  // namespace

PrimaryWatch::PrimaryWatch(CoordinationStore* store, ShardControl* shard,
                           PromotionOptions options)
    : store_(store), shard_(shard), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

void PrimaryWatch::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::optional<absl::Status> PrimaryWatch::StopRequest() const {
  absl::MutexLock lock(&mu_);
  return stop_request_;
}

void PrimaryWatch::RequestStop(absl::Status reason) {
  if (reason.ok()) {
    LOG(WARNING) << "this replica stops";
  } else {
    LOG(ERROR) << reason << "; stopping, to be restarted and copy the shard "
               << "again";
  }
  absl::MutexLock lock(&mu_);
  stop_request_ = std::move(reason);
}

void PrimaryWatch::Run() {
  const int index = options_.own.index;
  while (!stop_.WaitForNotificationWithTimeout(options_.poll)) {
    // Where roles are found, a restart finds the role again (and copies
    // anew).
    if (absl::Status following = shard_->FollowingError();
        !following.ok() && options_.finds_roles) {
      return RequestStop(absl::Status(
          following.code(),
          absl::StrCat("this replica stopped following its primary (",
                       following.message(), ")")));
    }
    absl::StatusOr<ShardRecord> primary =
        FindShard(*store_, options_.job, index);
    if (primary.ok() && primary->address != options_.primary_address) {
      // Another process serves the shard (a replica promoted while this
      // one looked away): the feed followed is gone for good, so waiting
      // out --replica_follow_retry on it only keeps this replica out of
      // the new primary's in-sync set longer.
      return RequestStop(absl::AbortedError(absl::StrCat(
          "shard ", index, " is served by ", primary->address, " now, not by ",
          options_.primary_address, " that this replica follows")));
    }
    if (!absl::IsNotFound(primary.status())) continue;
    // A shard that left the job (drained, the last one) and stopped:
    // nothing to take over; this replica stops too, as an operator
    // scaling the job down expects.
    if (absl::StatusOr<uint32_t> shards = MapShardCount(*store_, options_.job);
        shards.ok() && *shards != 0 && index >= static_cast<int>(*shards)) {
      LOG(WARNING) << "shard " << index << " left the job (its slot map counts "
                   << *shards << " shards): nothing to take over";
      return RequestStop(absl::OkStatus());
    }
    LOG(WARNING) << "shard " << index
                 << "'s registration is gone: promoting this replica";
    if (absl::Status promoted = TakeOver(); !promoted.ok()) {
      RequestStop(absl::Status(
          promoted.code(),
          absl::StrCat("promoting this replica failed: ", promoted.message())));
    }
    return;
  }
}

absl::Status PrimaryWatch::TakeOver() {
  RETURN_IF_ERROR(shard_->StopFollowing());
  const std::string promotion = NewPromotionToken();
  ASSIGN_OR_RETURN(const uint64_t generation, RaiseGeneration(promotion));
  ASSIGN_OR_RETURN(
      const ShardGeneration raised,
      ReadShardGeneration(*store_, options_.job, options_.own.index));
  if (raised.generation != generation || raised.promotion != promotion) {
    return absl::AbortedError(
        absl::StrCat("shard ", options_.own.index, "'s generation rose past ",
                     generation, " at once (another promotion)"));
  }
  RETURN_IF_ERROR(Register(raised));
  shard_->FenceBy(registration_.get());
  promoted_ = true;
  RETURN_IF_ERROR(shard_->Promote());
  RETURN_IF_ERROR(shard_->RecordInSyncSet());
  LOG(INFO) << "registered in etcd as " << ShardsPrefix(options_.job)
            << options_.own.index << " = " << options_.own.address
            << " (promoted; generation " << generation << ")";
  return shard_->CampaignForCoordinator(options_.own.address, options_.lease);
}

absl::StatusOr<uint64_t> PrimaryWatch::RaiseGeneration(
    const std::string& promotion) {
  const int index = options_.own.index;
  absl::StatusOr<uint64_t> raised_to;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSIGN_OR_RETURN(const ShardGeneration seen,
                     ReadShardGeneration(*store_, options_.job, index));
    // The raise holds only while the in-sync set is as checked: a primary
    // that drops this replica meanwhile is not replaced by it.
    ASSIGN_OR_RETURN(const std::optional<int64_t> in_sync_revision,
                     CheckInSync(seen));
    // The promotion is written into the data dir before etcd: once etcd
    // holds it, however it is cut short, the data dir is the newest and a
    // start finishes it (ChooseRole()).
    RETURN_IF_ERROR(WriteDataDirGeneration(options_.data_dir,
                                           seen.generation + 1, promotion));
    raised_to = RaiseShardGeneration(*store_, options_.job, index, seen,
                                     promotion, in_sync_revision);
    if (!absl::IsAborted(raised_to.status())) break;
  }
  return raised_to;
}

absl::Status PrimaryWatch::Register(const ShardGeneration& raised) {
  // The generation is raised: this replica alone may take the shard, so
  // etcd out of reach for a moment is waited out.
  const absl::Time give_up =
      absl::Now() + std::max(options_.lease, absl::Seconds(10));
  while (true) {
    absl::StatusOr<std::unique_ptr<LeasedKey>> registered = RegisterShard(
        store_, options_.job, options_.own, options_.lease, raised);
    if (registered.ok()) {
      registration_ = *std::move(registered);
      return absl::OkStatus();
    }
    const bool transient = absl::IsUnavailable(registered.status()) ||
                           absl::IsDeadlineExceeded(registered.status());
    if (!transient || absl::Now() >= give_up) return registered.status();
    LOG(WARNING) << "registering the promoted replica: " << registered.status()
                 << "; retrying";
    absl::SleepFor(options_.poll);
  }
}

absl::StatusOr<std::optional<int64_t>> PrimaryWatch::CheckInSync(
    const ShardGeneration& seen) {
  const int index = options_.own.index;
  ASSIGN_OR_RETURN(const auto ids, shard_->FeedAndFollower());
  absl::StatusOr<InSyncSet> set = ReadInSyncSet(*store_, options_.job, index);
  if (!set.ok() && !absl::IsNotFound(set.status())) return set.status();
  if (set.ok() && set->generation == seen.generation &&
      set->Holds(ids.first, ids.second)) {
    return std::optional<int64_t>(set->mod_revision);
  }
  const std::string why =
      set.ok() ? absl::StrCat("shard ", index, "'s recorded in-sync set (",
                              InSyncText(*set),
                              ") does not name this replica (feed ", ids.first,
                              ", follower ", ids.second, ")")
               : absl::StrCat("shard ", index, " has no recorded in-sync set");
  if (options_.allow_unclean_promotion) {
    LOG(WARNING) << why
                 << "; promoting anyway (--allow_unclean_promotion): pushes "
                    "the primary acknowledged may be lost";
    return std::optional<int64_t>();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      why,
      ": it may lack pushes the primary acknowledged, so it is not promoted "
      "(--allow_unclean_promotion promotes it anyway)"));
}

}  // namespace ps::cluster
