#include "embedding/row_cache.h"

#include <algorithm>
#include <new>
#include <utility>

namespace ps::embedding {
namespace {

// What glibc's malloc adds to a block, on average (its header and rounding
// to 16 bytes).
constexpr size_t kAllocatorBytes = 16;

// The expiry fields sit in what was padding: a row's header stays 56 bytes.
static_assert(sizeof(CachedRow) == 56, "CachedRow grew");
static_assert(sizeof(CachedRow) % alignof(float) == 0,
              "the floats follow the header");

}  // namespace

RowCache::~RowCache() {
  for (CachedRow* row = newest_; row != nullptr;) {
    CachedRow* older = row->older_;
    Free(row);
    row = older;
  }
}

size_t RowCache::RowBytes(size_t floats) {
  // The index keeps between 7/16 and 7/8 of its slots full: count each
  // row's slot (key, entry, control byte) one and a half times.
  constexpr size_t kIndexSlot = (sizeof(TableKey) + sizeof(Entry) + 1) * 3 / 2;
  return sizeof(CachedRow) + floats * sizeof(float) + kAllocatorBytes +
         kIndexSlot;
}

CachedRow* RowCache::Find(uint32_t table_id, uint64_t key) {
  auto it = index_.find(TableKey{table_id, key});
  if (it == index_.end()) return nullptr;
  it->second.referenced = true;
  return it->second.row;
}

CachedRow* RowCache::Insert(uint32_t table_id, uint64_t key,
                            absl::Span<const float> values, bool dirty) {
  void* block =
      ::operator new(sizeof(CachedRow) + values.size() * sizeof(float));
  CachedRow* row = new (block)
      CachedRow(table_id, key, static_cast<uint32_t>(values.size()), dirty);
  std::copy(values.begin(), values.end(), row->floats());
  index_[TableKey{table_id, key}] = Entry{row, /*referenced=*/false};
  PushNewest(row);
  bytes_ += RowBytes(values.size());
  return row;
}

void RowCache::EvictToBudget(std::vector<EvictedRow>* dirty_evicted) {
  while (bytes_ > budget_bytes_ && oldest_ != nullptr) {
    CachedRow* victim = oldest_;
    Unlink(victim);
    auto entry = index_.find(TableKey{victim->table_id, victim->key});
    if (entry->second.referenced) {
      // Second chance: back to the newest end, unmarked.
      entry->second.referenced = false;
      PushNewest(victim);
      continue;
    }
    bytes_ -= RowBytes(victim->size_);
    index_.erase(entry);
    if (victim->dirty) {
      const absl::Span<const float> values = victim->values();
      dirty_evicted->push_back(
          EvictedRow{victim->table_id, victim->key, victim->log_sequence,
                     std::vector<float>(values.begin(), values.end()),
                     victim->updated_at_s, victim->push_count});
    }
    Free(victim);
  }
}

void RowCache::PushNewest(CachedRow* row) {
  row->newer_ = nullptr;
  row->older_ = newest_;
  if (newest_ != nullptr) newest_->newer_ = row;
  newest_ = row;
  if (oldest_ == nullptr) oldest_ = row;
}

void RowCache::Erase(CachedRow* row) {
  index_.erase(TableKey{row->table_id, row->key});
  Unlink(row);
  bytes_ -= RowBytes(row->size_);
  Free(row);
}

void RowCache::Unlink(CachedRow* row) {
  (row->newer_ != nullptr ? row->newer_->older_ : newest_) = row->older_;
  (row->older_ != nullptr ? row->older_->newer_ : oldest_) = row->newer_;
  row->newer_ = row->older_ = nullptr;
}

void RowCache::Free(CachedRow* row) {
  row->~CachedRow();
  ::operator delete(static_cast<void*>(row));
}

}  // namespace ps::embedding
