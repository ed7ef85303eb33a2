// EmbeddingStore's reads: pulls of rows (weights, or weights with optimizer
// state) and of one row.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/embedding_store_internal.h"

namespace ps::embedding {

absl::Status EmbeddingStoreImpl::Pull(absl::string_view table_name,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<float> out) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  return PullRows(*table, keys, table->dim, out);
}

absl::Status EmbeddingStoreImpl::PullWithState(absl::string_view table_name,
                                               absl::Span<const uint64_t> keys,
                                               absl::Span<float> out) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  return PullRows(*table, keys, table->row_floats, out);
}

absl::Status EmbeddingStoreImpl::PullRows(const Table& table,
                                          absl::Span<const uint64_t> keys,
                                          size_t floats_per_row,
                                          absl::Span<float> out) {
  const size_t floats = floats_per_row;
  if (out.size() != keys.size() * floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull of ", keys.size(), " keys of ", floats, " floats needs ",
        keys.size() * floats, " floats of output, got ", out.size()));
  }
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, &order, &starts);
  std::vector<uint32_t> misses;
  std::vector<uint64_t> stripe_keys, missing_keys;
  std::vector<CachedRow*> found;
  uint64_t hits = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    misses.clear();
    // Look every row up first, then copy: the lookups' cache misses
    // overlap instead of coming one after another.
    internal::GatherKeys(keys, order, starts[s], starts[s + 1], &stripe_keys);
    found.resize(stripe_keys.size());
    stripe.cache.FindMany(table.id, stripe_keys, absl::MakeSpan(found), floats);
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
      const uint32_t position = order[i];
      const CachedRow* row = found[i - starts[s]];
      // An expired row is left for LoadRows() below to drop.
      if (row != nullptr && !ExpiredInMemory(table, *row)) {
        std::memcpy(&out[position * floats], row->floats(),
                    floats * sizeof(float));
        ++hits;
      } else {
        misses.push_back(position);
      }
    }
    if (misses.empty()) continue;
    missing_keys.clear();
    for (uint32_t position : misses) missing_keys.push_back(keys[position]);
    std::sort(missing_keys.begin(), missing_keys.end());
    missing_keys.erase(std::unique(missing_keys.begin(), missing_keys.end()),
                       missing_keys.end());
    RETURN_IF_ERROR(LoadRows(table, stripe, missing_keys, /*create=*/false));
    for (uint32_t position : misses) {
      float* destination = &out[position * floats];
      const CachedRow* row = stripe.cache.Find(table.id, keys[position]);
      if (row != nullptr) {
        std::memcpy(destination, row->floats(), floats * sizeof(float));
      } else {
        table.initializer.Fill(keys[position],
                               absl::MakeSpan(destination, table.dim));
        if (floats > static_cast<size_t>(table.dim))
          table.optimizer->InitState(table.dim, destination + table.dim);
      }
    }
    EvictOrKeep(stripe);
  }
  hits_ += hits;
  misses_ += keys.size() - hits;
  rows_pulled_ += keys.size();
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::GetRow(absl::string_view table_name,
                                        uint64_t key,
                                        std::vector<float>* weights,
                                        bool* stored,
                                        std::vector<float>* state) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  Stripe& stripe = *stripes_[StripeOf(key)];
  absl::MutexLock lock(&stripe.mu);
  const uint64_t keys[] = {key};
  RETURN_IF_ERROR(LoadRows(*table, stripe, keys, /*create=*/false));
  weights->resize(table->dim);
  const CachedRow* row = stripe.cache.Find(table->id, key);
  *stored = row != nullptr;
  if (*stored) {
    const float* values = row->floats();
    std::copy(values, values + table->dim, weights->begin());
    if (state != nullptr)
      state->assign(values + table->dim, values + table->row_floats);
  } else {
    table->initializer.Fill(key, absl::MakeSpan(*weights));
    if (state != nullptr) {
      state->resize(table->row_floats - table->dim);
      table->optimizer->InitState(table->dim, state->data());
    }
  }
  EvictOrKeep(stripe);
  return absl::OkStatus();
}

}  // namespace ps::embedding
