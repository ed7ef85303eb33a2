// File: cluster/shard_control.h
//
// ShardControl is what the cluster's rules (a primary's registration, a
// replica's promotion) ask of the shard they run for, so that they live
// here, unit-tested with a fake shard, while server::ShardServer
// implements it. The cluster decides when; the shard does.

#ifndef PS_CLUSTER_SHARD_CONTROL_H_
#define PS_CLUSTER_SHARD_CONTROL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

class ShardControl {
 public:
  virtual ~ShardControl() = default;

  // Pushes are taken only while `registration` is held (null: no fence).
  virtual void FenceBy(const LeasedKey* registration) = 0;
  // Records which replicas are in sync (cluster/shard_directory.h's
  // InSyncSet) before any push is taken; FAILED_PRECONDITION once the
  // shard's generation moved.
  virtual absl::Status RecordInSyncSet() = 0;
  // Waits up to `wait` to join the job's slot map (a shard beyond the
  // job's count); nothing for one within it.
  virtual absl::Status JoinJob(absl::Duration wait) = 0;
  // Runs for the job's clock coordinator as `address`, under `lease`.
  virtual absl::Status CampaignForCoordinator(const std::string& address,
                                              absl::Duration lease) = 0;

  // A replica's: why it stopped following its primary (OK while it follows).
  virtual absl::Status FollowingError() const = 0;
  // A replica's: its place in its primary's feed (the feed's id, its own).
  virtual absl::StatusOr<std::pair<uint64_t, uint64_t>> FeedAndFollower()
      const = 0;
  // A replica's promotion, first and last steps: stop following (its copy
  // keeps what it applied), then serve as the primary.
  virtual absl::Status StopFollowing() = 0;
  virtual absl::Status Promote() = 0;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_SHARD_CONTROL_H_
