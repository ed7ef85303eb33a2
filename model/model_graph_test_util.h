// File: model/model_graph_test_util.h
//
// What the ModelGraph tests share: the columns and inputs of the per-layer
// specs, a plan from a spec's layers, a random step (rows, tensors and
// labels) and its mean loss, the finite-difference check of a step's
// gradients, and the table of per-layer cases.

#ifndef PS_MODEL_MODEL_GRAPH_TEST_UTIL_H_
#define PS_MODEL_MODEL_GRAPH_TEST_UTIL_H_

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "kernels/forwarding_backend.h"
#include "model/builtin_specs.h"
#include "model/model_graph.h"
#include "model/model_plan.h"

namespace ps::model {

// label, dense x 3, cat x 4: the built-ins' columns.
inline const std::vector<ColumnUse> kColumns = {
    ColumnUse::kOther,       ColumnUse::kDense,       ColumnUse::kDense,
    ColumnUse::kDense,       ColumnUse::kCategorical, ColumnUse::kCategorical,
    ColumnUse::kCategorical, ColumnUse::kCategorical};
// The same and a seq column: the per-layer specs' (kInputs).
inline const std::vector<ColumnUse> kColumnsWithSequence = {
    ColumnUse::kOther,       ColumnUse::kDense,       ColumnUse::kDense,
    ColumnUse::kDense,       ColumnUse::kCategorical, ColumnUse::kCategorical,
    ColumnUse::kCategorical, ColumnUse::kCategorical, ColumnUse::kSequence};

// What built-in `name` is planned over in these tests: the built-ins'
// columns (din: with the seq column) and labels (mmoe: two), set in
// `options`.
inline const std::vector<ColumnUse>& FitBuiltin(const std::string& name,
                                                BuiltinOptions* options) {
  if (name == "mmoe") options->labels = {"click", "convert"};
  if (name == "din") options->max_sequence_length = 3;
  return name == "din" ? kColumnsWithSequence : kColumns;
}

// The header of the per-layer specs: two tables of different dims, a wide
// table, the four fields, a cross, the dense group, a bucketized group, a
// sequence of 3.
inline constexpr char kInputs[] = R"(
name: "test"
table { name: "small" dim: 4 init_scale: 0.5 }
table { name: "large" dim: 6 init_scale: 0.5 }
table { name: "wide" dim: 1 init_scale: 0.5 }
field { name: "f0" column: 4 }
field { name: "f1" column: 5 }
field { name: "f2" column: 6 }
field { name: "f3" column: 7 }
cross { name: "f0_x_f1" fields: "f0" fields: "f1" }
dense { name: "dense" columns: 1 columns: 2 columns: 3 }
dense { name: "buckets" columns: 1 columns: 3 transform: BUCKETIZE
        boundaries: 0 boundaries: 1 }
sequence { name: "history" column: 8 max_length: 3 }
)";

// `labels`: the click log's label columns' names (empty: one plain label).
inline ModelPlan Plan(const std::string& layers,
                      const std::vector<std::string>& labels = {}) {
  absl::StatusOr<ParsedModelSpec> parsed =
      ParseModelSpec(std::string(kInputs) + layers);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ModelPlan> plan =
      ModelPlan::Create(*parsed, kColumnsWithSequence, labels);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Built-in `name` planned over the columns FitBuiltin() gives it, with
// `options` (fitted to it in place).
inline ModelPlan BuiltinPlan(const std::string& name, BuiltinOptions* options) {
  const std::vector<ColumnUse>& columns = FitBuiltin(name, options);
  absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, columns, *options);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ModelPlan> plan =
      ModelPlan::Create(ParsedModelSpec{*spec, {}}, columns, options->labels);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Random inputs and parameters for a plan, in host memory.
struct Step {
  int batch = 0;
  std::vector<float> labels;      // tasks x batch
  std::vector<float> loss_scale;  // tasks x batch; empty: none
  std::vector<std::vector<float>> table_rows;
  std::vector<int> row_counts;
  std::vector<int32_t> lookup_index;
  std::vector<std::vector<float>> dense_inputs;
  std::vector<std::vector<float>> sequence_masks;
  std::vector<std::vector<float>> params;

  GraphInputs Inputs() const {
    GraphInputs inputs;
    inputs.batch = batch;
    inputs.labels = labels.data();
    inputs.loss_scale = loss_scale.empty() ? nullptr : loss_scale.data();
    for (const auto& rows : table_rows)
      inputs.table_rows.push_back(rows.data());
    inputs.table_row_counts = row_counts;
    inputs.lookup_index = lookup_index.data();
    for (const auto& dense : dense_inputs)
      inputs.dense_inputs.push_back(dense.data());
    for (const auto& mask : sequence_masks)
      inputs.sequence_masks.push_back(mask.data());
    for (const auto& param : params)
      inputs.dense_params.push_back(param.data());
    return inputs;
  }
};

// A plan of several tasks gets a loss scale too: every fourth label masked
// (0), the others weighted 0.5 to 1.5 times the task's loss weight.
inline Step RandomStep(const ModelPlan& plan, int batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Step step;
  step.batch = batch;
  const int tasks = static_cast<int>(plan.tasks().size());
  for (int t = 0; t < tasks; ++t) {
    for (int b = 0; b < batch; ++b) {
      step.labels.push_back((b + t) % 3 == 0 ? 1 : 0);
      if (tasks > 1) {
        step.loss_scale.push_back((b + t) % 4 == 3
                                      ? 0.0f
                                      : plan.tasks()[t].loss_weight *
                                            (0.5f + 0.5f * (b % 3)));
      }
    }
  }
  for (int t = 0; t < plan.spec().table_size(); ++t) {
    // Fewer rows than examples: keys repeat within a batch.
    const int rows = 5 + t;
    step.row_counts.push_back(rows);
    std::vector<float> values(static_cast<size_t>(rows) * plan.table_dim(t));
    for (float& v : values) v = 0.5f * uniform(rng);
    step.table_rows.push_back(std::move(values));
  }
  for (const Lookup& lookup : plan.lookups()) {
    std::uniform_int_distribution<int32_t> row(
        0, step.row_counts[lookup.table] - 1);
    for (int b = 0; b < batch; ++b) step.lookup_index.push_back(row(rng));
  }
  for (int node : plan.dense_nodes()) {
    std::vector<float> values(static_cast<size_t>(batch) *
                              plan.nodes()[node].width);
    for (float& v : values) v = uniform(rng);
    step.dense_inputs.push_back(std::move(values));
  }
  // Sequences of every length from 0 to max_length.
  for (int node : plan.sequence_nodes()) {
    const int positions = plan.nodes()[node].slots;
    std::vector<float> mask(static_cast<size_t>(batch) * positions, 0.0f);
    for (int b = 0; b < batch; ++b) {
      for (int p = 0; p < b % (positions + 1); ++p) mask[b * positions + p] = 1;
    }
    step.sequence_masks.push_back(std::move(mask));
  }
  for (const kernels::DenseTensorSpec& tensor : plan.dense_tensors()) {
    // Not the initializer's zeros: every weight and bias takes part.
    std::vector<float> values(tensor.size());
    const float scale = tensor.init_scale > 0 ? tensor.init_scale : 0.3f;
    for (float& v : values) v = scale * uniform(rng);
    step.params.push_back(std::move(values));
  }
  return step;
}

inline double MeanLoss(ModelGraph& graph, const Step& step) {
  GraphOutputs outputs;
  const absl::Status status = graph.TrainStep(step.Inputs(), &outputs);
  EXPECT_TRUE(status.ok()) << status;
  return static_cast<double>(outputs.loss_sum) / step.batch;
}

inline double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// Checks each dense tensor's and each table's gradient along a random unit
// direction by central differences; returns a line per mismatch.
inline std::vector<std::string> GradientMismatches(const ModelPlan& plan,
                                                   kernels::Backend* backend,
                                                   int batch = 9,
                                                   uint32_t seed = 7) {
  ModelGraph graph(&plan, backend);
  const Step step = RandomStep(plan, batch, seed);
  GraphOutputs outputs;
  const absl::Status status = graph.TrainStep(step.Inputs(), &outputs);
  if (!status.ok()) return {std::string(status.message())};
  std::vector<std::string> mismatches;
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal;
  // The derivative along `direction` (unit length), by central differences,
  // against the gradient's projection on it.
  const auto check_along = [&](const std::string& name,
                               std::vector<float>* values,
                               const std::vector<float>& gradient,
                               const std::vector<float>& direction,
                               Step* perturbed) {
    const double analytic = Dot(gradient, direction);
    const std::vector<float> original = *values;
    const auto numeric_derivative = [&](float epsilon) {
      for (size_t i = 0; i < values->size(); ++i)
        (*values)[i] = original[i] + epsilon * direction[i];
      const double plus = MeanLoss(graph, *perturbed);
      for (size_t i = 0; i < values->size(); ++i)
        (*values)[i] = original[i] - epsilon * direction[i];
      const double minus = MeanLoss(graph, *perturbed);
      *values = original;
      return (plus - minus) / (2 * epsilon);
    };
    // A projection is rarely much smaller than |gradient| / sqrt(size):
    // tolerances are relative to that at least, so that a small one passes
    // on the float rounding of the loss (1e-7 relative), not on luck.
    const double typical = std::sqrt(Dot(gradient, gradient) /
                                     std::max<size_t>(gradient.size(), 1));
    // A ReLU that flips within epsilon of the point bends the difference
    // quotient (by about epsilon): a smaller step then agrees.
    std::string tried;
    for (float epsilon : {2e-3f, 5e-4f, 2e-4f}) {
      const double numeric = numeric_derivative(epsilon);
      const double tolerance =
          0.02 * std::max({std::fabs(numeric), std::fabs(analytic), typical}) +
          5e-5;
      if (std::fabs(numeric - analytic) <= tolerance) return;
      tried += " " + std::to_string(numeric);
    }
    mismatches.push_back(name + ": analytic " + std::to_string(analytic) +
                         ", numeric" + tried);
  };
  // Along the gradient itself (a wrong gradient g' agrees there only if its
  // error is orthogonal to g') and along a random direction.
  const auto check = [&](const std::string& name, std::vector<float>* values,
                         const std::vector<float>& gradient, Step* perturbed) {
    const double norm = std::sqrt(Dot(gradient, gradient));
    if (norm > 0) {
      std::vector<float> direction(gradient);
      for (float& d : direction) d /= norm;
      check_along(name + " (along its gradient)", values, gradient, direction,
                  perturbed);
    }
    std::vector<float> direction(values->size());
    double squares = 0;
    for (float& d : direction) {
      d = normal(rng);
      squares += d * d;
    }
    for (float& d : direction) d /= std::sqrt(squares);
    check_along(name, values, gradient, direction, perturbed);
  };
  Step perturbed = step;
  for (size_t t = 0; t < plan.dense_tensors().size(); ++t) {
    check(plan.dense_tensors()[t].name, &perturbed.params[t],
          outputs.dense_grads[t], &perturbed);
  }
  for (int t = 0; t < plan.spec().table_size(); ++t) {
    check("table " + plan.spec().table(t).name(), &perturbed.table_rows[t],
          outputs.table_grads[t], &perturbed);
  }
  return mismatches;
}

struct LayerCase {
  const char* name;
  const char* layers;
};

inline constexpr LayerCase kLayerCases[] = {
    {"embedding_and_mlp", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "small" } }
layer { name: "out" inputs: "emb" mlp { units: 5 units: 3 units: 1 } }
output: "out")"},
    {"mlp_without_activation", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "out" inputs: "emb"
        mlp { units: 5 units: 1 activation: NONE } }
output: "out")"},
    {"mlp_with_last_relu", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "bottom" inputs: "emb"
        mlp { units: 7 units: 4 last_activation: RELU } }
layer { name: "out" inputs: "bottom" mlp { units: 1 } }
output: "out")"},
    {"wide_with_a_cross", R"(
layer { name: "out" inputs: "f0" inputs: "f3" inputs: "f0_x_f1"
        wide { table: "wide" } }
output: "out")"},
    {"wide_with_dense", R"(
layer { name: "projected" inputs: "dense" mlp { units: 4 } }
layer { name: "out" inputs: "f0" inputs: "projected" inputs: "f0_x_f1"
        wide { table: "wide" } }
output: "out")"},
    // emb and emb2 are written in place as x's columns (read by x alone);
    // projected is copied in, and its gradient copied out.
    {"concat", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "emb2" inputs: "f2" embedding { table: "large" } }
layer { name: "projected" inputs: "dense" mlp { units: 3 } }
layer { name: "x" inputs: "emb" inputs: "dense" inputs: "projected"
        inputs: "emb2" concat {} }
layer { name: "out" inputs: "x" mlp { units: 4 units: 1 } }
output: "out")"},
    // emb is read by the concat and the fm: it keeps its own buffers.
    {"concat_of_a_shared_input", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "x" inputs: "dense" inputs: "emb" concat {} }
layer { name: "deep" inputs: "x" mlp { units: 1 } }
layer { name: "fm" inputs: "emb" fm {} }
layer { name: "out" inputs: "deep" inputs: "fm" add {} }
output: "out")"},
    {"fm", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "small" } }
layer { name: "projected" inputs: "dense"
        mlp { units: 4 activation: NONE } }
layer { name: "fm" inputs: "emb" inputs: "projected" fm {} }
output: "fm")"},
    {"fm_of_one_input", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "small" } }
layer { name: "fm" inputs: "emb" fm {} }
output: "fm")"},
    {"cross_full_rank", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "x0" inputs: "emb" inputs: "dense" concat {} }
layer { name: "cross" inputs: "x0" cross { num_layers: 3 } }
layer { name: "out" inputs: "cross" mlp { units: 1 } }
output: "out")"},
    {"cross_low_rank", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "x0" inputs: "emb" inputs: "dense" concat {} }
layer { name: "cross" inputs: "x0" cross { num_layers: 2 low_rank: 3 } }
layer { name: "out" inputs: "cross" mlp { units: 1 } }
output: "out")"},
    {"dot_interaction", R"(
layer { name: "bottom" inputs: "dense"
        mlp { units: 6 units: 4 last_activation: RELU } }
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "small" } }
layer { name: "pairs" inputs: "bottom" inputs: "emb" dot_interaction {} }
layer { name: "top_input" inputs: "bottom" inputs: "pairs" concat {} }
layer { name: "out" inputs: "top_input" mlp { units: 5 units: 1 } }
output: "out")"},
    {"dot_interaction_with_self", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "large" } }
layer { name: "pairs" inputs: "emb" dot_interaction { self_interaction: true } }
layer { name: "out" inputs: "pairs" mlp { units: 1 } }
output: "out")"},
    {"add", R"(
layer { name: "linear" inputs: "dense" mlp { units: 1 } }
layer { name: "wide" inputs: "f1" inputs: "f2" wide { table: "wide" } }
layer { name: "out" inputs: "linear" inputs: "wide" add {} }
output: "out")"},
    // DIN: a field's embedding against the sequence's, masked.
    {"attention_pooling", R"(
layer { name: "query" inputs: "f0" embedding { table: "small" } }
layer { name: "keys" inputs: "history" embedding { table: "small" } }
layer { name: "interest" inputs: "query" inputs: "keys"
        attention_pooling { units: 5 } }
layer { name: "x" inputs: "interest" inputs: "dense" concat {} }
layer { name: "out" inputs: "x" mlp { units: 4 units: 1 } }
output: "out")"},
    // A trained query that is no embedding; two hidden layers.
    {"attention_pooling_of_a_projection", R"(
layer { name: "query" inputs: "dense" mlp { units: 6 } }
layer { name: "keys" inputs: "history" embedding { table: "large" } }
layer { name: "interest" inputs: "query" inputs: "keys"
        attention_pooling { units: 4 units: 3 } }
layer { name: "out" inputs: "interest" mlp { units: 1 } }
output: "out")"},
    // Two tasks' mixtures of three experts, each task's slice to its tower.
    {"mmoe", R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "x" inputs: "emb" inputs: "dense" concat {} }
layer { name: "moe" inputs: "x"
        mmoe { num_experts: 3 units: 5 units: 4 num_tasks: 2 } }
layer { name: "first" inputs: "moe" slice { begin: 0 width: 4 } }
layer { name: "second" inputs: "moe" slice { begin: 4 width: 4 } }
layer { name: "a" inputs: "first" mlp { units: 1 } }
layer { name: "b" inputs: "second" mlp { units: 3 units: 1 } }
layer { name: "out" inputs: "a" inputs: "b" add {} }
output: "out")"},
    {"shared_tables_and_buckets", R"(
layer { name: "a" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "b" inputs: "f1" inputs: "buckets" inputs: "f3"
        embedding { table: "small" } }
layer { name: "c" inputs: "f2" embedding { table: "large" } }
layer { name: "x" inputs: "a" inputs: "b" inputs: "c" concat {} }
layer { name: "deep" inputs: "x" mlp { units: 5 units: 1 } }
layer { name: "wide" inputs: "f0" inputs: "buckets" wide { table: "wide" } }
layer { name: "out" inputs: "deep" inputs: "wide" add {} }
output: "out")"},
};

}  // namespace ps::model

#endif  // PS_MODEL_MODEL_GRAPH_TEST_UTIL_H_
