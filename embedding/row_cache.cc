#include "embedding/row_cache.h"

#include <iterator>
#include <utility>

namespace ps::embedding {

size_t RowCache::RowBytes(size_t floats) {
  // List node (two pointers + CachedRow) plus a hash-map slot (key + entry
  // + control byte), plus the heap block of floats.
  constexpr size_t kOverhead = 2 * sizeof(void*) + sizeof(CachedRow) +
                               sizeof(TableKey) + sizeof(Entry) + 1;
  return kOverhead + floats * sizeof(float);
}

CachedRow* RowCache::Find(uint32_t table_id, uint64_t key) {
  auto it = index_.find(TableKey{table_id, key});
  if (it == index_.end()) return nullptr;
  it->second.referenced = true;
  return &*it->second.row;
}

const float* RowCache::FindValues(uint32_t table_id, uint64_t key) {
  auto it = index_.find(TableKey{table_id, key});
  if (it == index_.end()) return nullptr;
  it->second.referenced = true;
  return it->second.values;
}

CachedRow* RowCache::Insert(uint32_t table_id, uint64_t key,
                            absl::Span<const float> values, bool dirty) {
  lru_.push_front(CachedRow{table_id, key, dirty,
                            std::vector<float>(values.begin(), values.end())});
  index_[TableKey{table_id, key}] =
      Entry{lru_.begin(), lru_.front().values.data(), /*referenced=*/false};
  bytes_ += RowBytes(values.size());
  return &lru_.front();
}

void RowCache::EvictToBudget(std::vector<CachedRow>* dirty_evicted) {
  while (bytes_ > budget_bytes_ && !lru_.empty()) {
    CachedRow& victim = lru_.back();
    auto entry = index_.find(TableKey{victim.table_id, victim.key});
    if (entry->second.referenced) {
      // Second chance: back to the front, unmarked.
      entry->second.referenced = false;
      lru_.splice(lru_.begin(), lru_, std::prev(lru_.end()));
      continue;
    }
    bytes_ -= RowBytes(victim.values.size());
    index_.erase(entry);
    if (victim.dirty) dirty_evicted->push_back(std::move(victim));
    lru_.pop_back();
  }
}

}  // namespace ps::embedding
