// File: kernels/random_step.h
//
// RandomStep owns one training step's inputs filled with random values of
// the right shapes for a ModelConfig: per-example indices into `num_unique`
// rows (so keys repeat, as on click logs), dense features, labels (one in
// four positive), embedding and wide rows, and every dense tensor. For the
// parity checks and the step benchmark; header-only so that plain nvcc builds
// it. Deterministic given the seed.

#ifndef PS_KERNELS_RANDOM_STEP_H_
#define PS_KERNELS_RANDOM_STEP_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ctr_model.h"

namespace ps::kernels {

struct RandomStep {
  // Values are uniform on [-scale, scale]. REQUIRES: unique_rows >= 1 when
  // config.fields > 0.
  RandomStep(const ModelConfig& config, int batch_size, int unique_rows,
             uint32_t seed, float scale = 0.1f)
      : batch(batch_size), num_unique(unique_rows) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> row(0, std::max(num_unique - 1, 0));
    std::uniform_real_distribution<float> uniform(-scale, scale);
    index.resize(static_cast<size_t>(batch) * config.fields);
    for (int32_t& i : index) i = row(rng);
    dense.resize(static_cast<size_t>(batch) * config.dense_features);
    for (float& v : dense) v = uniform(rng) * 10;
    labels.resize(batch);
    for (int b = 0; b < batch; ++b) labels[b] = b % 4 == 0 ? 1.0f : 0.0f;
    embedding_rows.resize(static_cast<size_t>(num_unique) *
                          config.embedding_dim);
    for (float& v : embedding_rows) v = uniform(rng);
    wide_rows.resize(num_unique);
    for (float& v : wide_rows) v = uniform(rng);
    for (const DenseTensorSpec& tensor : DenseTensors(config)) {
      dense_params.emplace_back(tensor.size());
      for (float& v : dense_params.back()) v = uniform(rng);
    }
  }

  // Points into this object, which must outlive the result.
  StepInputs Inputs() const {
    StepInputs in;
    in.batch = batch;
    in.num_unique = num_unique;
    in.index = index.data();
    in.dense = dense.data();
    in.labels = labels.data();
    in.embedding_rows = embedding_rows.data();
    in.wide_rows = wide_rows.data();
    for (const auto& params : dense_params)
      in.dense_params.push_back(params.data());
    return in;
  }

  int batch;
  int num_unique;
  std::vector<int32_t> index;
  std::vector<float> dense, labels, embedding_rows, wide_rows;
  std::vector<std::vector<float>> dense_params;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_RANDOM_STEP_H_
