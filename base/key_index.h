// File: base/key_index.h
//
// KeyIndex maps 64-bit keys to 64-bit values for lookups at random that a
// prefetch a few keys ahead of each makes cache hits: an export's rows read
// into memory (key -> the row's offset), a batch's keys (key -> position).
// Open addressing with linear probing of 16-byte slots, at most three
// quarters full: a key lies in the 64-byte line its hash names 78-93% of
// the time (from three quarters full to three eighths), the line Prefetch()
// fetches. absl::flat_hash_map's prefetch() fetches the first of the four
// lines a probe group of its 16-byte slots spans; micro_bench's
// BM_ExportLookup compares the two. Where a fresh index is filled for a
// few thousand keys and dropped, the map is faster (it clears only its
// control bytes; BM_KeyPositions).
//
// Keys are expected to be hashes (feature keys are): the home slot is the
// key times a constant (Fibonacci hashing), which spreads random and
// sequential keys alike but sends keys that are multiples of that
// constant into few slots. A full mix (MurmurHash3's finalizer) made
// lookups half again as slow.
//
// Any key may be stored (none is reserved); values up to kMaxValue (a
// larger one corrupts the index, checked only in debug builds). Not
// thread-safe to modify; while it is not modified, any number of threads
// may call its const methods. The slots lie on huge pages
// (base/huge_pages.h) unless made with huge_pages false.

#ifndef PS_BASE_KEY_INDEX_H_
#define PS_BASE_KEY_INDEX_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/huge_pages.h"

namespace ps {

class KeyIndex {
 public:
  static constexpr uint64_t kMaxValue = ~uint64_t{0} - 2;  // ~0 - kBias

  explicit KeyIndex(bool huge_pages = true);

  // Room for `keys` keys without growing: each key held, and each one a
  // later TryEmplace() adds, counts once, erased or not.
  void Reserve(size_t keys);
  // What bytes() is after Reserve(keys) on an empty index.
  static size_t ReservedBytes(size_t keys) {
    return SlotsFor(keys) * sizeof(Slot);
  }

  // Stores key -> value unless the key is there: returns the stored value
  // and whether it was added now.
  std::pair<uint64_t, bool> TryEmplace(uint64_t key, uint64_t value);

  // Removes the key; false if it was not there.
  bool Erase(uint64_t key);
  // Removes every key and makes room for `keys` as Reserve() does, in the
  // slots it has unless they are over four times as many as that needs:
  // an index reused for sets of keys of different sizes.
  void Reset(size_t keys);

  // The key's value, or nullopt.
  std::optional<uint64_t> Find(uint64_t key) const {
    if (slots_.empty()) return std::nullopt;
    for (size_t i = HomeSlot(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.stored == kEmpty) return std::nullopt;
      if (slot.key == key && slot.stored != kErased) return slot.stored - kBias;
    }
  }

  // Brings the line Find(key) will read first into the cache.
  void Prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[HomeSlot(key)]);
  }

  // Calls fn(key, value) for every key, in no particular order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const Slot& slot : slots_) {
      if (slot.stored >= kBias) fn(slot.key, slot.stored - kBias);
    }
  }

  size_t size() const { return size_; }
  // The memory the slots take.
  size_t bytes() const { return slots_.capacity() * sizeof(Slot); }

 private:
  // 16 bytes, four to a cache line. `stored` is the value plus kBias, or
  // kEmpty (never used: ends a probe) or kErased (skipped by a probe).
  struct Slot {
    uint64_t key;
    uint64_t stored;
  };
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kErased = 1;
  static constexpr uint64_t kBias = 2;

  // At most three quarters full: a probe reads a few 16-byte slots, most
  // often in the line Prefetch() brought (BM_ExportLookup at 0.41 and 0.74
  // full).
  static size_t SlotsFor(size_t keys) {
    size_t slots = 16;
    while (3 * slots < 4 * keys) slots *= 2;
    return slots;
  }
  static constexpr uint64_t kFibonacci = 0x9E3779B97F4A7C15ULL;
  size_t HomeSlot(uint64_t key) const {
    // Fibonacci hashing: the product's high bits depend on every bit of
    // the key.
    return static_cast<size_t>((key * kFibonacci) >> shift_);
  }
  // Rebuilds with `capacity` slots (a power of two), dropping erased ones.
  void Rehash(size_t capacity);

  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
  // Slots holding a key or an erasure: what makes probes longer.
  size_t used_ = 0;
};

// Inline: the loops that fill an index call it for every key.
inline std::pair<uint64_t, bool> KeyIndex::TryEmplace(uint64_t key,
                                                      uint64_t value) {
  assert(value <= kMaxValue);
  if (slots_.empty()) Rehash(SlotsFor(0));
  size_t first_erased = slots_.size();
  size_t i = HomeSlot(key);
  for (;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.stored == kEmpty) break;
    if (slot.stored == kErased) {
      if (first_erased == slots_.size()) first_erased = i;
    } else if (slot.key == key) {
      return {slot.stored - kBias, false};
    }
  }
  if (first_erased < slots_.size()) {
    // Not there: into the first erased slot on the way, using up nothing.
    slots_[first_erased] = Slot{key, value + kBias};
  } else {
    // Into the empty slot that ended the probe, unless that would fill
    // over three quarters of the slots (erased ones lengthen probes as keys
    // do): then twice as many slots if over three eighths hold keys, else
    // as many again without the erasures, and the probe anew.
    if (4 * (used_ + 1) > 3 * slots_.size()) {
      size_t capacity = slots_.size();
      if (8 * (size_ + 1) > 3 * capacity) capacity *= 2;
      Rehash(capacity);
      for (i = HomeSlot(key); slots_[i].stored != kEmpty; i = (i + 1) & mask_) {
      }
    }
    slots_[i] = Slot{key, value + kBias};
    ++used_;
  }
  ++size_;
  return {value, true};
}

}  // namespace ps

#endif  // PS_BASE_KEY_INDEX_H_
