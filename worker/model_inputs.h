// File: worker/model_inputs.h
//
// One batch as the model's step takes it: the batch's distinct keys (the
// rows to fetch, from the shards when training or from an export when
// scoring), each example's keys as indices into them, its dense features
// and labels; then the fetched rows and dense parameters. The trainer and
// ps_predict build their steps the same way from it. Also how a dense
// tensor is split into rows of a table (chunks keyed 0, 1, 2, ...).
// Not thread-safe: one batch, one owner.

#ifndef PS_WORKER_MODEL_INPUTS_H_
#define PS_WORKER_MODEL_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "worker/features.h"

namespace ps::worker {

struct ModelInputs {
  int batch = 0;
  std::vector<uint64_t> unique_keys;
  // batch x fields indices into unique_keys.
  std::vector<int32_t> index;
  std::vector<float> dense;
  std::vector<float> labels;
  // Fetched: unique_keys.size() rows of each table, and each dense tensor
  // padded to whole chunks.
  std::vector<float> embedding_rows;
  std::vector<float> wide_rows;
  std::vector<std::vector<float>> dense_params;

  // Fills batch, unique_keys, index, dense and labels from `examples`.
  void Prepare(const std::vector<Example>& examples);

  // The step's view of this batch; points into it.
  kernels::StepInputs Step() const;
};

// The floats in one row of a dense tensor's table (the tensor's size when it
// is smaller than `chunk`), and the rows it takes.
int DenseChunkFloats(const kernels::DenseTensorSpec& tensor, int chunk);
int DenseChunks(const kernels::DenseTensorSpec& tensor, int chunk);
// The keys of those rows: 0, 1, ..., chunks - 1.
std::vector<uint64_t> DenseChunkKeys(int chunks);

// The one place a kernels::Status becomes an absl::Status.
absl::Status FromKernels(const kernels::Status& status);

}  // namespace ps::worker

#endif  // PS_WORKER_MODEL_INPUTS_H_
