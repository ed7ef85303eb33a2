// File: embedding/row_cache.h
//
// One stripe of the hot tier: a map from (table, key) to a row's floats,
// bounded by a byte budget, evicting with second chance (CLOCK), an
// approximation of LRU: a hit only sets a bit, instead of relinking a list
// node (which cost a third of the server's CPU on pulls), and eviction gives
// rows hit since they were last examined another round. A row is dirty when it
// holds an update that RocksDB does not have yet; evicting a dirty row hands it
// back to the caller for write-back, so nothing is dropped.
//
// Not thread-safe: the store holds the stripe's mutex around every call.
// Pointers returned by Find(), FindValues() and Insert() stay valid until
// their row is evicted (rows live in list nodes, which never move).

#ifndef PS_EMBEDDING_ROW_CACHE_H_
#define PS_EMBEDDING_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace ps::embedding {

struct CachedRow {
  uint32_t table_id = 0;
  uint64_t key = 0;
  bool dirty = false;
  // Weights followed by optimizer state.
  std::vector<float> values;
  // Bumped by every update, so that a write-back that copied the row can
  // tell, once written, whether the row changed since (and is still dirty).
  uint32_t version = 0;
  // The push-log sequence (of the row's stripe, in the current log epoch) of
  // the last update `values` include; 0 for none (embedding_store.h).
  uint64_t log_sequence = 0;
};

class RowCache {
 public:
  explicit RowCache(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Returns the row and marks it referenced, or nullptr.
  CachedRow* Find(uint32_t table_id, uint64_t key);

  // Returns the row's values (weights, then optimizer state) and marks it
  // referenced, or nullptr. For reads: touches the index only, not the row's
  // list node, one cache miss fewer per row than Find().
  const float* FindValues(uint32_t table_id, uint64_t key);

  // Adds a row that is not cached yet and returns it.
  CachedRow* Insert(uint32_t table_id, uint64_t key,
                    absl::Span<const float> values, bool dirty);

  // Evicts rows not referenced recently until bytes() <= budget, moving
  // evicted dirty rows to `*dirty_evicted` (appended) for write-back.
  void EvictToBudget(std::vector<CachedRow>* dirty_evicted);

  // Calls fn(CachedRow&) for each dirty row; fn decides what to do and
  // usually clears `dirty` after writing the row back.
  template <typename Fn>
  void ForEachDirty(Fn fn) {
    for (CachedRow& row : lru_) {
      if (row.dirty) fn(row);
    }
  }

  // Calls fn(CachedRow&) for every row.
  template <typename Fn>
  void ForEachRow(Fn fn) {
    for (CachedRow& row : lru_) fn(row);
  }

  size_t bytes() const { return bytes_; }
  size_t budget_bytes() const { return budget_bytes_; }
  size_t size() const { return lru_.size(); }

  // The memory one row of `floats` values costs, overheads included.
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

  struct Entry {
    std::list<CachedRow>::iterator row;
    // row->values.data(): stable while the row is cached.
    float* values;
    // Hit since eviction last looked at this row.
    bool referenced;
  };

  const size_t budget_bytes_;
  size_t bytes_ = 0;
  // Newest (or most recently given a second chance) at the front; eviction
  // looks at the back.
  std::list<CachedRow> lru_;
  absl::flat_hash_map<TableKey, Entry> index_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ROW_CACHE_H_
