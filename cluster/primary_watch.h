// File: cluster/primary_watch.h
//
// Under --etcd, a replica's watch of its primary's registration. Once the
// key is gone (the primary stopped, or was paused or died past its lease)
// the replica is promoted: it stops following, raises the shard's
// generation (so that the old primary never takes the shard back),
// registers in the primary's place, is fenced by that registration, takes
// pushes and runs for the coordinator. If another process took the index
// first (the primary came back, or another replica was promoted), or the
// shard is registered at another address than the one this replica
// follows, the replica cannot follow any more: it asks to stop, to be
// copied again. A shard that left the job leaves nothing to take over: it
// asks to stop cleanly.
//
// The watch never stops its process itself: its owner reads StopRequest()
// and acts on it. Does not own the store or the shard, which must outlive
// it. Thread-safe.

#ifndef PS_CLUSTER_PRIMARY_WATCH_H_
#define PS_CLUSTER_PRIMARY_WATCH_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_control.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

struct PromotionOptions {
  // REQUIRED: the job, and what this replica registers once promoted.
  std::string job;
  ShardRecord own;
  // REQUIRED: the address of the primary this replica follows.
  std::string primary_address;
  // REQUIRED: the replica's data dir (its GENERATION file).
  std::string data_dir;
  // The registration's lease once promoted. Default: 10 s.
  absl::Duration lease = absl::Seconds(10);
  // Whether the shard's processes find their roles (--replicas): a
  // replica that stopped following asks to stop, to be restarted and copy
  // anew. Default: false (it keeps waiting for its primary's key to go).
  bool finds_roles = false;
  // Whether to take the shard over when the recorded in-sync set does not
  // name this replica (--allow_unclean_promotion). Default: false.
  bool allow_unclean_promotion = false;
  // How often the primary's key is looked at. Default: 250 ms.
  absl::Duration poll = absl::Milliseconds(250);
};

class PrimaryWatch {
 public:
  // Starts watching on a thread of its own.
  PrimaryWatch(CoordinationStore* store, ShardControl* shard,
               PromotionOptions options);
  ~PrimaryWatch() { Stop(); }

  // Stops the watch (a promotion in progress finishes first).
  void Stop();

  // Set once the watch asks its process to stop: OK when the shard left
  // the job; the reason when this replica cannot go on (it stopped
  // following, another process serves the shard, its promotion failed).
  // Unset while it watches, and once it was promoted.
  std::optional<absl::Status> StopRequest() const;

  // Set once promoted (null before, and while promoting).
  const LeasedKey* registration() const {
    return promoted_.load() ? registration_.get() : nullptr;
  }
  // The registration, to be released after the shard's FenceBy(nullptr);
  // only after Stop().
  std::unique_ptr<LeasedKey> TakeRegistration() {
    return std::move(registration_);
  }

 private:
  void Run();
  // Asks the process to stop, for `reason` (OK: cleanly).
  void RequestStop(absl::Status reason);
  // Stops following, raises the shard's generation, registers in the
  // primary's place, and only then takes pushes. A failure before the
  // registration leaves a replica (its data dir still one), to be copied
  // again.
  absl::Status TakeOver();
  // The in-sync set's mod revision when the primary's recorded set (at
  // generation `seen`) names this replica; nothing when it does not but
  // allow_unclean_promotion says to go on anyway; FAILED_PRECONDITION
  // otherwise: the replica may lack acknowledged pushes.
  absl::StatusOr<std::optional<int64_t>> CheckInSync(
      const ShardGeneration& seen);
  // Raises the generation from what etcd holds, for `promotion`, the
  // in-sync set checked each time (it may change between the check and
  // the raise); the generation raised to.
  absl::StatusOr<uint64_t> RaiseGeneration(const std::string& promotion);
  // Registers at `raised`, waiting out etcd out of reach for a while.
  absl::Status Register(const ShardGeneration& raised);

  CoordinationStore* const store_;
  ShardControl* const shard_;
  const PromotionOptions options_;
  // Written by the thread before promoted_ is set, or after it ended.
  std::unique_ptr<LeasedKey> registration_;
  std::atomic<bool> promoted_{false};
  mutable absl::Mutex mu_;
  std::optional<absl::Status> stop_request_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_PRIMARY_WATCH_H_
