// File: embedding/row_cache.h
//
// One stripe of the hot tier: a map from (table, key) to a row's floats,
// bounded by a byte budget, evicting with second chance (CLOCK), an
// approximation of LRU: a hit only sets a bit, and eviction gives rows hit
// since they were last examined another round. A row is dirty when it holds
// an update that RocksDB does not have yet; evicting a dirty row hands a copy
// back to the caller for write-back, so nothing is dropped.
//
// Memory: each table's rows live in a slab of equal entries (a 32-byte header,
// then the floats, rounded up to 8 bytes), allocated in chunks of up to 64 KiB
// from the chunk arena (huge pages: chunk_arena.h); a freed entry
// is reused by the table's next row. The index of a table is a hash set of
// 32-bit entry numbers that hashes and compares through the entry's key, so a
// row costs its entry plus about 8 bytes of index: 104 bytes for a dim-16 SGD
// row (64 of them floats). The CLOCK hand sweeps the entries of every table in
// turn. Free entries stay allocated until Compact() moves rows down into them
// and frees the chunks left empty: run it now and then (the store does after
// each write-back), or a table whose rows were evicted to make room for
// another's would keep their memory.
//
// Not thread-safe: the store holds the stripe's mutex around every call.
// Pointers returned by Find(), FindMany() and Insert() stay valid until their
// row is evicted or erased (EraseTable() included), or Compact() runs.

#ifndef PS_EMBEDDING_ROW_CACHE_H_
#define PS_EMBEDDING_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "embedding/chunk_arena.h"

namespace ps::embedding {

// Prefetches every cache line of [begin, begin + bytes).
inline void PrefetchBytes(const void* begin, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(begin) + bytes;
  for (uintptr_t line = first; line < end; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line));
}

// A cached row: the header of an entry, its floats (weights, then optimizer
// state; how many is the table's) right after it. Owned by its RowCache.
class CachedRow {
 public:
  CachedRow(const CachedRow&) = delete;
  CachedRow& operator=(const CachedRow&) = delete;

  float* floats() { return reinterpret_cast<float*>(this + 1); }
  const float* floats() const {
    return reinterpret_cast<const float*>(this + 1);
  }

  const uint64_t key;
  // The push-log sequence (of the row's stripe, in the current log run) of
  // the last update the floats include; 0 for none (embedding_store.h).
  uint64_t log_sequence = 0;
  // Bumped by every update, so that a write-back that copied the row can
  // tell, once written, whether the row changed since (and is still dirty).
  uint32_t version = 0;
  // When a push last updated the row, in seconds since the Unix run (0:
  // not known, for rows stored before rows carried it), and how many pushes
  // updated it (saturating): what expiry goes by.
  uint32_t updated_at_s = 0;
  uint32_t push_count = 0;
  bool dirty;

 private:
  friend class RowCache;
  CachedRow(uint64_t key, bool dirty) : key(key), dirty(dirty) {}

  // Hit since eviction last looked at this row.
  bool referenced_ = false;
  // False once the row left its entry (the entry is free).
  bool occupied_ = true;
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
  // huge_pages: chunks from ChunkArena::Global() (else from new[]).
  explicit RowCache(size_t budget_bytes, bool huge_pages = true);
  ~RowCache();

  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Returns the row and marks it referenced, or nullptr.
  CachedRow* Find(uint32_t table_id, uint64_t key);

  // Find() of each of `keys` into `rows` (same size), faster than one by
  // one for keys spread over a table larger than the CPU's caches: it looks
  // keys up in windows, and in each first prefetches the index buckets, then
  // the rows the keys most likely have (found from the index alone, without
  // comparing keys, which reads the row), then finds them in the caches.
  // `prefetch_floats`: how many of each row's floats the caller reads next.
  void FindMany(uint32_t table_id, absl::Span<const uint64_t> keys,
                absl::Span<CachedRow*> rows, size_t prefetch_floats);

  // Adds a row that is not cached yet and returns it. Every row of a table
  // has the same number of floats. REQUIRES: Find(table_id, key) == nullptr.
  CachedRow* Insert(uint32_t table_id, uint64_t key,
                    absl::Span<const float> values, bool dirty);

  // Drops `row` (one of table `table_id` this cache returned) without
  // writing it anywhere.
  void Erase(uint32_t table_id, CachedRow* row);

  // Drops every row of `table_id` and frees its slab; returns how many.
  size_t EraseTable(uint32_t table_id);

  // Evicts rows not referenced recently until bytes() <= budget, appending
  // copies of the evicted dirty rows to `*dirty_evicted` for write-back.
  void EvictToBudget(std::vector<EvictedRow>* dirty_evicted);

  // Gives back the memory of free entries: where a table has more free entries
  // than a chunk holds (and than a quarter of its entries), moves its last rows
  // into the free entries below them, frees the chunks left empty and shrinks
  // its index; drops tables left without rows. Returns the rows moved.
  // Invalidates every CachedRow* handed out before.
  size_t Compact();

  // Bytes allocated for entries, used or free (the index not included).
  size_t allocated_entry_bytes() const;

  // Calls fn(table_id, CachedRow&, absl::Span<float> values) for every row,
  // in entry order. fn may change the row but not add or drop rows.
  template <typename Fn>
  void ForEachRow(Fn fn) {
    for (const std::unique_ptr<Slab>& slab : slabs_) {
      for (uint32_t entry = 0; entry < slab->entries_used; ++entry) {
        CachedRow* row = slab->Row(entry);
        if (row->occupied_) {
          fn(slab->table_id, *row,
             absl::MakeSpan(row->floats(), slab->row_floats));
        }
      }
    }
  }

  // A position in ForEachRow()'s order, for walking the rows a part at a
  // time with ForEachRowFrom().
  struct RowCursor {
    size_t slab = 0;
    uint32_t entry = 0;
  };

  // ForEachRow() over at most `max_entries` entries from `*cursor` on, which it
  // advances; returns false once the walk has passed the last entry. Between
  // calls rows may come and go: a row added, or moved by Compact(), or in a
  // table after one dropped (EraseTable(), Compact()), may be missed; the
  // walk still ends, and visits only rows present.
  template <typename Fn>
  bool ForEachRowFrom(RowCursor* cursor, size_t max_entries, Fn fn) {
    for (size_t visited = 0; cursor->slab < slabs_.size();) {
      Slab& slab = *slabs_[cursor->slab];
      for (; cursor->entry < slab.entries_used; ++cursor->entry) {
        if (visited++ == max_entries) return true;
        CachedRow* row = slab.Row(cursor->entry);
        if (row->occupied_) {
          fn(slab.table_id, *row,
             absl::MakeSpan(row->floats(), slab.row_floats));
        }
      }
      ++cursor->slab;
      cursor->entry = 0;
    }
    return false;
  }

  // ForEachRow() over the dirty rows; fn usually clears `dirty` after
  // writing the row back.
  template <typename Fn>
  void ForEachDirty(Fn fn) {
    ForEachRow([&](uint32_t table_id, CachedRow& row, absl::Span<float> v) {
      if (row.dirty) fn(table_id, row, v);
    });
  }

  size_t bytes() const { return bytes_; }
  size_t budget_bytes() const { return budget_bytes_; }
  size_t size() const { return size_; }

  // The memory one row of `floats` values is counted as: its entry and its
  // share of the index.
  static size_t RowBytes(size_t floats);

 private:
  struct Slab;

  // A key to look up in a slab's index of entry numbers.
  struct KeyProbe {
    uint64_t key;
  };
  // A key whose lookup ends at the first index bucket with the same hash tag
  // (7 bits of the hash): the key's entry, most likely.
  struct TagProbe {
    uint64_t key;
  };
  // Hash and equality of the index: an entry stands for its row's key.
  struct EntryHash {
    using is_transparent = void;
    const Slab* slab;
    size_t operator()(uint32_t entry) const;
    size_t operator()(KeyProbe probe) const;
    size_t operator()(TagProbe probe) const;
  };
  struct EntryEq {
    using is_transparent = void;
    const Slab* slab;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t entry, KeyProbe probe) const;
    bool operator()(KeyProbe probe, uint32_t entry) const {
      return (*this)(entry, probe);
    }
    bool operator()(uint32_t, TagProbe) const { return true; }
    bool operator()(TagProbe, uint32_t) const { return true; }
  };

  // The rows of one table.
  struct Slab {
    Slab(uint32_t table_id, uint32_t row_floats);
    Slab(const Slab&) = delete;
    Slab& operator=(const Slab&) = delete;

    CachedRow* Row(uint32_t entry) const {
      return reinterpret_cast<CachedRow*>(chunks[entry >> chunk_shift].get() +
                                          (entry & chunk_mask) * entry_bytes);
    }

    const uint32_t table_id;
    const uint32_t row_floats;
    const size_t entry_bytes;
    // A chunk holds 2^chunk_shift entries.
    const int chunk_shift;
    const uint32_t chunk_mask;
    std::vector<ChunkArena::Chunk> chunks;
    // Entries [0, entries_used) were handed out at least once.
    uint32_t entries_used = 0;
    std::vector<uint32_t> free_entries;
    absl::flat_hash_set<uint32_t, EntryHash, EntryEq> index;
  };

  Slab* FindSlab(uint32_t table_id) const;
  // Finds `key` (whose hash is `hash`) in `slab` and marks its row
  // referenced, or returns nullptr.
  CachedRow* Lookup(Slab& slab, uint64_t key, size_t hash);
  // Moves `slab`'s rows into its lowest free entries and frees what is left.
  size_t CompactSlab(Slab& slab);
  // Drops the row in `entry` of `slab`.
  void Remove(Slab& slab, uint32_t entry);

  const size_t budget_bytes_;
  const bool huge_pages_;
  size_t bytes_ = 0;
  size_t size_ = 0;
  std::vector<std::unique_ptr<Slab>> slabs_;
  // The slab FindSlab() found last: batches look one table up many times.
  mutable Slab* last_slab_ = nullptr;
  // The CLOCK hand: the next entry eviction looks at.
  size_t hand_slab_ = 0;
  uint32_t hand_entry_ = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ROW_CACHE_H_
