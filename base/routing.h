// File: base/routing.h
//
// Where a key lives. A key maps to one of kNumSlots slots by a fixed hash, and
// a slot to a shard by the slot map (base/slot_map.h), which starts as
// `slot % num_shards`. Slots, not raw modulo, so that shards can be added by
// moving whole slots, as Redis Cluster does. Workers and servers must agree on this exactly, so it is
// one header that both include; it is pure and thread-safe.

#ifndef PS_BASE_ROUTING_H_
#define PS_BASE_ROUTING_H_

#include <cstdint>

namespace ps {

inline constexpr uint32_t kNumSlots = 16384;

// The version of the mapping below; a data dir records the one that placed
// its rows (server/shard_identity.h). Changing SlotForKey() or ShardForKey()
// means a new version, and data dirs of the old one need a re-routing.
inline constexpr uint32_t kRoutingVersion = 1;

// SlotForKey() returns the slot of `key` in [0, kNumSlots). Keys are already
// XXH3 hashes, but a finalizer (splitmix64's) is applied so that slots stay
// uniform even for keys a test or user picks by hand (0, 1, 2, ...).
inline uint32_t SlotForKey(uint64_t key) {
  key ^= key >> 30;
  key *= 0xbf58476d1ce4e5b9ULL;
  key ^= key >> 27;
  key *= 0x94d049bb133111ebULL;
  key ^= key >> 31;
  return static_cast<uint32_t>(key % kNumSlots);
}

// ShardForKey() returns the shard in [0, num_shards) that owns `key`.
// REQUIRES: num_shards > 0.
inline uint32_t ShardForKey(uint64_t key, uint32_t num_shards) {
  return SlotForKey(key) % num_shards;
}

}  // namespace ps

#endif  // PS_BASE_ROUTING_H_
