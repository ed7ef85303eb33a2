// File: base/slot_map.h
//
// SlotMap says which shard owns each of the kNumSlots key slots
// (base/routing.h), and the epoch of that assignment. The initial map of n
// shards gives slot s to shard s % n at epoch 1; every change makes a map of
// a larger epoch. The map also holds the job's shard count, which grows
// when a shard joins (under --etcd) and shrinks when the last one leaves
// owning nothing. Shards refuse keys of slots they do not own with
// SlotMovedError(), which names the epoch of their own map, so that a client
// that routed with an older map fetches a newer one and routes again.
//
// Immutable once built; thread-safe. About 64 KiB: hold it by shared_ptr
// where it changes.

#ifndef PS_BASE_SLOT_MAP_H_
#define PS_BASE_SLOT_MAP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/routing.h"
#include "proto/ps.pb.h"

namespace ps {

class SlotMap {
 public:
  // Slot s to shard s % num_shards, epoch 1. REQUIRES: num_shards > 0.
  static SlotMap Initial(uint32_t num_shards);

  // The map `spec` describes. INVALID_ARGUMENT unless its epoch is at least
  // 1, its ranges cover every slot once, in slot order, and its shard count
  // is above every shard they name. A spec without a count has
  // `num_shards_if_unset`, or with 0 one more than its highest shard.
  static absl::StatusOr<SlotMap> FromSpec(const SlotMapSpec& spec,
                                          uint32_t num_shards_if_unset = 0);

  // As ranges of consecutive slots of one shard, in slot order.
  SlotMapSpec ToSpec() const;

  uint64_t epoch() const { return epoch_; }
  // The job's shard count: 0 to num_shards() - 1, each of which may or may
  // not own slots.
  uint32_t num_shards() const { return num_shards_; }
  uint32_t ShardForSlot(uint32_t slot) const { return owners_[slot]; }
  uint32_t ShardForKey(uint64_t key) const { return owners_[SlotForKey(key)]; }
  // The largest shard index that owns a slot.
  uint32_t HighestShard() const;

  // This map with `num_shards` shards, at epoch + 1: a shard joined, or the
  // last left. REQUIRES: num_shards > HighestShard().
  SlotMap WithNumShards(uint32_t num_shards) const;

  // This map with slots first..last given to `shard`, at epoch + 1.
  // REQUIRES: first <= last < kNumSlots, shard < num_shards().
  SlotMap WithSlotsMoved(uint32_t first, uint32_t last, uint32_t shard) const;

  // This map with the slots of first..last that `from` owns given to `to`,
  // at epoch + 1. REQUIRES: first <= last < kNumSlots, to < num_shards().
  SlotMap WithSlotsMovedFrom(uint32_t first, uint32_t last, uint32_t from,
                             uint32_t to) const;

  // How many of first..last `shard` owns. REQUIRES: first <= last <
  // kNumSlots.
  uint32_t SlotsOwned(uint32_t first, uint32_t last, uint32_t shard) const;

  // The slots `shard` owns, as inclusive (first, last) ranges in slot order.
  std::vector<std::pair<uint32_t, uint32_t>> RangesOf(uint32_t shard) const;

  bool operator==(const SlotMap& other) const {
    return epoch_ == other.epoch_ && num_shards_ == other.num_shards_ &&
           owners_ == other.owners_;
  }

 private:
  SlotMap(uint64_t epoch, uint32_t num_shards, std::vector<uint32_t> owners)
      : epoch_(epoch), num_shards_(num_shards), owners_(std::move(owners)) {}

  uint64_t epoch_;
  uint32_t num_shards_;
  // kNumSlots entries: the shard of each slot.
  std::vector<uint32_t> owners_;
};

// protobuf's JSON of map.ToSpec(): how a map is kept in a file or in etcd.
std::string SlotMapToJson(const SlotMap& map);

// The map that JSON describes (SlotMap::FromSpec() of it); INVALID_ARGUMENT
// for text that is not a slot map.
absl::StatusOr<SlotMap> SlotMapFromJson(absl::string_view json,
                                        uint32_t num_shards_if_unset);

// "0-5460,5462" for ranges (first, last), a single slot as one number.
std::string FormatSlotRanges(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// The payload's type URL on an absl::Status, and the trailing metadata key
// of a gRPC reply, that carry the epoch of the refusing shard's map.
inline constexpr char kMovedPayload[] = "ps.moved";
inline constexpr char kMovedMetadata[] = "ps-moved";

// FAILED_PRECONDITION with `message`, marked with the epoch of the map by
// which the key's slot is not this shard's.
absl::Status SlotMovedError(absl::string_view message, uint64_t epoch);

// The epoch a SlotMovedError() carries; nothing for any other status.
std::optional<uint64_t> MovedEpoch(const absl::Status& status);

}  // namespace ps

#endif  // PS_BASE_SLOT_MAP_H_
