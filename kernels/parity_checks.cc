#include "kernels/parity_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "kernels/ctr_model.h"
#include "kernels/random_step.h"

namespace ps::kernels {
namespace {

constexpr double kElementwiseTolerance = 1e-5;
constexpr double kReductionTolerance = 1e-4;

// A buffer in a backend's memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, size_t bytes) : backend_(backend) {
    status_ = backend.Allocate(bytes, &data_);
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) backend_.Free(data_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  const Status& status() const { return status_; }

 private:
  Backend& backend_;
  void* data_ = nullptr;
  Status status_;
};

// The relative error of a whole tensor: the larger of ||candidate -
// reference|| / ||reference|| (2-norms) and max |c - r| / max |r|, or
// ||candidate|| when the reference is all zeros;
// infinite for a size mismatch or a NaN. Relative to the tensor's own
// scale, so that gradients of 3e-5 that came out zero, doubled or missing a
// row fail as surely as large ones (an element's |c - r| / (1 + |r|) would
// pass them).
double MaxError(const std::vector<float>& reference,
                const std::vector<float>& candidate) {
  if (reference.size() != candidate.size()) return INFINITY;
  double difference = 0, norm = 0, largest_difference = 0, largest = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double d = static_cast<double>(candidate[i]) - reference[i];
    difference += d * d;
    norm += static_cast<double>(reference[i]) * reference[i];
    largest_difference = std::max(largest_difference, std::fabs(d));
    largest = std::max(largest, std::fabs(static_cast<double>(reference[i])));
  }
  if (std::isnan(difference) || std::isinf(difference)) return INFINITY;
  if (norm == 0) return std::sqrt(difference);
  // And the largest element's error against the largest element, so that
  // one wrong element in a large tensor is not averaged away.
  return std::max(std::sqrt(difference / norm), largest_difference / largest);
}

std::vector<float> RandomFloats(size_t count, std::mt19937* rng,
                                float scale = 1.0f) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(*rng);
  return values;
}

// Inputs of one kernel call, uploaded to a backend; `run` calls the kernel
// with device pointers, then the outputs are downloaded.
struct Case {
  std::string name;
  double tolerance;
  std::vector<std::vector<float>> inputs;   // float or int32 bit patterns
  std::vector<size_t> output_sizes;         // floats
  std::vector<std::vector<float>> initial;  // initial contents of outputs
  std::function<Status(Backend&, const std::vector<float*>&,
                       const std::vector<float*>&)>
      run;
};

Status RunCase(Backend& backend, const Case& c,
               std::vector<std::vector<float>>* outputs) {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<float*> in, out;
  for (const auto& input : c.inputs) {
    buffers.push_back(
        std::make_unique<DeviceBuffer>(backend, input.size() * sizeof(float)));
    KERNELS_RETURN_IF_ERROR(buffers.back()->status());
    KERNELS_RETURN_IF_ERROR(backend.CopyToDevice(buffers.back()->as<void>(),
                                                 input.data(),
                                                 input.size() * sizeof(float)));
    in.push_back(buffers.back()->as<float>());
  }
  for (size_t o = 0; o < c.output_sizes.size(); ++o) {
    buffers.push_back(std::make_unique<DeviceBuffer>(
        backend, c.output_sizes[o] * sizeof(float)));
    KERNELS_RETURN_IF_ERROR(buffers.back()->status());
    std::vector<float> start =
        o < c.initial.size() ? c.initial[o]
                             : std::vector<float>(c.output_sizes[o], 0.0f);
    KERNELS_RETURN_IF_ERROR(backend.CopyToDevice(buffers.back()->as<void>(),
                                                 start.data(),
                                                 start.size() * sizeof(float)));
    out.push_back(buffers.back()->as<float>());
  }
  KERNELS_RETURN_IF_ERROR(c.run(backend, in, out));
  outputs->assign(c.output_sizes.size(), {});
  for (size_t o = 0; o < c.output_sizes.size(); ++o) {
    (*outputs)[o].resize(c.output_sizes[o]);
    KERNELS_RETURN_IF_ERROR(backend.CopyToHost(
        (*outputs)[o].data(), out[o], c.output_sizes[o] * sizeof(float)));
  }
  return backend.Synchronize();
}

std::vector<float> IndexAsFloats(const std::vector<int32_t>& index) {
  std::vector<float> bits(index.size());
  std::memcpy(bits.data(), index.data(), index.size() * sizeof(int32_t));
  return bits;
}

std::vector<Case> KernelCases(std::mt19937* rng, double gemm_tolerance) {
  std::vector<Case> cases;
  // GEMM in every transpose, odd sizes, plus an empty inner dimension.
  for (int variant = 0; variant < 4; ++variant) {
    const bool ta = variant & 1, tb = variant & 2;
    const int m = 37, n = 29, k = 131;
    Case c{"gemm" + std::string(ta ? "_ta" : "") + (tb ? "_tb" : ""),
           gemm_tolerance,
           {RandomFloats(m * k, rng), RandomFloats(k * n, rng)},
           {static_cast<size_t>(m * n)},
           {RandomFloats(m * n, rng)},
           nullptr};
    c.run = [=](Backend& b, const std::vector<float*>& in,
                const std::vector<float*>& out) {
      return b.Gemm(ta, tb, m, n, k, 0.5f, in[0], ta ? m : k, in[1], tb ? k : n,
                    1.5f, out[0], n);
    };
    cases.push_back(std::move(c));
  }
  {
    Case c{"gemm_empty_inner",
           kElementwiseTolerance,
           {},
           {21},
           {RandomFloats(21, rng)},
           nullptr};
    c.run = [](Backend& b, const std::vector<float*>&,
               const std::vector<float*>& out) {
      return b.Gemm(true, false, 7, 3, 0, 1.0f, out[0], 7, out[0], 3, 0.25f,
                    out[0], 3);
    };
    cases.push_back(std::move(c));
  }
  // MMoE's gates: softmax over a few experts, large inputs included.
  for (int batch : {0, 1, 33, 517}) {
    const int cols = 4;
    const size_t count = std::max<size_t>(static_cast<size_t>(batch) * cols, 1);
    Case softmax{"softmax_b" + std::to_string(batch),
                 kElementwiseTolerance,
                 {RandomFloats(count, rng, 30.0f)},
                 {count},
                 {},
                 nullptr};
    softmax.run = [=](Backend& b, const std::vector<float*>& in,
                      const std::vector<float*>& out) {
      return b.Softmax(in[0], batch, cols, out[0]);
    };
    cases.push_back(std::move(softmax));
    Case softmax_back{
        "softmax_backward_b" + std::to_string(batch),
        kReductionTolerance,
        {RandomFloats(count, rng, 0.5f), RandomFloats(count, rng)},
        {count},
        {},
        nullptr};
    softmax_back.run = [=](Backend& b, const std::vector<float*>& in,
                           const std::vector<float*>& out) {
      return b.SoftmaxBackward(in[0], in[1], batch, cols, out[0]);
    };
    cases.push_back(std::move(softmax_back));
  }
  // Embedding gather / scatter with duplicate keys, and an empty batch.
  for (int batch : {0, 1, 33, 517}) {
    const int fields = 26, dim = 13, rows = std::max(1, batch * fields / 3);
    std::uniform_int_distribution<int32_t> key(0, rows - 1);
    std::vector<int32_t> index(static_cast<size_t>(batch) * fields);
    for (int32_t& i : index) i = key(*rng);
    if (batch > 0) index[1] = index[0];
    const int out_cols = fields * dim + 13;
    Case gather{"gather_concat_b" + std::to_string(batch),
                kElementwiseTolerance,
                {RandomFloats(static_cast<size_t>(rows) * dim, rng),
                 IndexAsFloats(index)},
                {static_cast<size_t>(batch) * out_cols},
                {},
                nullptr};
    gather.run = [=](Backend& b, const std::vector<float*>& in,
                     const std::vector<float*>& out) {
      return b.GatherConcat(in[0], reinterpret_cast<const int32_t*>(in[1]),
                            batch, fields, dim, out[0], out_cols);
    };
    cases.push_back(std::move(gather));
    Case scatter{"scatter_reduce_b" + std::to_string(batch),
                 kReductionTolerance,
                 {RandomFloats(static_cast<size_t>(batch) * out_cols, rng),
                  IndexAsFloats(index)},
                 {static_cast<size_t>(rows) * dim},
                 {RandomFloats(rows * dim, rng)},
                 nullptr};
    scatter.run = [=](Backend& b, const std::vector<float*>& in,
                      const std::vector<float*>& out) {
      return b.ScatterReduce(in[0], out_cols, dim,
                             reinterpret_cast<const int32_t*>(in[1]), batch,
                             fields, dim, rows, out[0]);
    };
    cases.push_back(std::move(scatter));
    Case broadcast{
        "scatter_broadcast_b" + std::to_string(batch),
        kReductionTolerance,
        {RandomFloats(std::max(batch, 1), rng), IndexAsFloats(index)},
        {static_cast<size_t>(rows)},
        {},
        nullptr};
    broadcast.run = [=](Backend& b, const std::vector<float*>& in,
                        const std::vector<float*>& out) {
      return b.ScatterReduce(in[0], 1, 0,
                             reinterpret_cast<const int32_t*>(in[1]), batch,
                             fields, 1, rows, out[0]);
    };
    cases.push_back(std::move(broadcast));
    Case scatter_add{"scatter_add_b" + std::to_string(batch),
                     kReductionTolerance,
                     {RandomFloats(static_cast<size_t>(batch) * out_cols, rng),
                      IndexAsFloats(index)},
                     {static_cast<size_t>(rows) * dim},
                     {RandomFloats(rows * dim, rng)},
                     nullptr};
    scatter_add.run = [=](Backend& b, const std::vector<float*>& in,
                          const std::vector<float*>& out) {
      return b.ScatterAdd(in[0], out_cols, dim,
                          reinterpret_cast<const int32_t*>(in[1]), batch,
                          fields, dim, out[0]);
    };
    cases.push_back(std::move(scatter_add));
    // DLRM's interaction of 27 rows (26 fields and the bottom MLP's output).
    for (bool self_interaction : {false, true}) {
      const int interaction_rows = 27;
      const size_t x_size = static_cast<size_t>(batch) * interaction_rows * dim;
      const size_t width = static_cast<size_t>(
          DotInteractionWidth(interaction_rows, self_interaction));
      const std::string suffix = std::string(self_interaction ? "_self" : "") +
                                 "_b" + std::to_string(batch);
      const std::vector<float> x =
          RandomFloats(std::max<size_t>(x_size, 1), rng);
      Case dot{"dot_interaction" + suffix,
               kReductionTolerance,
               {x},
               {std::max<size_t>(batch * width, 1)},
               {},
               nullptr};
      dot.run = [=](Backend& b, const std::vector<float*>& in,
                    const std::vector<float*>& out) {
        return b.DotInteraction(in[0], batch, interaction_rows, dim,
                                self_interaction, out[0]);
      };
      cases.push_back(std::move(dot));
      Case dot_back{"dot_interaction_backward" + suffix,
                    kReductionTolerance,
                    {x, RandomFloats(std::max<size_t>(batch * width, 1), rng)},
                    {std::max<size_t>(x_size, 1)},
                    {RandomFloats(std::max<size_t>(x_size, 1), rng)},
                    nullptr};
      dot_back.run = [=](Backend& b, const std::vector<float*>& in,
                         const std::vector<float*>& out) {
        return b.DotInteractionBackward(in[0], in[1], batch, interaction_rows,
                                        dim, self_interaction, out[0]);
      };
      cases.push_back(std::move(dot_back));
    }
    Case sum{"gather_sum_b" + std::to_string(batch),
             kReductionTolerance,
             {RandomFloats(rows, rng), IndexAsFloats(index)},
             {static_cast<size_t>(std::max(batch, 1))},
             {RandomFloats(std::max(batch, 1), rng)},
             nullptr};
    sum.run = [=](Backend& b, const std::vector<float*>& in,
                  const std::vector<float*>& out) {
      return b.GatherSum(in[0], reinterpret_cast<const int32_t*>(in[1]), batch,
                         fields, out[0]);
    };
    cases.push_back(std::move(sum));
    // FM over the embedding block of a concatenated input.
    const std::vector<float> x =
        RandomFloats(static_cast<size_t>(batch) * out_cols, rng, 0.5f);
    Case fm{"fm_forward_b" + std::to_string(batch),
            kReductionTolerance,
            {x},
            {static_cast<size_t>(std::max(batch, 1))},
            {RandomFloats(std::max(batch, 1), rng)},
            nullptr};
    fm.run = [=](Backend& b, const std::vector<float*>& in,
                 const std::vector<float*>& out) {
      return b.FmForward(in[0], out_cols, batch, fields, dim, out[0]);
    };
    cases.push_back(std::move(fm));
    Case fm_back{"fm_backward_b" + std::to_string(batch),
                 kReductionTolerance,
                 {x, RandomFloats(std::max(batch, 1), rng)},
                 {static_cast<size_t>(batch) * out_cols},
                 {RandomFloats(static_cast<size_t>(batch) * out_cols, rng)},
                 nullptr};
    fm_back.run = [=](Backend& b, const std::vector<float*>& in,
                      const std::vector<float*>& out) {
      return b.FmBackward(in[0], in[1], out_cols, batch, fields, dim, out[0]);
    };
    cases.push_back(std::move(fm_back));
    std::vector<float> logits = RandomFloats(std::max(batch, 1), rng, 30.0f);
    std::vector<float> labels(std::max(batch, 1));
    for (size_t i = 0; i < labels.size(); ++i)
      labels[i] = i % 3 == 0 ? 1.0f : 0.0f;
    const size_t n = std::max(batch, 1);
    Case loss{"sigmoid_cross_entropy_b" + std::to_string(batch),
              kReductionTolerance,
              {logits, labels},
              {n, n, 1},
              {},
              nullptr};
    loss.run = [=](Backend& b, const std::vector<float*>& in,
                   const std::vector<float*>& out) {
      return b.SigmoidCrossEntropy(in[0], in[1], nullptr, batch, out[0], out[1],
                                   out[2]);
    };
    cases.push_back(std::move(loss));
    // Weighted and masked: some scales 0, the others spread over (0, 4).
    std::vector<float> scale = RandomFloats(n, rng, 2.0f);
    for (size_t i = 0; i < scale.size(); ++i)
      scale[i] = i % 5 == 0 ? 0.0f : 2.0f + scale[i];
    Case scaled{"sigmoid_cross_entropy_scaled_b" + std::to_string(batch),
                kReductionTolerance,
                {logits, labels, scale},
                {n, n, 1},
                {},
                nullptr};
    scaled.run = [=](Backend& b, const std::vector<float*>& in,
                     const std::vector<float*>& out) {
      return b.SigmoidCrossEntropy(in[0], in[1], in[2], batch, out[0], out[1],
                                   out[2]);
    };
    cases.push_back(std::move(scaled));
  }
  // Elementwise kernels on an odd shape.
  {
    const int rows = 45, cols = 77;
    const std::vector<float> x = RandomFloats(rows * cols, rng);
    Case bias{"bias_relu",
              kElementwiseTolerance,
              {RandomFloats(cols, rng)},
              {static_cast<size_t>(rows * cols)},
              {x},
              nullptr};
    bias.run = [=](Backend& b, const std::vector<float*>& in,
                   const std::vector<float*>& out) {
      return b.BiasActivation(out[0], in[0], rows, cols, true);
    };
    cases.push_back(std::move(bias));
    Case relu{"relu_backward",
              kElementwiseTolerance,
              {x},
              {static_cast<size_t>(rows * cols)},
              {RandomFloats(rows * cols, rng)},
              nullptr};
    relu.run = [=](Backend& b, const std::vector<float*>& in,
                   const std::vector<float*>& out) {
      return b.ReluBackward(in[0], out[0], static_cast<size_t>(rows) * cols);
    };
    cases.push_back(std::move(relu));
    Case sums{"column_sums",
              kReductionTolerance,
              {x},
              {static_cast<size_t>(cols)},
              {},
              nullptr};
    sums.run = [=](Backend& b, const std::vector<float*>& in,
                   const std::vector<float*>& out) {
      return b.ColumnSums(in[0], rows, cols, out[0]);
    };
    cases.push_back(std::move(sums));
    Case copy{"copy_columns",
              kElementwiseTolerance,
              {x},
              {static_cast<size_t>(rows) * (cols + 9)},
              {},
              nullptr};
    copy.run = [=](Backend& b, const std::vector<float*>& in,
                   const std::vector<float*>& out) {
      return b.CopyColumns(in[0], rows, cols, out[0], cols + 9, 5);
    };
    cases.push_back(std::move(copy));
    const size_t count = static_cast<size_t>(rows) * cols;
    Case add{"add",   kElementwiseTolerance,      {x},
             {count}, {RandomFloats(count, rng)}, nullptr};
    add.run = [=](Backend& b, const std::vector<float*>& in,
                  const std::vector<float*>& out) {
      return b.Add(in[0], out[0], count);
    };
    cases.push_back(std::move(add));
    for (bool accumulate : {false, true}) {
      Case multiply{accumulate ? "multiply_accumulate" : "multiply",
                    kElementwiseTolerance,
                    {x, RandomFloats(count, rng)},
                    {count},
                    {RandomFloats(count, rng)},
                    nullptr};
      multiply.run = [=](Backend& b, const std::vector<float*>& in,
                         const std::vector<float*>& out) {
        return b.Multiply(in[0], in[1], out[0], count, accumulate);
      };
      cases.push_back(std::move(multiply));
    }
    Case columns{"accumulate_columns",
                 kElementwiseTolerance,
                 {x},
                 {static_cast<size_t>(rows) * (cols - 11)},
                 {RandomFloats(static_cast<size_t>(rows) * (cols - 11), rng)},
                 nullptr};
    columns.run = [=](Backend& b, const std::vector<float*>& in,
                      const std::vector<float*>& out) {
      return b.AccumulateColumns(in[0], rows, cols, 7, out[0], cols - 11);
    };
    cases.push_back(std::move(columns));
  }
  return cases;
}

// The largest error over every output of a training step.
double StepError(const StepOutputs& expected, const StepOutputs& actual,
                 int batch) {
  double worst = MaxError({expected.loss_sum / std::max(batch, 1)},
                          {actual.loss_sum / std::max(batch, 1)});
  worst =
      std::max(worst, MaxError(expected.probabilities, actual.probabilities));
  worst = std::max(worst,
                   MaxError(expected.embedding_grads, actual.embedding_grads));
  worst = std::max(worst, MaxError(expected.wide_grads, actual.wide_grads));
  if (expected.dense_grads.size() != actual.dense_grads.size()) return INFINITY;
  for (size_t t = 0; t < expected.dense_grads.size(); ++t) {
    worst = std::max(worst,
                     MaxError(expected.dense_grads[t], actual.dense_grads[t]));
  }
  return worst;
}

// A whole training step of `kind` on both backends.
ParityResult ModelParity(Backend& reference, Backend& candidate, ModelKind kind,
                         int batch, double tolerance, std::mt19937* rng) {
  ModelConfig config;
  config.kind = kind;
  config.embedding_dim = 13;
  config.hidden = {67, 31};
  const RandomStep step(config, batch, std::max(1, batch * config.fields / 4),
                        (*rng)());
  const StepInputs in = step.Inputs();

  const char* names[] = {"lr", "wide_deep", "deepfm"};
  ParityResult result{std::string("train_step_") +
                          names[static_cast<int>(kind)] + "_b" +
                          std::to_string(batch),
                      0, tolerance, ""};
  StepOutputs expected, actual;
  CtrModel reference_model(config, &reference),
      candidate_model(config, &candidate);
  Status status = reference_model.TrainStep(in, &expected);
  if (status.ok()) status = candidate_model.TrainStep(in, &actual);
  if (!status.ok()) {
    result.failure = status.message();
    return result;
  }
  const double worst = StepError(expected, actual, batch);
  result.max_error = worst;
  return result;
}

// Five training steps in a row, each uploading the next one's inputs while
// it runs (the double-buffered path), with a Predict() of other inputs
// between two of them, which must not disturb what is staged. Two results:
// the steps' largest error, and the prediction's.
std::vector<ParityResult> StagedStepsParity(Backend& reference,
                                            Backend& candidate, ModelKind kind,
                                            int batch, double tolerance,
                                            std::mt19937* rng) {
  ModelConfig config;
  config.kind = kind;
  config.embedding_dim = 13;
  config.hidden = {67, 31};
  constexpr int kSteps = 5;
  std::vector<std::unique_ptr<RandomStep>> steps;
  for (int s = 0; s <= kSteps; ++s) {
    steps.push_back(std::make_unique<RandomStep>(
        config, batch, std::max(1, batch * config.fields / 4), (*rng)()));
  }
  std::vector<StepInputs> inputs;
  for (const auto& step : steps) inputs.push_back(step->Inputs());
  const char* names[] = {"lr", "wide_deep", "deepfm"};
  const std::string suffix =
      std::string(names[static_cast<int>(kind)]) + "_b" + std::to_string(batch);
  ParityResult staged{"staged_steps_" + suffix, 0, tolerance, ""};
  ParityResult predicted{"predict_between_steps_" + suffix, 0, tolerance, ""};
  CtrModel reference_model(config, &reference),
      candidate_model(config, &candidate);
  for (int s = 0; s < kSteps; ++s) {
    const StepInputs* next = s + 1 < kSteps ? &inputs[s + 1] : nullptr;
    StepOutputs expected, actual;
    // The reference uploads each step's inputs as it runs it: a bug in the
    // staging itself shows, on any backend.
    Status status = reference_model.TrainStep(inputs[s], &expected);
    if (status.ok())
      status = candidate_model.TrainStep(inputs[s], &actual, next);
    if (!status.ok()) {
      staged.failure = "step " + std::to_string(s) + ": " + status.message();
      break;
    }
    staged.max_error =
        std::max(staged.max_error, StepError(expected, actual, batch));
    if (s == 1) {
      // inputs[2] is staged now; predict on inputs[kSteps], unrelated.
      std::vector<float> expected_p, actual_p;
      status = reference_model.Predict(inputs[kSteps], &expected_p);
      if (status.ok())
        status = candidate_model.Predict(inputs[kSteps], &actual_p);
      if (!status.ok()) {
        predicted.failure = status.message();
      } else {
        predicted.max_error = MaxError(expected_p, actual_p);
      }
    }
  }
  return {staged, predicted};
}

}  // namespace

std::vector<ParityResult> RunParityChecks(Backend& reference,
                                          Backend& candidate,
                                          double gemm_tolerance) {
  std::mt19937 rng(20261129);
  std::vector<ParityResult> results;
  for (const Case& c : KernelCases(&rng, gemm_tolerance)) {
    ParityResult result{c.name, 0, c.tolerance, ""};
    std::vector<std::vector<float>> expected, actual;
    Status status = RunCase(reference, c, &expected);
    if (status.ok()) status = RunCase(candidate, c, &actual);
    if (!status.ok()) {
      result.failure = status.message();
    } else {
      for (size_t o = 0; o < expected.size(); ++o) {
        result.max_error =
            std::max(result.max_error, MaxError(expected[o], actual[o]));
      }
    }
    results.push_back(result);
  }
  for (ModelKind kind : {ModelKind::kLogisticRegression, ModelKind::kWideDeep,
                         ModelKind::kDeepFm}) {
    for (int batch : {0, 1, 61, 1000}) {
      results.push_back(ModelParity(
          reference, candidate, kind, batch,
          std::max(gemm_tolerance, kReductionTolerance) * 10, &rng));
    }
    for (int batch : {61, 1000}) {
      for (ParityResult& result : StagedStepsParity(
               reference, candidate, kind, batch,
               std::max(gemm_tolerance, kReductionTolerance) * 10, &rng)) {
        results.push_back(std::move(result));
      }
    }
  }
  return results;
}

}  // namespace ps::kernels
