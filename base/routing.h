// File: base/routing.h
//
// Where a key lives. A key maps to one of kNumSlots slots by a fixed hash, and
// a slot to a shard by the slot map (base/slot_map.h), which starts as
// `slot % num_shards`. Slots, not raw modulo, so that shards can be added by
// moving whole slots, as Redis Cluster does. Workers and servers must agree on
// this exactly, so it is one header that both include; it is pure and
// thread-safe.

#ifndef PS_BASE_ROUTING_H_
#define PS_BASE_ROUTING_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

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

// A key as stored (RocksDB rows, exports): its slot (2 bytes), then the key
// (8 bytes), both big-endian, so that bytewise order is slot order, then
// key order, and one slot's keys are one range.
class SlotOrderedKey {
 public:
  static constexpr size_t kBytes = 10;

  explicit SlotOrderedKey(uint64_t key) {
    PutSlot(SlotForKey(key));
    for (int i = 0; i < 8; ++i)
      bytes_[2 + i] = static_cast<char>(key >> (56 - 8 * i));
  }
  // Below every key of `slot` and above those of the slots before it;
  // `slot` may be kNumSlots (above every key).
  static SlotOrderedKey SlotStart(uint32_t slot) {
    SlotOrderedKey start;
    start.PutSlot(slot);
    std::memset(start.bytes_ + 2, 0, 8);
    return start;
  }
  // The key of kBytes stored bytes.
  static uint64_t Decode(const char* bytes) {
    uint64_t key = 0;
    for (size_t i = 2; i < kBytes; ++i)
      key = (key << 8) | static_cast<unsigned char>(bytes[i]);
    return key;
  }

  const char* data() const { return bytes_; }
  static constexpr size_t size() { return kBytes; }

 private:
  SlotOrderedKey() = default;
  void PutSlot(uint32_t slot) {
    bytes_[0] = static_cast<char>(slot >> 8);
    bytes_[1] = static_cast<char>(slot);
  }
  char bytes_[kBytes];
};

}  // namespace ps

#endif  // PS_BASE_ROUTING_H_
