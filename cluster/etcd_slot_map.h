// File: cluster/etcd_slot_map.h
//
// Under --etcd, the job's slot map lives in etcd, at /ps/<job>/slot_map
// (protobuf's JSON of SlotMapSpec), and changes only by a compare-and-swap
// on the key's revision. EtcdSlotMap keeps one shard's copy
// (cluster/slot_ownership.h) in step with it: Start() reads it before the
// shard serves (creating it from the shard's own map when the job has
// none), then a thread follows it, a watch adopting each change as it is
// made and a read every `resync_interval` catching up on whatever a watch
// missed (etcd restarted, a member lost). Propose() is how an
// administrator's SetSlotMap changes it, on whichever shard is asked.
// Join() is how a shard started beyond the job's shard count becomes one
// of its shards (owning no slot until a rebalance gives it some).
//
// Does not own the client or the ownership, which must outlive it.
// Thread-safe.

#ifndef PS_CLUSTER_ETCD_SLOT_MAP_H_
#define PS_CLUSTER_ETCD_SLOT_MAP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/slot_map.h"
#include "cluster/coordination_store.h"
#include "cluster/slot_ownership.h"

namespace ps::cluster {

class EtcdSlotMap {
 public:
  // What the shard's own map placed: nothing, in a data dir that holds no
  // table (a new one: its map, the initial one of --num_shards, is a guess
  // that etcd's overrides); the rows of a data dir that holds tables; or a
  // checkpoint's rows, restored at this start.
  enum class OwnMap { kEmptyDataDir, kDataDirWithTables, kRestored };

  // FAILED_PRECONDITION when the shard's own map, of a dir with tables, is
  // newer than etcd's (the job's state in etcd was lost: serving by either
  // could misplace rows) or of the same epoch but another, or, restored
  // from a checkpoint at this start, other than etcd's (its rows were
  // placed by the checkpoint's map); etcd's errors.
  static absl::StatusOr<std::unique_ptr<EtcdSlotMap>> Start(
      CoordinationStore* etcd, const std::string& job, SlotOwnership* slots,
      OwnMap own_map, absl::Duration resync_interval = absl::Seconds(2));

  // Stops following.
  ~EtcdSlotMap();

  // Changes the job's map from `expected_epoch` to `next`, in etcd first,
  // then here. OK if etcd holds `next` already; FAILED_PRECONDITION when
  // etcd's map is at another epoch (adopted here, so that the caller reads
  // it again) or changed meanwhile; etcd's errors.
  // FAILED_PRECONDITION also for a map of more shards than etcd's: only
  // Join() adds a shard, the joining one itself.
  absl::Status Propose(uint64_t expected_epoch, const SlotMap& next);

  // Makes `shard_index` one of the job's shards: nothing when the map
  // counts it already; the count raised by one when it is the next index;
  // for a later one, waits (logging) for the shards before it to join,
  // for up to `wait`, then FAILED_PRECONDITION naming them. Call once the
  // shard is registered, so that a worker that learns of it finds it.
  absl::Status Join(uint32_t shard_index, absl::Duration wait);

  // Reads etcd's map now and adopts it if it is newer: for a replica
  // promoted to primary, whose map followed etcd at its own pace, before
  // it takes pushes (a map behind would take pushes for slots that moved
  // away). OK when etcd holds no map; etcd's errors.
  absl::Status CatchUp();

 private:
  EtcdSlotMap(CoordinationStore* etcd, std::string key, SlotOwnership* slots,
              absl::Duration resync_interval)
      : etcd_(etcd),
        key_(std::move(key)),
        slots_(slots),
        resync_interval_(resync_interval) {}

  // etcd's map and the revision that last changed it; NOT_FOUND if none.
  absl::StatusOr<std::pair<SlotMap, int64_t>> Read();
  // Adopts what a watch saw at the key.
  void OnEvent(const net::EtcdEvent& event);
  // The follower thread's loop.
  void Follow();

  CoordinationStore* const etcd_;
  const std::string key_;
  SlotOwnership* const slots_;
  const absl::Duration resync_interval_;
  absl::Notification stop_;
  std::thread follower_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_ETCD_SLOT_MAP_H_
