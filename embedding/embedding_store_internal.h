// File: embedding/embedding_store_internal.h
//
// Helpers that several of EmbeddingStore's source files share
// (embedding_store*.cc, one per job of the store): not part of its
// interface, and included by nothing else. Stateless functions, so
// thread-safe; the rows they touch are the caller's to lock.

#ifndef PS_EMBEDDING_EMBEDDING_STORE_INTERNAL_H_
#define PS_EMBEDDING_EMBEDDING_STORE_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "embedding/row_cache.h"

namespace ps::embedding::internal {

// Sets `out` to keys[order[i]] for i in [begin, end): one stripe's share of
// keys grouped by stripe (EmbeddingStoreImpl::GroupByStripe()).
inline void GatherKeys(absl::Span<const uint64_t> keys,
                       absl::Span<const uint32_t> order, uint32_t begin,
                       uint32_t end, std::vector<uint64_t>* out) {
  out->clear();
  for (uint32_t i = begin; i < end; ++i) out->push_back(keys[order[i]]);
}

// Records that an update was applied to `row` at `now_s`: a new version,
// dirty, updated_at_s = now_s, one push more (saturating). Its log sequence
// is the caller's to set.
inline void NoteRowUpdated(CachedRow& row, uint32_t now_s) {
  ++row.version;
  row.dirty = true;
  row.updated_at_s = now_s;
  if (row.push_count != UINT32_MAX) ++row.push_count;
}

// Whether `x` is a usable learning rate or scale: positive and finite
// (false for NaN).
inline bool IsPositiveFinite(float x) { return x > 0.0f && std::isfinite(x); }

}  // namespace ps::embedding::internal

#endif  // PS_EMBEDDING_EMBEDDING_STORE_INTERNAL_H_
