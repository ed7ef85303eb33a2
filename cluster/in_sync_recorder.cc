#include "cluster/in_sync_recorder.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::cluster {

absl::StatusOr<std::unique_ptr<InSyncRecorder>> InSyncRecorder::Start(
    CoordinationStore* etcd, InSyncFeed* feed,
    const InSyncRecorderOptions& options) {
  auto recorder =
      std::unique_ptr<InSyncRecorder>(new InSyncRecorder(etcd, feed, options));
  // etcd out of reach for a moment is waited out (a promoted replica's
  // first record: without it no replica of the shard is promotable).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  absl::Status recorded;
  do {
    absl::StatusOr<ShardGeneration> at =
        ReadShardGeneration(*etcd, options.job, options.index);
    recorded = at.status();
    if (at.ok()) {
      recorder->at_ = *at;
      recorded = recorder->RecordIfChanged();
    }
    if (recorded.ok() || absl::IsFailedPrecondition(recorded)) break;
    LOG(WARNING) << "recording the in-sync set: " << recorded << "; retrying";
    absl::SleepFor(absl::Milliseconds(250));
  } while (absl::Now() < give_up);
  RETURN_IF_ERROR(recorded);
  recorder->thread_ = std::thread([raw = recorder.get()] { raw->Run(); });
  return recorder;
}

InSyncRecorder::~InSyncRecorder() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status InSyncRecorder::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status InSyncRecorder::RecordIfChanged() {
  std::vector<uint64_t> in_sync = feed_->InSyncFollowers();
  std::sort(in_sync.begin(), in_sync.end());
  if (recorded_.has_value()) {
    // Below the least, those that dropped out stay: no push is
    // acknowledged without them from now on.
    for (uint64_t id : *recorded_) {
      if (in_sync.size() >= options_.min_in_sync) break;
      if (std::find(in_sync.begin(), in_sync.end(), id) == in_sync.end())
        in_sync.push_back(id);
    }
    std::sort(in_sync.begin(), in_sync.end());
    if (*recorded_ == in_sync) return absl::OkStatus();
  }
  InSyncSet set;
  set.generation = at_.generation;
  set.feed = feed_->id();
  set.followers = in_sync;
  // While etcd may come to hold either set, a follower of either holds
  // pushes back (one joining the record that drops out meanwhile too), and
  // only one of both counts as in sync: a promotion may take it whichever
  // set etcd keeps.
  if (recorded_.has_value()) {
    std::vector<uint64_t> either = *recorded_, both;
    either.insert(either.end(), in_sync.begin(), in_sync.end());
    std::sort(either.begin(), either.end());
    either.erase(std::unique(either.begin(), either.end()), either.end());
    std::set_intersection(recorded_->begin(), recorded_->end(), in_sync.begin(),
                          in_sync.end(), std::back_inserter(both));
    feed_->SetRecordedInSync(std::move(either), std::move(both));
  }
  RETURN_IF_ERROR(
      WriteInSyncSet(*etcd_, options_.job, options_.index, at_, set));
  LOG(INFO) << "shard " << options_.index << "'s replicas in sync: "
            << (in_sync.empty() ? std::string("none")
                                : absl::StrJoin(in_sync, ", "))
            << " (recorded in etcd)";
  feed_->SetRecordedInSync(in_sync);
  recorded_ = std::move(in_sync);
  return absl::OkStatus();
}

void InSyncRecorder::Run() {
  while (!stop_.WaitForNotificationWithTimeout(options_.interval)) {
    absl::Status recorded = RecordIfChanged();
    if (absl::IsFailedPrecondition(recorded)) {
      LOG(ERROR) << "no longer recording the in-sync set: " << recorded;
      absl::MutexLock lock(&mu_);
      status_ = recorded;
      return;
    }
    LOG_IF_EVERY_N(WARNING, !recorded.ok(), 50)
        << "recording the in-sync set: " << recorded << "; retrying";
  }
}

}  // namespace ps::cluster
