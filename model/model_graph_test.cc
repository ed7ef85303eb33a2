// Finite-difference checks of ModelGraph's gradients: for every layer (in a
// small spec that isolates it) and for every built-in, the change of the
// loss along a random direction of each dense tensor and each table equals
// the gradient's dot product with that direction. A backend whose backward
// kernel of a layer is broken must fail the check of that layer.
#include "model/model_graph_test_util.h"

namespace ps::model {
namespace {

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
  const ModelPlan plan = BuiltinPlan(GetParam(), &options);
  auto cpu = kernels::NewCpuBackend();
  for (const std::string& mismatch : GradientMismatches(plan, cpu.get())) {
    ADD_FAILURE() << mismatch;
  }
}

INSTANTIATE_TEST_SUITE_P(Builtins, BuiltinGradientTest,
                         ::testing::ValuesIn(BuiltinModelNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Two tasks on two labels, sharing an embedding and the dense inputs, each
// with a tower of its own; the second's loss weighs half.
constexpr char kTwoTasks[] = R"(
layer { name: "emb" inputs: "f0" inputs: "f1" embedding { table: "small" } }
layer { name: "shared" inputs: "emb" inputs: "dense" concat {} }
layer { name: "click" inputs: "shared" mlp { units: 4 units: 1 } }
layer { name: "convert" inputs: "shared" mlp { units: 3 units: 1 } }
layer { name: "wide" inputs: "f2" wide { table: "wide" } }
layer { name: "convert_logit" inputs: "convert" inputs: "wide" add {} }
task { name: "ctr" label: "click" output: "click" }
task { name: "cvr" label: "convert" output: "convert_logit" loss_weight: 0.5 }
)";

TEST(MultiTaskGradientTest, MaskedWeightedTasksMatchFiniteDifferences) {
  const ModelPlan plan = Plan(kTwoTasks, {"click", "convert"});
  ASSERT_EQ(plan.tasks().size(), 2u);
  EXPECT_EQ(plan.tasks()[1].loss_weight, 0.5f);
  auto cpu = kernels::NewCpuBackend();
  for (const std::string& mismatch : GradientMismatches(plan, cpu.get())) {
    ADD_FAILURE() << mismatch;
  }
}

// MMoE of two tasks, each its own label (masked, weighted), sharing the
// experts through their gates.
TEST(MultiTaskGradientTest, MmoeOfTwoTasksMatchesFiniteDifferences) {
  const ModelPlan plan = Plan(R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2"
        embedding { table: "small" } }
layer { name: "x" inputs: "emb" inputs: "dense" concat {} }
layer { name: "moe" inputs: "x"
        mmoe { num_experts: 4 units: 6 num_tasks: 2 } }
layer { name: "ctr_in" inputs: "moe" slice { begin: 0 width: 6 } }
layer { name: "cvr_in" inputs: "moe" slice { begin: 6 width: 6 } }
layer { name: "ctr" inputs: "ctr_in" mlp { units: 3 units: 1 } }
layer { name: "cvr" inputs: "cvr_in" mlp { units: 3 units: 1 } }
task { name: "ctr" label: "click" output: "ctr" }
task { name: "cvr" label: "convert" output: "cvr" loss_weight: 3 }
)",
                              {"click", "convert"});
  auto cpu = kernels::NewCpuBackend();
  for (const std::string& mismatch : GradientMismatches(plan, cpu.get())) {
    ADD_FAILURE() << mismatch;
  }
}

// Each task's loss is the sum of its scaled cross-entropies, from its own
// probabilities (computed here from Predict()'s); a masked example's label
// changes nothing.
TEST(MultiTaskGradientTest, EachTasksLossIsItsScaledCrossEntropy) {
  const ModelPlan plan = Plan(kTwoTasks, {"click", "convert"});
  auto cpu = kernels::NewCpuBackend();
  ModelGraph graph(&plan, cpu.get());
  Step step = RandomStep(plan, 8, 3);
  GraphOutputs outputs;
  ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok());
  std::vector<float> predicted;
  ASSERT_TRUE(graph.Predict(step.Inputs(), &predicted).ok());
  ASSERT_EQ(predicted.size(), 16u);
  ASSERT_EQ(outputs.task_loss_sums.size(), 2u);
  double total = 0;
  for (int t = 0; t < 2; ++t) {
    double expected = 0;
    for (int b = 0; b < 8; ++b) {
      const double p = predicted[t * 8 + b];
      EXPECT_NEAR(outputs.probabilities[t * 8 + b], p, 1e-6);
      const double y = step.labels[t * 8 + b];
      expected -= step.loss_scale[t * 8 + b] *
                  (y * std::log(p) + (1 - y) * std::log(1 - p));
    }
    EXPECT_NEAR(outputs.task_loss_sums[t], expected, 1e-4 * expected) << t;
    total += expected;
  }
  EXPECT_NEAR(outputs.loss_sum, total, 1e-4 * total);
  // The tasks' probabilities differ (their own towers).
  EXPECT_NE(predicted[0], predicted[8]);
  // Example 2 of task 1 is masked ((2 + 1) % 4 == 3): its label is moot.
  ASSERT_EQ(step.loss_scale[8 + 2], 0.0f);
  step.labels[8 + 2] = 1 - step.labels[8 + 2];
  GraphOutputs flipped;
  ASSERT_TRUE(graph.TrainStep(step.Inputs(), &flipped).ok());
  EXPECT_EQ(flipped.loss_sum, outputs.loss_sum);
  EXPECT_EQ(flipped.dense_grads, outputs.dense_grads);
}

// Positions a sequence lacks are masked: the rows they read change nothing.
TEST(AttentionPoolingTest, MaskedPositionsChangeNothing) {
  const LayerCase* din = nullptr;
  for (const LayerCase& layer_case : kLayerCases) {
    if (std::string(layer_case.name) == "attention_pooling") din = &layer_case;
  }
  ASSERT_NE(din, nullptr);
  const ModelPlan plan = Plan(din->layers);
  auto cpu = kernels::NewCpuBackend();
  ModelGraph graph(&plan, cpu.get());
  Step step = RandomStep(plan, 8, 11);
  std::vector<float> before, after;
  ASSERT_TRUE(graph.Predict(step.Inputs(), &before).ok());
  // The keys' lookups are the sequence's three positions; example b has
  // b % 4 items. Point every masked position at another row.
  int changed = 0;
  for (size_t l = 0; l < plan.lookups().size(); ++l) {
    const Lookup& lookup = plan.lookups()[l];
    if (plan.nodes()[lookup.node].name != "history") continue;
    for (int b = 0; b < 8; ++b) {
      if (step.sequence_masks[0][b * 3 + lookup.slot] != 0.0f) continue;
      int32_t& row = step.lookup_index[l * 8 + b];
      row = (row + 1) % step.row_counts[lookup.table];
      ++changed;
    }
  }
  ASSERT_GT(changed, 0);
  ASSERT_TRUE(graph.Predict(step.Inputs(), &after).ok());
  EXPECT_EQ(before, after);
  // Unmasking them changes the examples that had room.
  for (float& bit : step.sequence_masks[0]) bit = 1.0f;
  ASSERT_TRUE(graph.Predict(step.Inputs(), &after).ok());
  EXPECT_NE(before[0], after[0]);  // example 0 had no item
  EXPECT_EQ(before[3], after[3]);  // example 3 had all three
}

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
                                      const float* scale, int batch,
                                      float* probabilities, float* dlogits,
                                      float* loss_sum) override {
    backward_ = true;
    return ForwardingBackend::SigmoidCrossEntropy(
        logits, labels, scale, batch, probabilities, dlogits, loss_sum);
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

}  // namespace
}  // namespace ps::model
