// File: cluster/fake_shard.h
//
// A ShardControl for the cluster's unit tests: it does nothing but record
// what it was asked, in order, and answer as the test set it to.
// Thread-safe (a primary watch calls it from its thread).

#ifndef PS_CLUSTER_FAKE_SHARD_H_
#define PS_CLUSTER_FAKE_SHARD_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cluster/shard_control.h"

namespace ps::cluster {

class FakeShard final : public ShardControl {
 public:
  void FenceBy(const LeasedKey* registration) override {
    absl::MutexLock lock(&mu_);
    fence_ = registration;
    calls_.push_back(registration != nullptr ? "FenceBy" : "Unfence");
  }
  absl::Status RecordInSyncSet() override { return Call("RecordInSyncSet"); }
  absl::Status JoinJob(absl::Duration) override { return Call("JoinJob"); }
  absl::Status CampaignForCoordinator(const std::string&,
                                      absl::Duration) override {
    return Call("CampaignForCoordinator");
  }
  absl::Status FollowingError() const override {
    absl::MutexLock lock(&mu_);
    return following_error_;
  }
  absl::StatusOr<std::pair<uint64_t, uint64_t>> FeedAndFollower()
      const override {
    return std::make_pair(uint64_t{7}, uint64_t{3});
  }
  absl::Status StopFollowing() override { return Call("StopFollowing"); }
  absl::Status Promote() override { return Call("Promote"); }

  // The next call named `call` answers `status`.
  void Fail(const std::string& call, absl::Status status) {
    absl::MutexLock lock(&mu_);
    failing_call_ = call;
    failure_ = std::move(status);
  }
  void StopFollowingWith(absl::Status error) {
    absl::MutexLock lock(&mu_);
    following_error_ = std::move(error);
  }
  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  const LeasedKey* fence() const {
    absl::MutexLock lock(&mu_);
    return fence_;
  }

 private:
  absl::Status Call(const std::string& call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(call);
    if (call != failing_call_) return absl::OkStatus();
    failing_call_.clear();
    return failure_;
  }

  mutable absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  const LeasedKey* fence_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Status following_error_ ABSL_GUARDED_BY(mu_);
  std::string failing_call_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_FAKE_SHARD_H_
