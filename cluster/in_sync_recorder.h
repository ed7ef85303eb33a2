// File: cluster/in_sync_recorder.h
//
// InSyncRecorder keeps a primary's in-sync set in etcd
// (shard_directory.h's InSyncSet) in step with its replication feed (an
// InSyncFeed: embedding::ReplicationFeed, through server/shard_server):
// every `interval` it compares the feed's followers in sync with what it
// recorded, writes the new set at the shard's generation, and only then
// tells the feed (InSyncFeed::SetRecordedInSync()), whose sync waits
// hold a push back while a recorded follower lacks it. So a replica leaves
// the record before any push it lacks is acknowledged, and a replica that
// the record names holds every acknowledged push: the one a promotion may
// take. While etcd cannot be written, a shrink waits (and with it the
// pushes); once the shard's generation moved (a replica was promoted) the
// recorder stops and says so.
//
// Does not own the client or the feed, which must outlive it. Thread-safe.

#ifndef PS_CLUSTER_IN_SYNC_RECORDER_H_
#define PS_CLUSTER_IN_SYNC_RECORDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

// What the recorder needs of a primary's replication feed.
class InSyncFeed {
 public:
  virtual ~InSyncFeed() = default;
  // The feed's id, which its followers' ids are of.
  virtual uint64_t id() const = 0;
  // The followers in sync now, ascending.
  virtual std::vector<uint64_t> InSyncFollowers() = 0;
  // The set as recorded in etcd: a sync wait needs each of `followers`,
  // and only `counted` (default: all of them) count as in sync.
  virtual void SetRecordedInSync(
      std::vector<uint64_t> followers,
      std::optional<std::vector<uint64_t>> counted = std::nullopt) = 0;
};

struct InSyncRecorderOptions {
  // The job and the shard's index. REQUIRED.
  std::string job;
  int index = 0;
  // The primary's --min_in_sync_replicas: a replica that drops out is kept
  // in the record while fewer than this many would be left (no push is
  // acknowledged without that many recorded replicas in sync, so it holds
  // every acknowledged push and stays the one a promotion may take).
  // Default: 0.
  uint32_t min_in_sync = 0;
  // How often the feed's set is compared with the record (a replica that
  // caught up counts only once recorded). Default: 20 ms.
  absl::Duration interval = absl::Milliseconds(20);
};

class InSyncRecorder {
 public:
  // Reads the shard's generation (the one this primary registered at),
  // records the feed's set once, then keeps it in step on a thread of its
  // own. The errors of the first write (FAILED_PRECONDITION: the generation
  // moved).
  static absl::StatusOr<std::unique_ptr<InSyncRecorder>> Start(
      CoordinationStore* etcd, InSyncFeed* feed,
      const InSyncRecorderOptions& options);
  ~InSyncRecorder();

  // OK while recording; why it stopped otherwise.
  absl::Status status() const;

 private:
  InSyncRecorder(CoordinationStore* etcd, InSyncFeed* feed,
                 const InSyncRecorderOptions& options)
      : etcd_(etcd), feed_(feed), options_(options) {}

  // Records the feed's set if it changed since the last record.
  absl::Status RecordIfChanged();
  void Run();

  CoordinationStore* const etcd_;
  InSyncFeed* const feed_;
  const InSyncRecorderOptions options_;
  ShardGeneration at_;
  // Only the recording thread (and Start() before it) touch it.
  std::optional<std::vector<uint64_t>> recorded_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_IN_SYNC_RECORDER_H_
