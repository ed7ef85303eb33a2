// File: embedding/stripes.h
//
// Which lock stripe of the hot tier holds a key (embedding_store.h): the
// one its slot picks. RocksDB orders rows by slot, then key (RowKey), so a
// stripe's rows lie there in runs of neighbours, and a stripe's write-back
// inserts each row into the memtable next to the one before rather than
// among every other stripe's rows (a skiplist walk of cache misses per
// row).

#ifndef PS_EMBEDDING_STRIPES_H_
#define PS_EMBEDDING_STRIPES_H_

#include <cstddef>
#include <cstdint>

#include "base/routing.h"

namespace ps::embedding {

// In [0, num_stripes). Fibonacci hashing of the slot spreads slots evenly
// over the stripes whichever slots a shard owns (every num_shards-th, or a
// range after a move). REQUIRES: num_stripes > 0.
inline size_t StripeForKey(uint64_t key, size_t num_stripes) {
  const uint64_t slot = SlotForKey(key);
  return ((slot * 0x9E3779B97F4A7C15ULL) >> 32) % num_stripes;
}

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STRIPES_H_
