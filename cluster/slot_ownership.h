// File: cluster/slot_ownership.h
//
// SlotOwnership is a shard's copy of the slot map (base/slot_map.h): what
// its data service checks every key against. It is kept in
// <data_dir>/SLOT_MAP.json, written whole and durably; a data dir without
// one starts from the initial map of the shard count. The map changes only
// by Replace(), which names the epoch it replaces (a compare-and-swap), so
// that two administrators never overwrite each other's change unseen, or,
// under --etcd, by Adopt() of the map the cluster keeps there
// (cluster/etcd_slot_map.h).
//
// Thread-safe: current() hands out the map by shared_ptr; a Replace() while
// a request holds the old one does not disturb it.

#ifndef PS_CLUSTER_SLOT_OWNERSHIP_H_
#define PS_CLUSTER_SLOT_OWNERSHIP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/slot_map.h"

namespace ps::cluster {

class SlotOwnership {
 public:
  // The map of `data_dir`, or the initial map of `num_shards` (written
  // there) if it has none. A file written before maps held their shard
  // count has `num_shards` shards. DATA_LOSS for a file that does not parse
  // or names a shard beyond its count.
  static absl::StatusOr<std::unique_ptr<SlotOwnership>> Open(
      const std::string& data_dir, uint32_t num_shards);

  // Records `map` as the one a new data dir starts from (a restore's).
  static absl::Status Create(const std::string& data_dir, const SlotMap& map);

  // Held shared by each push from its ownership check until it is applied
  // (server/data_service.cc), and exclusively by every change of the map:
  // a change waits for the pushes in flight, and no push is applied by a
  // map that changed under it.
  absl::Mutex& push_lock() const { return push_lock_; }

  // The current map's shard count.
  uint32_t num_shards() const { return current()->num_shards(); }

  std::shared_ptr<const SlotMap> current() const {
    absl::MutexLock lock(&mu_);
    return current_;
  }

  // Makes `next` the map if the current one's epoch is `expected_epoch` and
  // next's is larger; FAILED_PRECONDITION naming the current epoch if not,
  // or if next's shard count is another (the count changes only under
  // --etcd, by Adopt()). OK with nothing done if
  // `next` is the current map already (a repeated change). The file's
  // errors, with the map unchanged.
  absl::Status Replace(uint64_t expected_epoch, const SlotMap& next);

  // Makes `next` the map if its epoch is larger than the current one's
  // (a map the cluster agreed on elsewhere: etcd); OK with nothing done if
  // it is not, whatever its shard count (a shard joined or left). The
  // file's errors.
  absl::Status Adopt(const SlotMap& next);

  // Adopt() of the map `agree` returns, `agree` running while this shard
  // applies no push: for a change agreed elsewhere first (etcd's
  // compare-and-swap), so that the shard applies no push by the old map
  // once the new one is agreed. agree()'s error leaves the map unchanged.
  absl::Status AdoptAgreed(
      const std::function<absl::StatusOr<SlotMap>()>& agree);

 private:
  SlotOwnership(std::string path, std::shared_ptr<const SlotMap> map)
      : path_(std::move(path)), current_(std::move(map)) {}

  // Adopt() with push_lock_ held.
  absl::Status AdoptLocked(const SlotMap& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(push_lock_);

  const std::string path_;
  mutable absl::Mutex push_lock_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const SlotMap> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_SLOT_OWNERSHIP_H_
