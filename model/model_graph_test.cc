// Finite-difference checks of ModelGraph's gradients: for every layer (in a
// small spec that isolates it) and for every built-in, the change of the
// loss along a random direction of each dense tensor and each table equals
// the gradient's dot product with that direction. A backend whose backward
// kernel of a layer is broken must fail the check of that layer.

#include "model/model_graph.h"

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
#include "model/model_plan.h"

namespace ps::model {
namespace {

// label, dense x 3, cat x 4.
const std::vector<ColumnUse> kColumns = {
    ColumnUse::kOther,       ColumnUse::kDense,       ColumnUse::kDense,
    ColumnUse::kDense,       ColumnUse::kCategorical, ColumnUse::kCategorical,
    ColumnUse::kCategorical, ColumnUse::kCategorical};

// The header of the per-layer specs: two tables of different dims, a wide
// table, the four fields, a cross, the dense group, a bucketized group.
constexpr char kInputs[] = R"(
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
)";

ModelPlan Plan(const std::string& layers) {
  absl::StatusOr<ParsedModelSpec> parsed =
      ParseModelSpec(std::string(kInputs) + layers);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, kColumns);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Random inputs and parameters for a plan, in host memory.
struct Step {
  int batch = 0;
  std::vector<float> labels;
  std::vector<std::vector<float>> table_rows;
  std::vector<int> row_counts;
  std::vector<int32_t> lookup_index;
  std::vector<std::vector<float>> dense_inputs;
  std::vector<std::vector<float>> params;

  GraphInputs Inputs() const {
    GraphInputs inputs;
    inputs.batch = batch;
    inputs.labels = labels.data();
    for (const auto& rows : table_rows)
      inputs.table_rows.push_back(rows.data());
    inputs.table_row_counts = row_counts;
    inputs.lookup_index = lookup_index.data();
    for (const auto& dense : dense_inputs)
      inputs.dense_inputs.push_back(dense.data());
    for (const auto& param : params)
      inputs.dense_params.push_back(param.data());
    return inputs;
  }
};

Step RandomStep(const ModelPlan& plan, int batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Step step;
  step.batch = batch;
  for (int b = 0; b < batch; ++b) step.labels.push_back(b % 3 == 0 ? 1 : 0);
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
  for (const kernels::DenseTensorSpec& tensor : plan.dense_tensors()) {
    // Not the initializer's zeros: every weight and bias takes part.
    std::vector<float> values(tensor.size());
    const float scale = tensor.init_scale > 0 ? tensor.init_scale : 0.3f;
    for (float& v : values) v = scale * uniform(rng);
    step.params.push_back(std::move(values));
  }
  return step;
}

double MeanLoss(ModelGraph& graph, const Step& step) {
  GraphOutputs outputs;
  const absl::Status status = graph.TrainStep(step.Inputs(), &outputs);
  EXPECT_TRUE(status.ok()) << status;
  return static_cast<double>(outputs.loss_sum) / step.batch;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// Checks each dense tensor's and each table's gradient along a random unit
// direction by central differences; returns a line per mismatch.
std::vector<std::string> GradientMismatches(const ModelPlan& plan,
                                            kernels::Backend* backend,
                                            int batch = 9, uint32_t seed = 7) {
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

const LayerCase kLayerCases[] = {
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

class LayerGradientTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerGradientTest, MatchesFiniteDifferences) {
  const ModelPlan plan = Plan(GetParam().layers);
  auto cpu = kernels::NewCpuBackend();
  for (const std::string& mismatch : GradientMismatches(plan, cpu.get())) {
    ADD_FAILURE() << mismatch;
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, LayerGradientTest,
                         ::testing::ValuesIn(kLayerCases),
                         [](const ::testing::TestParamInfo<LayerCase>& info) {
                           return std::string(info.param.name);
                         });

class BuiltinGradientTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BuiltinGradientTest, MatchesFiniteDifferences) {
  BuiltinOptions options;
  options.embedding_dim = 4;
  options.hidden = {6, 5};
  // Crosses feed the wide part, which dcn_v2 and dlrm have not.
  if (GetParam() != "dcn_v2" && GetParam() != "dlrm") {
    options.crosses = {{0, 2}};
  }
  absl::StatusOr<ModelSpec> spec =
      BuiltinModelSpec(GetParam(), kColumns, options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ModelPlan> plan =
      ModelPlan::Create(ParsedModelSpec{*spec, {}}, kColumns);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto cpu = kernels::NewCpuBackend();
  for (const std::string& mismatch : GradientMismatches(*plan, cpu.get())) {
    ADD_FAILURE() << mismatch;
  }
}

INSTANTIATE_TEST_SUITE_P(Builtins, BuiltinGradientTest,
                         ::testing::ValuesIn(BuiltinModelNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A backend with one kernel broken in the backward pass only (between the
// loss and the copy of the results to the host), so that the forward pass,
// and with it the finite differences, stay right.
enum class BrokenKernel {
  kScatterAdd,
  kAccumulateColumns,
  kMultiply,
  kDotInteractionBackward,
  kFmBackward,
  kReluBackward,
  kAdd,
};

class BrokenBackend : public kernels::ForwardingBackend {
 public:
  BrokenBackend(kernels::Backend* cpu, BrokenKernel broken)
      : ForwardingBackend(cpu), broken_(broken) {}

  kernels::Status SigmoidCrossEntropy(const float* logits, const float* labels,
                                      int batch, float* probabilities,
                                      float* dlogits,
                                      float* loss_sum) override {
    backward_ = true;
    return ForwardingBackend::SigmoidCrossEntropy(
        logits, labels, batch, probabilities, dlogits, loss_sum);
  }
  kernels::Status CopyToHost(void* host, const void* device,
                             size_t bytes) override {
    backward_ = false;
    return ForwardingBackend::CopyToHost(host, device, bytes);
  }

  kernels::Status ScatterAdd(const float* in, int in_cols, int field_stride,
                             const int32_t* index, int batch, int fields,
                             int dim, float* row_grads) override {
    if (!Broken(BrokenKernel::kScatterAdd)) {
      return ForwardingBackend::ScatterAdd(in, in_cols, field_stride, index,
                                           batch, fields, dim, row_grads);
    }
    // Drops the second half of the batch.
    return ForwardingBackend::ScatterAdd(in, in_cols, field_stride, index,
                                         batch / 2, fields, dim, row_grads);
  }
  kernels::Status AccumulateColumns(const float* src, int rows, int src_cols,
                                    int src_offset, float* dst,
                                    int dst_cols) override {
    // Reads one column too far to the left.
    return ForwardingBackend::AccumulateColumns(
        src, rows, src_cols,
        Broken(BrokenKernel::kAccumulateColumns) && src_offset > 0
            ? src_offset - 1
            : src_offset,
        dst, dst_cols);
  }
  kernels::Status Multiply(const float* a, const float* b, float* c,
                           size_t count, bool accumulate) override {
    // An accumulating multiply overwrites.
    return ForwardingBackend::Multiply(
        a, b, c, count, Broken(BrokenKernel::kMultiply) ? false : accumulate);
  }
  kernels::Status DotInteractionBackward(const float* x, const float* dout,
                                         int batch, int rows, int dim,
                                         bool self_interaction,
                                         float* dx) override {
    // Scales the first column of every row's gradient by 1.5 (dx holds
    // only this layer's share here: its input's gradient starts at zero).
    if (Broken(BrokenKernel::kDotInteractionBackward)) {
      KERNELS_RETURN_IF_ERROR(ForwardingBackend::DotInteractionBackward(
          x, dout, batch, rows, dim, self_interaction, dx));
      for (size_t i = 0; i < static_cast<size_t>(batch) * rows * dim; i += dim)
        dx[i] *= 1.5f;
      return kernels::Status::Ok();
    }
    return ForwardingBackend::DotInteractionBackward(x, dout, batch, rows, dim,
                                                     self_interaction, dx);
  }
  kernels::Status FmBackward(const float* x, const float* dlogits, int x_cols,
                             int batch, int fields, int dim,
                             float* dx) override {
    // Leaves out the last field.
    return ForwardingBackend::FmBackward(
        x, dlogits, x_cols, batch,
        Broken(BrokenKernel::kFmBackward) ? fields - 1 : fields, dim, dx);
  }
  kernels::Status ReluBackward(const float* y, float* dy,
                               size_t count) override {
    if (Broken(BrokenKernel::kReluBackward)) return kernels::Status::Ok();
    return ForwardingBackend::ReluBackward(y, dy, count);
  }
  kernels::Status Add(const float* x, float* y, size_t count) override {
    // Adds only the first half.
    return ForwardingBackend::Add(
        x, y, Broken(BrokenKernel::kAdd) ? count / 2 : count);
  }

 private:
  bool Broken(BrokenKernel kernel) const {
    return backward_ && broken_ == kernel;
  }

  const BrokenKernel broken_;
  bool backward_ = false;
};

struct BrokenCase {
  BrokenKernel kernel;
  const char* layer_case;
};

class BrokenKernelTest : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenKernelTest, FailsTheLayersCheck) {
  const char* layers = nullptr;
  for (const LayerCase& layer_case : kLayerCases) {
    if (std::string(layer_case.name) == GetParam().layer_case)
      layers = layer_case.layers;
  }
  ASSERT_NE(layers, nullptr);
  const ModelPlan plan = Plan(layers);
  auto cpu = kernels::NewCpuBackend();
  BrokenBackend broken(cpu.get(), GetParam().kernel);
  EXPECT_FALSE(GradientMismatches(plan, &broken).empty())
      << "a broken kernel passed the check of " << GetParam().layer_case;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, BrokenKernelTest,
    ::testing::Values(
        BrokenCase{BrokenKernel::kScatterAdd, "embedding_and_mlp"},
        BrokenCase{BrokenKernel::kScatterAdd, "wide_with_a_cross"},
        BrokenCase{BrokenKernel::kAccumulateColumns, "concat"},
        BrokenCase{BrokenKernel::kAccumulateColumns,
                   "concat_of_a_shared_input"},
        BrokenCase{BrokenKernel::kMultiply, "cross_full_rank"},
        BrokenCase{BrokenKernel::kMultiply, "cross_low_rank"},
        BrokenCase{BrokenKernel::kDotInteractionBackward, "dot_interaction"},
        BrokenCase{BrokenKernel::kDotInteractionBackward,
                   "dot_interaction_with_self"},
        BrokenCase{BrokenKernel::kFmBackward, "fm"},
        BrokenCase{BrokenKernel::kFmBackward, "fm_of_one_input"},
        BrokenCase{BrokenKernel::kReluBackward, "embedding_and_mlp"},
        BrokenCase{BrokenKernel::kAdd, "add"}),
    [](const ::testing::TestParamInfo<BrokenCase>& info) {
      return std::string(info.param.layer_case) + "_" +
             std::to_string(static_cast<int>(info.param.kernel));
    });

// lr, wide_deep and deepfm as specs compute what kernels::CtrModel computes
// for them, given the same rows and dense tensors (in the same order, under
// the same names).
TEST(ModelGraphTest, LegacyBuiltinsMatchCtrModel) {
  const std::pair<const char*, kernels::ModelKind> kLegacy[] = {
      {"lr", kernels::ModelKind::kLogisticRegression},
      {"wide_deep", kernels::ModelKind::kWideDeep},
      {"deepfm", kernels::ModelKind::kDeepFm}};
  for (const auto& [name, kind] : kLegacy) {
    BuiltinOptions options;
    options.embedding_dim = 4;
    options.hidden = {6, 5};
    options.crosses = {{0, 2}};
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, kColumns, options);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<ModelPlan> plan =
        ModelPlan::Create(ParsedModelSpec{*spec, {}}, kColumns);
    ASSERT_TRUE(plan.ok()) << plan.status();
    kernels::ModelConfig config;
    config.kind = kind;
    config.fields = 4;
    config.dense_features = 3;
    config.crosses = 1;
    config.embedding_dim = 4;
    config.hidden = {6, 5};
    const std::vector<kernels::DenseTensorSpec> tensors =
        kernels::DenseTensors(config);
    ASSERT_EQ(tensors.size(), plan->dense_tensors().size()) << name;
    for (size_t t = 0; t < tensors.size(); ++t) {
      EXPECT_EQ(plan->dense_tensors()[t].name, tensors[t].name) << name;
      EXPECT_EQ(plan->dense_tensors()[t].rows, tensors[t].rows) << name;
      EXPECT_EQ(plan->dense_tensors()[t].cols, tensors[t].cols) << name;
      EXPECT_EQ(plan->dense_tensors()[t].init_scale, tensors[t].init_scale)
          << name;
    }

    const int batch = 11;
    const Step step = RandomStep(*plan, batch, 9);
    auto cpu = kernels::NewCpuBackend();
    ModelGraph graph(&*plan, cpu.get());
    GraphOutputs graph_outputs;
    ASSERT_TRUE(graph.TrainStep(step.Inputs(), &graph_outputs).ok());

    // The same step for CtrModel: index batch x fields into the embedding
    // rows, wide_index batch x (fields + crosses) into the wide rows.
    int embedding = -1, wide = -1;
    for (int t = 0; t < plan->spec().table_size(); ++t) {
      if (plan->spec().table(t).name() == "embedding") embedding = t;
      if (plan->spec().table(t).name() == "wide") wide = t;
    }
    ASSERT_GE(wide, 0);
    std::vector<int32_t> index(batch * 4), wide_index(batch * 5);
    for (size_t l = 0; l < plan->lookups().size(); ++l) {
      const Lookup& lookup = plan->lookups()[l];
      const int slot = lookup.node;  // fields 0-3, then the cross (4)
      for (int b = 0; b < batch; ++b) {
        const int32_t row = step.lookup_index[l * batch + b];
        if (lookup.table == embedding) index[b * 4 + slot] = row;
        if (lookup.table == wide) wide_index[b * 5 + slot] = row;
      }
    }
    kernels::StepInputs in;
    in.batch = batch;
    in.num_unique = embedding >= 0 ? step.row_counts[embedding] : 0;
    in.index = index.data();
    in.wide_index = wide_index.data();
    in.num_wide_rows = step.row_counts[wide];
    in.dense = step.dense_inputs[0].data();
    in.labels = step.labels.data();
    if (embedding >= 0) in.embedding_rows = step.table_rows[embedding].data();
    in.wide_rows = step.table_rows[wide].data();
    for (const auto& param : step.params)
      in.dense_params.push_back(param.data());
    if (embedding < 0) {
      // lr has no embedding rows; CtrModel indexes none.
      std::fill(index.begin(), index.end(), 0);
      in.num_unique = 1;
    }
    kernels::CtrModel model(config, cpu.get());
    kernels::StepOutputs expected;
    ASSERT_TRUE(model.TrainStep(in, &expected).ok());
    EXPECT_NEAR(graph_outputs.loss_sum, expected.loss_sum, 1e-5) << name;
    for (int b = 0; b < batch; ++b) {
      EXPECT_NEAR(graph_outputs.probabilities[b], expected.probabilities[b],
                  1e-6)
          << name;
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      for (size_t i = 0; i < tensors[t].size(); ++i) {
        EXPECT_NEAR(graph_outputs.dense_grads[t][i], expected.dense_grads[t][i],
                    1e-6)
            << name << " " << tensors[t].name << "[" << i << "]";
      }
    }
    for (size_t i = 0; i < expected.wide_grads.size(); ++i) {
      EXPECT_NEAR(graph_outputs.table_grads[wide][i], expected.wide_grads[i],
                  1e-6)
          << name;
    }
    if (embedding >= 0) {
      ASSERT_EQ(graph_outputs.table_grads[embedding].size(),
                expected.embedding_grads.size());
      for (size_t i = 0; i < expected.embedding_grads.size(); ++i) {
        EXPECT_NEAR(graph_outputs.table_grads[embedding][i],
                    expected.embedding_grads[i], 1e-6)
            << name;
      }
    }
  }
}

TEST(ModelGraphTest, PredictGivesTheTrainingStepsProbabilities) {
  BuiltinOptions options;
  options.embedding_dim = 4;
  options.hidden = {6};
  for (const std::string& name : BuiltinModelNames()) {
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, kColumns, options);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<ModelPlan> plan =
        ModelPlan::Create(ParsedModelSpec{*spec, {}}, kColumns);
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto cpu = kernels::NewCpuBackend();
    ModelGraph graph(&*plan, cpu.get());
    const Step step = RandomStep(*plan, 13, 3);
    GraphOutputs outputs;
    ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok());
    std::vector<float> probabilities;
    ASSERT_TRUE(graph.Predict(step.Inputs(), &probabilities).ok());
    ASSERT_EQ(probabilities.size(), 13u) << name;
    for (int b = 0; b < 13; ++b) {
      EXPECT_NEAR(probabilities[b], outputs.probabilities[b], 1e-6) << name;
    }
  }
}

// The CPU's kernels over memory the graph must copy its inputs into, as a
// GPU's: counts the copies that wait for the kernels queued before them
// (CopyToDevice) and those that may overlap them (CopyToIdleDevice).
class DeviceMemoryBackend : public kernels::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  bool ComputesOnHostMemory() const override { return false; }
  kernels::Status CopyToDevice(void* device, const void* host,
                               size_t bytes) override {
    ++copies;
    return ForwardingBackend::CopyToDevice(device, host, bytes);
  }
  kernels::Status CopyToIdleDevice(void* device, const void* host,
                                   size_t bytes) override {
    ++idle_copies;
    return ForwardingBackend::CopyToIdleDevice(device, host, bytes);
  }
  int copies = 0;
  int idle_copies = 0;
};

TEST(ModelGraphTest, StagedInputsTrainAsUploadedOnes) {
  BuiltinOptions options;
  options.embedding_dim = 4;
  options.hidden = {6};
  for (const std::string name : {"wide_deep", "dlrm"}) {
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, kColumns, options);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<ModelPlan> plan =
        ModelPlan::Create(ParsedModelSpec{*spec, {}}, kColumns);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Steps of different sizes, so that a stale buffer would show.
    const std::vector<Step> steps = {RandomStep(*plan, 9, 1),
                                     RandomStep(*plan, 13, 2),
                                     RandomStep(*plan, 5, 3)};
    auto cpu = kernels::NewCpuBackend();
    ModelGraph reference(&*plan, cpu.get());
    DeviceMemoryBackend device(cpu.get());
    ModelGraph staged(&*plan, &device);
    for (size_t i = 0; i < steps.size(); ++i) {
      GraphOutputs expected, got;
      ASSERT_TRUE(reference.TrainStep(steps[i].Inputs(), &expected).ok());
      const GraphInputs next =
          i + 1 < steps.size() ? steps[i + 1].Inputs() : GraphInputs();
      const int copies_before = device.copies;
      ASSERT_TRUE(staged
                      .TrainStep(steps[i].Inputs(), &got,
                                 i + 1 < steps.size() ? &next : nullptr)
                      .ok());
      // The first step uploads its inputs; the others were staged.
      if (i == 0) {
        EXPECT_GT(device.copies, copies_before) << name;
      } else {
        EXPECT_EQ(device.copies, copies_before) << name << " step " << i;
      }
      EXPECT_EQ(got.loss_sum, expected.loss_sum) << name << " step " << i;
      EXPECT_EQ(got.probabilities, expected.probabilities) << name << i;
      EXPECT_EQ(got.table_grads, expected.table_grads) << name << i;
      EXPECT_EQ(got.dense_grads, expected.dense_grads) << name << i;
      // A prediction between steps reads its own inputs, and leaves the
      // staged ones be.
      std::vector<float> predicted, reference_predicted;
      ASSERT_TRUE(staged.Predict(steps[0].Inputs(), &predicted).ok());
      ASSERT_TRUE(
          reference.Predict(steps[0].Inputs(), &reference_predicted).ok());
      ASSERT_EQ(predicted.size(), 9u);
      EXPECT_EQ(predicted, reference_predicted) << name << " step " << i;
    }
    // Every input of steps 1 and 2 (labels, lookups, rows, dense inputs and
    // tensors) went up while the step before ran.
    EXPECT_GT(device.idle_copies, 2 * 3) << name;
  }
}

TEST(ModelGraphTest, AnEmptyBatchTrainsWithZeroGradients) {
  const ModelPlan plan = Plan(kLayerCases[0].layers);
  auto cpu = kernels::NewCpuBackend();
  ModelGraph graph(&plan, cpu.get());
  const Step step = RandomStep(plan, 0, 5);
  GraphOutputs outputs;
  ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok());
  EXPECT_TRUE(outputs.probabilities.empty());
  for (const auto& grads : outputs.table_grads) {
    for (float g : grads) EXPECT_EQ(g, 0.0f);
  }
}

TEST(ModelGraphTest, RefusesInputsThatDoNotMatchThePlan) {
  const ModelPlan plan = Plan(kLayerCases[0].layers);
  auto cpu = kernels::NewCpuBackend();
  ModelGraph graph(&plan, cpu.get());
  Step step = RandomStep(plan, 4, 5);
  step.params.pop_back();
  GraphOutputs outputs;
  const absl::Status status = graph.TrainStep(step.Inputs(), &outputs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

}  // namespace
}  // namespace ps::model
