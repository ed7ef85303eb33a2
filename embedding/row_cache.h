// File: embedding/row_cache.h
//
// One stripe of the hot tier: a map from (table, key) to a row's floats,
// bounded by a byte budget, evicting with second chance (CLOCK), an
// approximation of LRU: a hit only sets a bit, instead of relinking a list
// node (which cost a third of the server's CPU on pulls), and eviction gives
// rows hit since they were last examined another round. A row is dirty when it
// holds an update that RocksDB does not have yet; evicting a dirty row hands a
// copy back to the caller for write-back, so nothing is dropped.
//
// Memory: a row is one heap block, its header followed by its floats, linked
// into the stripe's CLOCK list; the index maps (table, key) to the block:
// one allocation per row, and bookkeeping smaller than a dim-16 SGD row's
// 64 bytes of floats.
//
// Not thread-safe: the store holds the stripe's mutex around every call.
// Pointers returned by Find(), FindValues() and Insert() stay valid until
// their row is evicted (blocks never move).

#ifndef PS_EMBEDDING_ROW_CACHE_H_
#define PS_EMBEDDING_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace ps::embedding {

// A cached row; owned by its RowCache.
class CachedRow {
 public:
  CachedRow(const CachedRow&) = delete;
  CachedRow& operator=(const CachedRow&) = delete;

  // Weights followed by optimizer state.
  absl::Span<float> values() { return absl::MakeSpan(floats(), size_); }
  absl::Span<const float> values() const {
    return absl::MakeConstSpan(floats(), size_);
  }

  const uint32_t table_id;
  // When a push last updated the row, in seconds since the Unix epoch (0:
  // not known, for rows stored before rows carried it), and how many pushes
  // updated it (saturating): what expiry goes by. In the header's padding.
  uint32_t updated_at_s = 0;
  const uint64_t key;
  bool dirty;
  // Bumped by every update, so that a write-back that copied the row can
  // tell, once written, whether the row changed since (and is still dirty).
  uint32_t version = 0;
  // The push-log sequence (of the row's stripe, in the current log epoch) of
  // the last update `values` include; 0 for none (embedding_store.h).
  uint64_t log_sequence = 0;
  uint32_t push_count = 0;

 private:
  friend class RowCache;
  CachedRow(uint32_t table_id, uint64_t key, uint32_t size, bool dirty)
      : table_id(table_id), key(key), dirty(dirty), size_(size) {}
  // The floats follow the header in the same block.
  float* floats() { return reinterpret_cast<float*>(this + 1); }
  const float* floats() const {
    return reinterpret_cast<const float*>(this + 1);
  }

  const uint32_t size_;
  // The CLOCK list: newer towards the front.
  CachedRow* newer_ = nullptr;
  CachedRow* older_ = nullptr;
};

// A dirty row that left the cache, for the caller to write back.
struct EvictedRow {
  uint32_t table_id = 0;
  uint64_t key = 0;
  uint64_t log_sequence = 0;
  std::vector<float> values;
  uint32_t updated_at_s = 0;
  uint32_t push_count = 0;
};

class RowCache {
 public:
  explicit RowCache(size_t budget_bytes) : budget_bytes_(budget_bytes) {}
  ~RowCache();

  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Returns the row and marks it referenced, or nullptr.
  CachedRow* Find(uint32_t table_id, uint64_t key);

  // Returns the row's values (weights, then optimizer state) and marks it
  // referenced, or nullptr.
  const float* FindValues(uint32_t table_id, uint64_t key) {
    CachedRow* row = Find(table_id, key);
    return row == nullptr ? nullptr : row->floats();  // no load of the row
  }

  // Adds a row that is not cached yet and returns it.
  CachedRow* Insert(uint32_t table_id, uint64_t key,
                    absl::Span<const float> values, bool dirty);

  // Drops `row` (one this cache returned) without writing it anywhere.
  void Erase(CachedRow* row);

  // Evicts rows not referenced recently until bytes() <= budget, appending
  // copies of the evicted dirty rows to `*dirty_evicted` for write-back.
  void EvictToBudget(std::vector<EvictedRow>* dirty_evicted);

  // Calls fn(CachedRow&) for each dirty row; fn decides what to do and
  // usually clears `dirty` after writing the row back.
  template <typename Fn>
  void ForEachDirty(Fn fn) {
    for (CachedRow* row = newest_; row != nullptr; row = row->older_) {
      if (row->dirty) fn(*row);
    }
  }

  // Calls fn(CachedRow&) for every row.
  template <typename Fn>
  void ForEachRow(Fn fn) {
    for (CachedRow* row = newest_; row != nullptr; row = row->older_) fn(*row);
  }

  size_t bytes() const { return bytes_; }
  size_t budget_bytes() const { return budget_bytes_; }
  size_t size() const { return index_.size(); }

  // The memory one row of `floats` values costs, overheads included: its
  // block (header, floats, the allocator's own ~16 bytes) and index slot.
  static size_t RowBytes(size_t floats);

 private:
  struct TableKey {
    uint32_t table_id;
    uint64_t key;
    bool operator==(const TableKey& other) const {
      return table_id == other.table_id && key == other.key;
    }
    template <typename H>
    friend H AbslHashValue(H h, const TableKey& k) {
      return H::combine(std::move(h), k.table_id, k.key);
    }
  };

  // The index's value. The second-chance bit lives here, not in the row,
  // so that a hit touches only the index slot (a pulled row's floats are
  // prefetched and read later).
  struct Entry {
    CachedRow* row;
    // Hit since eviction last looked at this row.
    bool referenced;
  };

  void PushNewest(CachedRow* row);
  void Unlink(CachedRow* row);
  static void Free(CachedRow* row);

  const size_t budget_bytes_;
  size_t bytes_ = 0;
  // The CLOCK list's ends: eviction looks at the oldest.
  CachedRow* newest_ = nullptr;
  CachedRow* oldest_ = nullptr;
  absl::flat_hash_map<TableKey, Entry> index_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ROW_CACHE_H_
