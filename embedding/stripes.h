// File: embedding/stripes.h
//
// Which lock stripe of the hot tier holds a key (embedding_store.h): the
// one its cell picks, a cell being a range of keys within one slot.
// RocksDB orders rows by slot, then key (RowKey), so a stripe's rows lie
// there in runs of neighbours, one run a cell, and a stripe's write-back
// inserts each row into the memtable next to the one before rather than
// among every other stripe's rows (a skiplist walk of cache misses per
// row). A slot holds num_stripes / 4 cells (at least one), so that a shard
// owning a 64th of the slots still spreads about 64 cells over each stripe
// (each stripe has a fixed share of the hot tier's budget); more cells
// would balance the stripes better and shorten the runs.

#ifndef PS_EMBEDDING_STRIPES_H_
#define PS_EMBEDDING_STRIPES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/routing.h"

namespace ps::embedding {

// log2 of the cells a slot holds for `num_stripes` stripes.
inline int CellBitsForStripes(size_t num_stripes) {
  const int floor_log2 = 63 - __builtin_clzll(num_stripes | 1);
  return std::max(0, floor_log2 - 2);
}

// Which stripe holds a key, for one stripe count: in [0, num_stripes).
// Fibonacci hashing of the cell (the slot, then the key's top bits)
// spreads cells evenly over the stripes whichever slots a shard owns (every
// num_shards-th, or a range after a move). The hash's remainder by
// num_stripes is taken by two multiplies with a fraction computed once
// (Lemire, Kaser and Kurz, "Faster Remainder by Direct Computation"),
// exact for 32-bit numbers, rather than by a 64-bit division per key.
// Immutable once made: thread-safe.
class StripeMap {
 public:
  // REQUIRES: 0 < num_stripes < 2^32.
  explicit StripeMap(size_t num_stripes)
      : num_stripes_(num_stripes),
        cell_bits_(CellBitsForStripes(num_stripes)),
        fraction_(~uint64_t{0} / num_stripes + 1) {}

  size_t StripeOf(uint64_t key) const {
    uint64_t cell = uint64_t{SlotForKey(key)} << cell_bits_;
    if (cell_bits_ > 0) cell |= key >> (64 - cell_bits_);
    const uint64_t hash = (cell * 0x9E3779B97F4A7C15ULL) >> 32;
    const uint64_t remainder_fraction = fraction_ * hash;
    return static_cast<size_t>(
        (static_cast<unsigned __int128>(remainder_fraction) * num_stripes_) >>
        64);
  }

  size_t num_stripes() const { return num_stripes_; }

 private:
  uint64_t num_stripes_;
  int cell_bits_;
  uint64_t fraction_;  // 2^64 / num_stripes, rounded up (0 for one stripe)
};

// StripeMap(num_stripes).StripeOf(key), for a one-off question.
// REQUIRES: 0 < num_stripes < 2^32.
inline size_t StripeForKey(uint64_t key, size_t num_stripes) {
  return StripeMap(num_stripes).StripeOf(key);
}

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STRIPES_H_
