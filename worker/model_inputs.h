// File: worker/model_inputs.h
//
// One batch as the model's step takes it: the rows to fetch (from the
// shards when training, from an export when scoring), each example's rows
// as indices into them, its dense features and labels; then the fetched
// rows and dense parameters. The trainer and ps_predict build their steps
// the same way from it. Also how a dense tensor is split into rows of a
// table (chunks keyed 0, 1, 2, ...).
//
// Rows. The embedding table's rows are the batch's distinct field keys
// (unique_keys), then one pooled row per (example, field) slot that holds
// several keys (a multi field): the sum or mean of its keys' rows, computed
// here after the fetch (PoolRows) and whose gradient goes back to those keys
// (FoldPooledGradients). The wide table's rows are the same, with the
// crosses' distinct keys after unique_keys (wide_keys) and the crosses'
// pooled rows after the fields'. A Criteo-style batch (one key per slot, no
// crosses) has no pooled rows and wide rows equal to the embedding rows.
//
// Not thread-safe: one batch, one owner.

#ifndef PS_WORKER_MODEL_INPUTS_H_
#define PS_WORKER_MODEL_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "worker/input/features.h"
#include "worker/input/input_layout.h"

namespace ps::worker {

struct ModelInputs {
  int batch = 0;
  // The keys to fetch: of the embedding table (and the first of the wide
  // table's), and of the wide table (unique_keys, then the crosses' keys;
  // empty when the layout has no crosses: unique_keys then).
  std::vector<uint64_t> unique_keys;
  std::vector<uint64_t> wide_keys;
  // batch x fields indices into the embedding rows (and the wide rows, when
  // there are no crosses).
  std::vector<int32_t> index;
  // batch x (fields + crosses) indices into the wide rows; empty when the
  // layout has no crosses.
  std::vector<int32_t> wide_index;
  std::vector<float> dense;
  std::vector<float> labels;
  // Fetched (the first unique_keys.size() and wide_fetch_keys().size() rows;
  // the pooled ones after them), and each dense tensor padded to whole
  // chunks.
  std::vector<float> embedding_rows;
  std::vector<float> wide_rows;
  std::vector<std::vector<float>> dense_params;

  // Pooled rows: pool p averages or sums rows pool_members[pool_begin(p),
  // pool_end[p]) (positions among the fetched rows, the same in both
  // tables) times pool_scale[p]. The first field_pools are fields' (in both
  // tables), the rest crosses' (wide only).
  std::vector<int32_t> pool_members;
  std::vector<uint32_t> pool_end;
  std::vector<float> pool_scale;
  int field_pools = 0;

  // Fills everything but the fetched rows from `examples`, parsed with
  // `layout`, and sizes the row buffers.
  void Prepare(const std::vector<Example>& examples, const InputLayout& layout,
               int embedding_dim);

  const std::vector<uint64_t>& wide_fetch_keys() const {
    return wide_keys.empty() ? unique_keys : wide_keys;
  }
  size_t embedding_row_count() const {
    return unique_keys.size() + field_pools;
  }
  size_t wide_row_count() const {
    return wide_fetch_keys().size() + pool_end.size();
  }

  // After the fetch: computes the pooled rows (embedding rows only when
  // `embedding_dim` > 0, i.e. the model has embeddings).
  void PoolRows(int embedding_dim);

  // After the step: adds each pooled row's gradient to its members' and
  // truncates both to the fetched rows, so that they line up with
  // unique_keys and wide_fetch_keys(). embedding_grads may be empty (lr).
  void FoldPooledGradients(int embedding_dim,
                           std::vector<float>* embedding_grads,
                           std::vector<float>* wide_grads) const;

  // The step's view of this batch; points into it.
  kernels::StepInputs Step() const;

 private:
  uint32_t pool_begin(size_t pool) const {
    return pool == 0 ? 0 : pool_end[pool - 1];
  }
};

// The model's shape for `layout` (fields, dense features, crosses), on top
// of `base` (kind, embedding dimension, hidden widths).
kernels::ModelConfig ConfigForLayout(kernels::ModelConfig base,
                                     const InputLayout& layout);

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
