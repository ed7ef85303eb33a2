#include "worker/model_inputs.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace ps::worker {

void ModelInputs::Prepare(const std::vector<Example>& examples) {
  batch = static_cast<int>(examples.size());
  const int fields = kCategoricalFields;
  index.resize(static_cast<size_t>(batch) * fields);
  dense.resize(static_cast<size_t>(batch) * kDenseFeatures);
  labels.resize(batch);
  unique_keys.clear();
  absl::flat_hash_map<uint64_t, int32_t> position;
  position.reserve(static_cast<size_t>(batch) * fields / 2);
  for (int b = 0; b < batch; ++b) {
    const Example& example = examples[b];
    labels[b] = example.label;
    std::copy(example.dense, example.dense + kDenseFeatures,
              dense.begin() + static_cast<size_t>(b) * kDenseFeatures);
    for (int f = 0; f < fields; ++f) {
      auto [it, inserted] = position.try_emplace(
          example.keys[f], static_cast<int32_t>(unique_keys.size()));
      if (inserted) unique_keys.push_back(example.keys[f]);
      index[static_cast<size_t>(b) * fields + f] = it->second;
    }
  }
}

kernels::StepInputs ModelInputs::Step() const {
  kernels::StepInputs in;
  in.batch = batch;
  in.num_unique = static_cast<int>(unique_keys.size());
  in.index = index.data();
  in.dense = dense.data();
  in.labels = labels.data();
  in.embedding_rows = embedding_rows.data();
  in.wide_rows = wide_rows.data();
  for (const auto& params : dense_params)
    in.dense_params.push_back(params.data());
  return in;
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
