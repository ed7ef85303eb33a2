#include "embedding/row_cache.h"

#include <algorithm>
#include <new>
#include <utility>

#include "absl/base/config.h"
#include "absl/hash/hash.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// The index keeps between 7/16 and 7/8 of its buckets full, a bucket being a
// 4-byte entry number and a control byte: about 8 bytes a row on average.
constexpr size_t kIndexBytesPerRow = 8;

// A chunk of entries is at most this large (a power of two of entries): the
// largest the chunk arena cuts from its huge-page regions, and small enough
// that the last, partly used chunk of a small table costs little.
constexpr size_t kMaxChunkBytes = ChunkArena::kMaxChunkBytes;

static_assert(sizeof(CachedRow) == 32, "CachedRow grew");
static_assert(sizeof(CachedRow) % alignof(float) == 0,
              "the floats follow the header");

size_t EntryBytes(size_t floats) {
  const size_t bytes = sizeof(CachedRow) + floats * sizeof(float);
  // Every header stays aligned.
  return (bytes + alignof(CachedRow) - 1) / alignof(CachedRow) *
         alignof(CachedRow);
}

// Looking a key up by its hash tag alone relies on how this Abseil's
// raw_hash_set probes (it calls the equality only on buckets whose 7-bit tag
// matches, and checks nothing else); elsewhere keys are compared for real.
#if defined(ABSL_LTS_RELEASE_VERSION) && ABSL_LTS_RELEASE_VERSION == 20220623
constexpr bool kTagProbes = true;
#else
constexpr bool kTagProbes = false;
#endif

int ChunkShift(size_t entry_bytes) {
  int shift = 0;
  while ((entry_bytes << (shift + 1)) <= kMaxChunkBytes) ++shift;
  return shift;
}

}  // namespace

size_t RowCache::EntryHash::operator()(uint32_t entry) const {
  return absl::HashOf(slab->Row(entry)->key);
}

size_t RowCache::EntryHash::operator()(KeyProbe probe) const {
  return absl::HashOf(probe.key);
}

size_t RowCache::EntryHash::operator()(TagProbe probe) const {
  return absl::HashOf(probe.key);
}

bool RowCache::EntryEq::operator()(uint32_t entry, KeyProbe probe) const {
  return slab->Row(entry)->key == probe.key;
}

RowCache::Slab::Slab(uint32_t table_id, uint32_t row_floats)
    : table_id(table_id),
      row_floats(row_floats),
      entry_bytes(EntryBytes(row_floats)),
      chunk_shift(ChunkShift(entry_bytes)),
      chunk_mask((uint32_t{1} << chunk_shift) - 1),
      index(/*bucket_count=*/0, EntryHash{this}, EntryEq{this}) {}

RowCache::RowCache(size_t budget_bytes, bool huge_pages)
    : budget_bytes_(budget_bytes), huge_pages_(huge_pages) {}

RowCache::~RowCache() = default;

size_t RowCache::RowBytes(size_t floats) {
  return EntryBytes(floats) + kIndexBytesPerRow;
}

RowCache::Slab* RowCache::FindSlab(uint32_t table_id) const {
  if (last_slab_ != nullptr && last_slab_->table_id == table_id)
    return last_slab_;
  for (const std::unique_ptr<Slab>& slab : slabs_) {
    if (slab->table_id == table_id) return last_slab_ = slab.get();
  }
  return nullptr;
}

CachedRow* RowCache::Lookup(Slab& slab, uint64_t key, size_t hash) {
  auto it = slab.index.find(KeyProbe{key}, hash);
  if (it == slab.index.end()) return nullptr;
  CachedRow* row = slab.Row(*it);
  // Written only when it changes: a hit on a hot row dirties no cache line.
  if (!row->referenced_) row->referenced_ = true;
  return row;
}

CachedRow* RowCache::Find(uint32_t table_id, uint64_t key) {
  Slab* slab = FindSlab(table_id);
  return slab == nullptr ? nullptr : Lookup(*slab, key, absl::HashOf(key));
}

void RowCache::FindMany(uint32_t table_id, absl::Span<const uint64_t> keys,
                        absl::Span<CachedRow*> rows, size_t prefetch_floats) {
  DCHECK_EQ(keys.size(), rows.size());
  Slab* slab = FindSlab(table_id);
  if (slab == nullptr) {
    std::fill(rows.begin(), rows.end(), nullptr);
    return;
  }
  const size_t prefetch_bytes =
      sizeof(CachedRow) +
      std::min<size_t>(prefetch_floats, slab->row_floats) * sizeof(float);
  // Enough lookups in flight to keep the memory busy; few enough that what
  // they fetch is still in L1 when the next pass reads it.
  constexpr size_t kWindow = 16;
  size_t hashes[kWindow];
  CachedRow* candidates[kWindow];
  for (size_t start = 0; start < keys.size(); start += kWindow) {
    const size_t count = std::min(kWindow, keys.size() - start);
    const uint64_t* window = &keys[start];
    for (size_t i = 0; i < count; ++i) {
      hashes[i] = absl::HashOf(window[i]);
      slab->index.prefetch(KeyProbe{window[i]});
    }
    if (kTagProbes) {
      for (size_t i = 0; i < count; ++i) {
        auto it = slab->index.find(TagProbe{window[i]}, hashes[i]);
        candidates[i] = it == slab->index.end() ? nullptr : slab->Row(*it);
        if (candidates[i] != nullptr)
          PrefetchBytes(candidates[i], prefetch_bytes);
      }
    } else {
      std::fill(candidates, candidates + count, nullptr);
    }
    for (size_t i = 0; i < count; ++i) {
      CachedRow* row = candidates[i];
      if (row != nullptr && row->key == window[i]) {
        if (!row->referenced_) row->referenced_ = true;
      } else {
        // No candidate, or another key with the same tag came first: look
        // it up for real.
        row = Lookup(*slab, window[i], hashes[i]);
      }
      rows[start + i] = row;
    }
  }
}

CachedRow* RowCache::Insert(uint32_t table_id, uint64_t key,
                            absl::Span<const float> values, bool dirty) {
  Slab* slab = FindSlab(table_id);
  if (slab == nullptr) {
    slabs_.push_back(
        std::make_unique<Slab>(table_id, static_cast<uint32_t>(values.size())));
    slab = slabs_.back().get();
  }
  DCHECK_EQ(values.size(), slab->row_floats)
      << "table " << table_id << " has rows of another size";
  DCHECK(slab->index.find(KeyProbe{key}) == slab->index.end())
      << "key " << key << " of table " << table_id << " is cached already";
  uint32_t entry;
  if (!slab->free_entries.empty()) {
    entry = slab->free_entries.back();
    slab->free_entries.pop_back();
  } else {
    entry = slab->entries_used++;
    if ((entry >> slab->chunk_shift) == slab->chunks.size()) {
      // Not initialised: pages are faulted in as entries are used.
      const size_t bytes = slab->entry_bytes << slab->chunk_shift;
      slab->chunks.push_back(huge_pages_ ? ChunkArena::NewChunk(bytes)
                                         : ChunkArena::PlainChunk(bytes));
    }
  }
  CachedRow* row = new (slab->Row(entry)) CachedRow(key, dirty);
  std::copy(values.begin(), values.end(), row->floats());
  slab->index.insert(entry);
  bytes_ += slab->entry_bytes + kIndexBytesPerRow;
  ++size_;
  return row;
}

void RowCache::Remove(Slab& slab, uint32_t entry) {
  slab.index.erase(entry);  // hashes the key, still in the entry
  slab.Row(entry)->occupied_ = false;
  slab.free_entries.push_back(entry);
  bytes_ -= slab.entry_bytes + kIndexBytesPerRow;
  --size_;
}

void RowCache::Erase(uint32_t table_id, CachedRow* row) {
  Slab* slab = FindSlab(table_id);
  auto it = slab == nullptr ? decltype(slab->index.end())()
                            : slab->index.find(KeyProbe{row->key});
  if (slab == nullptr || it == slab->index.end() || slab->Row(*it) != row) {
    LOG(DFATAL) << "erasing a row of table " << table_id
                << " that this cache does not hold";
    return;
  }
  Remove(*slab, *it);
}

size_t RowCache::EraseTable(uint32_t table_id) {
  for (size_t i = 0; i < slabs_.size(); ++i) {
    if (slabs_[i]->table_id != table_id) continue;
    const size_t rows = slabs_[i]->index.size();
    bytes_ -= rows * (slabs_[i]->entry_bytes + kIndexBytesPerRow);
    size_ -= rows;
    if (last_slab_ == slabs_[i].get()) last_slab_ = nullptr;
    slabs_.erase(slabs_.begin() + i);
    // The hand keeps pointing at the same entry of the slabs that stay.
    if (hand_slab_ > i) {
      --hand_slab_;
    } else if (hand_slab_ == i) {
      hand_entry_ = 0;
    }
    return rows;
  }
  return 0;
}

void RowCache::EvictToBudget(std::vector<EvictedRow>* dirty_evicted) {
  while (bytes_ > budget_bytes_ && size_ > 0) {
    if (hand_slab_ >= slabs_.size()) {
      hand_slab_ = 0;
      hand_entry_ = 0;
    }
    Slab& slab = *slabs_[hand_slab_];
    if (hand_entry_ >= slab.entries_used) {
      ++hand_slab_;
      hand_entry_ = 0;
      continue;
    }
    const uint32_t entry = hand_entry_++;
    CachedRow* row = slab.Row(entry);
    if (!row->occupied_) continue;
    if (row->referenced_) {
      row->referenced_ = false;  // second chance
      continue;
    }
    if (row->dirty) {
      const float* floats = row->floats();
      dirty_evicted->push_back(
          EvictedRow{slab.table_id, row->key, row->log_sequence,
                     std::vector<float>(floats, floats + slab.row_floats),
                     row->updated_at_s, row->push_count});
    }
    Remove(slab, entry);
  }
}

size_t RowCache::Compact() {
  size_t moved = 0;
  for (size_t i = 0; i < slabs_.size();) {
    Slab& slab = *slabs_[i];
    if (slab.index.empty()) {
      EraseTable(slab.table_id);  // keeps the hand where it was
      continue;
    }
    // Rarely: moving rows holds the stripe's lock, and an expiry sweep
    // leaves free entries that new rows usually take again.
    const size_t free = slab.entries_used - slab.index.size();
    if (free > (size_t{1} << slab.chunk_shift) && free > slab.entries_used / 4)
      moved += CompactSlab(slab);
    ++i;
  }
  return moved;
}

size_t RowCache::CompactSlab(Slab& slab) {
  const uint32_t rows = static_cast<uint32_t>(slab.index.size());
  // The free entries below `rows` take the rows at or above it, lowest free
  // entry first.
  std::vector<uint32_t> holes;
  for (uint32_t entry : slab.free_entries) {
    if (entry < rows) holes.push_back(entry);
  }
  std::sort(holes.begin(), holes.end());
  size_t next_hole = 0;
  for (uint32_t from = rows; from < slab.entries_used; ++from) {
    CachedRow* source = slab.Row(from);
    if (!source->occupied_) continue;
    DCHECK_LT(next_hole, holes.size());
    const uint32_t to = holes[next_hole++];
    slab.index.erase(from);  // hashes the key, still in the entry
    CachedRow* target =
        new (slab.Row(to)) CachedRow(source->key, source->dirty);
    target->log_sequence = source->log_sequence;
    target->version = source->version;
    target->updated_at_s = source->updated_at_s;
    target->push_count = source->push_count;
    target->referenced_ = source->referenced_;
    std::copy(source->floats(), source->floats() + slab.row_floats,
              target->floats());
    slab.index.insert(to);
  }
  const size_t moved = next_hole;
  slab.entries_used = rows;
  slab.free_entries.clear();
  slab.free_entries.shrink_to_fit();
  const size_t chunk_entries = size_t{1} << slab.chunk_shift;
  slab.chunks.resize((rows + chunk_entries - 1) / chunk_entries);
  slab.chunks.shrink_to_fit();
  // Rebuilding the index reads every row's key: only when it is well over
  // what its rows need.
  if (slab.index.capacity() > 4 * size_t{rows}) slab.index.rehash(0);
  // A hand past the slab's new end goes on to the next table by itself.
  return moved;
}

size_t RowCache::allocated_entry_bytes() const {
  size_t bytes = 0;
  for (const std::unique_ptr<Slab>& slab : slabs_) {
    bytes += slab->chunks.size() * (slab->entry_bytes << slab->chunk_shift);
  }
  return bytes;
}

}  // namespace ps::embedding
