#include "worker/model_inputs.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace ps::worker {

void ModelInputs::Prepare(const std::vector<Example>& examples,
                          const InputLayout& layout, int embedding_dim) {
  batch = static_cast<int>(examples.size());
  const int fields = layout.fields();
  const int slots = layout.slots();
  const int dense_features = layout.dense_features();
  const bool crosses = slots > fields;
  index.resize(static_cast<size_t>(batch) * fields);
  wide_index.resize(crosses ? static_cast<size_t>(batch) * slots : 0);
  dense.resize(static_cast<size_t>(batch) * dense_features);
  labels.resize(batch);
  unique_keys.clear();
  wide_keys.clear();
  pool_members.clear();
  pool_end.clear();
  pool_scale.clear();
  field_pools = 0;
  absl::flat_hash_map<uint64_t, int32_t> position;
  position.reserve(static_cast<size_t>(batch) * fields / 2);
  auto position_of = [&](uint64_t key, std::vector<uint64_t>* keys) {
    auto [it, inserted] =
        position.try_emplace(key, static_cast<int32_t>(keys->size()));
    if (inserted) keys->push_back(key);
    return it->second;
  };
  // A slot's row: its key's, or (several keys) a new pool's, written as
  // -(pool + 1) until the fetched rows are counted.
  auto slot_row = [&](const Example& example, int slot,
                      std::vector<uint64_t>* keys) {
    const uint32_t begin = example.slot_begin(slot);
    const uint32_t end = example.slot_end[slot];
    if (end - begin == 1) return position_of(example.keys[begin], keys);
    for (uint32_t k = begin; k < end; ++k)
      pool_members.push_back(position_of(example.keys[k], keys));
    pool_end.push_back(static_cast<uint32_t>(pool_members.size()));
    pool_scale.push_back(layout.multi_pooling == Pooling::kMean
                             ? 1.0f / static_cast<float>(end - begin)
                             : 1.0f);
    return -static_cast<int32_t>(pool_end.size());
  };
  for (int b = 0; b < batch; ++b) {
    const Example& example = examples[b];
    labels[b] = example.label;
    float* dense_row = dense.data() + static_cast<size_t>(b) * dense_features;
    for (int d = 0; d < dense_features; ++d)
      dense_row[d] = DenseFeature(example.dense[d]);
    for (int f = 0; f < fields; ++f) {
      index[static_cast<size_t>(b) * fields + f] =
          slot_row(example, f, &unique_keys);
    }
  }
  field_pools = static_cast<int>(pool_end.size());
  if (crosses) {
    wide_keys = unique_keys;
    for (int b = 0; b < batch; ++b) {
      for (int s = fields; s < slots; ++s) {
        wide_index[static_cast<size_t>(b) * slots + s] =
            slot_row(examples[b], s, &wide_keys);
      }
    }
  }
  // Pooled rows go after the fetched ones.
  const int32_t unique = static_cast<int32_t>(unique_keys.size());
  const int32_t wide_fetched = static_cast<int32_t>(wide_fetch_keys().size());
  if (!pool_end.empty() || crosses) {
    for (int b = 0; b < batch; ++b) {
      for (int s = 0; s < slots; ++s) {
        int32_t* wide =
            crosses ? &wide_index[static_cast<size_t>(b) * slots + s] : nullptr;
        if (s < fields) {
          int32_t& row = index[static_cast<size_t>(b) * fields + s];
          if (row < 0) {
            const int32_t pool = -row - 1;
            row = unique + pool;
            if (wide != nullptr) *wide = wide_fetched + pool;
          } else if (wide != nullptr) {
            *wide = row;
          }
        } else if (*wide < 0) {
          *wide = wide_fetched + (-*wide - 1);
        }
      }
    }
  }
  embedding_rows.resize(embedding_dim * embedding_row_count());
  wide_rows.resize(wide_row_count());
}

void ModelInputs::PoolRows(int embedding_dim) {
  const size_t unique = unique_keys.size();
  const size_t wide_fetched = wide_fetch_keys().size();
  for (size_t p = 0; p < pool_end.size(); ++p) {
    const float scale = pool_scale[p];
    float wide = 0.0f;
    for (uint32_t m = pool_begin(p); m < pool_end[p]; ++m)
      wide += wide_rows[pool_members[m]];
    wide_rows[wide_fetched + p] = wide * scale;
    if (embedding_dim == 0 || p >= static_cast<size_t>(field_pools)) continue;
    float* pooled = &embedding_rows[(unique + p) * embedding_dim];
    std::fill(pooled, pooled + embedding_dim, 0.0f);
    for (uint32_t m = pool_begin(p); m < pool_end[p]; ++m) {
      const float* member =
          &embedding_rows[static_cast<size_t>(pool_members[m]) * embedding_dim];
      for (int d = 0; d < embedding_dim; ++d) pooled[d] += member[d];
    }
    for (int d = 0; d < embedding_dim; ++d) pooled[d] *= scale;
  }
}

void ModelInputs::FoldPooledGradients(int embedding_dim,
                                      std::vector<float>* embedding_grads,
                                      std::vector<float>* wide_grads) const {
  const size_t unique = unique_keys.size();
  const size_t wide_fetched = wide_fetch_keys().size();
  const bool deep = embedding_dim > 0 && !embedding_grads->empty();
  for (size_t p = 0; p < pool_end.size(); ++p) {
    const float scale = pool_scale[p];
    const float wide = (*wide_grads)[wide_fetched + p] * scale;
    for (uint32_t m = pool_begin(p); m < pool_end[p]; ++m)
      (*wide_grads)[pool_members[m]] += wide;
    if (!deep || p >= static_cast<size_t>(field_pools)) continue;
    const float* pooled = &(*embedding_grads)[(unique + p) * embedding_dim];
    for (uint32_t m = pool_begin(p); m < pool_end[p]; ++m) {
      float* member = &(*embedding_grads)[static_cast<size_t>(pool_members[m]) *
                                          embedding_dim];
      for (int d = 0; d < embedding_dim; ++d) member[d] += pooled[d] * scale;
    }
  }
  wide_grads->resize(wide_fetched);
  if (deep) embedding_grads->resize(unique * embedding_dim);
}

kernels::StepInputs ModelInputs::Step() const {
  kernels::StepInputs in;
  in.batch = batch;
  in.num_unique = static_cast<int>(embedding_row_count());
  in.index = index.data();
  if (!wide_index.empty()) {
    in.wide_index = wide_index.data();
    in.num_wide_rows = static_cast<int>(wide_row_count());
  }
  in.dense = dense.data();
  in.labels = labels.data();
  in.embedding_rows = embedding_rows.data();
  in.wide_rows = wide_rows.data();
  for (const auto& params : dense_params)
    in.dense_params.push_back(params.data());
  return in;
}

kernels::ModelConfig ConfigForLayout(kernels::ModelConfig base,
                                     const InputLayout& layout) {
  base.fields = layout.fields();
  base.dense_features = layout.dense_features();
  base.crosses = static_cast<int>(layout.crosses.size());
  return base;
}

int DenseChunkFloats(const kernels::DenseTensorSpec& tensor, int chunk) {
  return static_cast<int>(std::min<size_t>(tensor.size(), chunk));
}

int DenseChunks(const kernels::DenseTensorSpec& tensor, int chunk) {
  const int floats = DenseChunkFloats(tensor, chunk);
  return static_cast<int>((tensor.size() + floats - 1) / floats);
}

std::vector<uint64_t> DenseChunkKeys(int chunks) {
  std::vector<uint64_t> keys(chunks);
  for (int c = 0; c < chunks; ++c) keys[c] = c;
  return keys;
}

absl::Status FromKernels(const kernels::Status& status) {
  if (status.ok()) return absl::OkStatus();
  switch (status.code()) {
    case kernels::StatusCode::kInvalidArgument:
      return absl::InvalidArgumentError(status.message());
    case kernels::StatusCode::kUnavailable:
      return absl::UnavailableError(status.message());
    case kernels::StatusCode::kOutOfMemory:
      return absl::ResourceExhaustedError(status.message());
    default:
      return absl::InternalError(status.message());
  }
}

}  // namespace ps::worker
