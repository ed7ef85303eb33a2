// ModelGraph beyond its gradients: the legacy built-ins give CtrModel's
// steps, Predict gives the training step's probabilities, staged inputs
// train as uploaded ones, an empty batch trains with zero gradients, and
// inputs that do not match the plan are refused.

#include "model/model_graph_test_util.h"

namespace ps::model {
namespace {

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
    BuiltinOptions fitted = options;
    const ModelPlan plan = BuiltinPlan(name, &fitted);
    auto cpu = kernels::NewCpuBackend();
    ModelGraph graph(&plan, cpu.get());
    const Step step = RandomStep(plan, 13, 3);
    GraphOutputs outputs;
    ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok());
    std::vector<float> probabilities;
    ASSERT_TRUE(graph.Predict(step.Inputs(), &probabilities).ok());
    ASSERT_EQ(probabilities.size(), 13u * plan.tasks().size()) << name;
    for (size_t b = 0; b < probabilities.size(); ++b) {
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

// `values`, `rows` rows of `width`, with row `b` twice (at b and b + 1).
template <typename T>
std::vector<T> WithRowTwice(const std::vector<T>& values, int rows, int width,
                            int b) {
  std::vector<T> out;
  for (int e = 0; e < rows; ++e) {
    for (int copy = 0; copy < (e == b ? 2 : 1); ++copy)
      out.insert(out.end(), values.begin() + e * width,
                 values.begin() + (e + 1) * width);
  }
  return out;
}

// `step` with example `b` in it twice (at b and b + 1).
Step WithExampleTwice(const ModelPlan& plan, const Step& step, int b) {
  auto twice = [&](const auto& values, int width) {
    return WithRowTwice(values, step.batch, width, b);
  };
  Step out = step;
  out.batch = step.batch + 1;
  out.labels = twice(step.labels, 1);
  out.lookup_index.clear();
  for (size_t l = 0; l < plan.lookups().size(); ++l) {
    const std::vector<int32_t> column(
        step.lookup_index.begin() + l * step.batch,
        step.lookup_index.begin() + (l + 1) * step.batch);
    const std::vector<int32_t> doubled = twice(column, 1);
    out.lookup_index.insert(out.lookup_index.end(), doubled.begin(),
                            doubled.end());
  }
  for (size_t d = 0; d < step.dense_inputs.size(); ++d) {
    out.dense_inputs[d] =
        twice(step.dense_inputs[d], plan.nodes()[plan.dense_nodes()[d]].width);
  }
  return out;
}

// A weighted loss (a scale of weight over the mean weight) trains as the
// examples repeated: weight 2 is the example twice.
TEST(ModelGraphTest, AWeightOfTwoTrainsAsTheExampleTwice) {
  BuiltinOptions options;
  options.embedding_dim = 4;
  options.hidden = {6};
  absl::StatusOr<ModelSpec> spec =
      BuiltinModelSpec("wide_deep", kColumns, options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ModelPlan> plan =
      ModelPlan::Create(ParsedModelSpec{*spec, {}}, kColumns);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Step weighted = RandomStep(*plan, 5, 4);
  // Weights 2, 1, 1, 1, 1: each over their mean (6 / 5).
  weighted.loss_scale = {2 / 1.2f, 1 / 1.2f, 1 / 1.2f, 1 / 1.2f, 1 / 1.2f};
  const Step repeated = WithExampleTwice(*plan, weighted, 0);
  Step unweighted = repeated;
  unweighted.loss_scale.clear();
  auto cpu = kernels::NewCpuBackend();
  ModelGraph graph(&*plan, cpu.get());
  GraphOutputs by_weight, by_repeat, plain;
  ASSERT_TRUE(graph.TrainStep(weighted.Inputs(), &by_weight).ok());
  ASSERT_TRUE(graph.TrainStep(unweighted.Inputs(), &by_repeat).ok());
  EXPECT_NEAR(by_weight.loss_sum / 5, by_repeat.loss_sum / 6, 1e-5);
  ASSERT_EQ(by_weight.dense_grads.size(), by_repeat.dense_grads.size());
  for (size_t t = 0; t < by_weight.dense_grads.size(); ++t) {
    for (size_t i = 0; i < by_weight.dense_grads[t].size(); ++i) {
      EXPECT_NEAR(by_weight.dense_grads[t][i], by_repeat.dense_grads[t][i],
                  1e-5)
          << "tensor " << t << " value " << i;
    }
  }
  for (size_t t = 0; t < by_weight.table_grads.size(); ++t) {
    for (size_t i = 0; i < by_weight.table_grads[t].size(); ++i) {
      EXPECT_NEAR(by_weight.table_grads[t][i], by_repeat.table_grads[t][i],
                  1e-5)
          << "table " << t << " value " << i;
    }
  }
  // Without the weights the step is another one.
  weighted.loss_scale.clear();
  ASSERT_TRUE(graph.TrainStep(weighted.Inputs(), &plain).ok());
  EXPECT_GT(std::abs(plain.loss_sum / 5 - by_repeat.loss_sum / 6), 1e-4);
}

// A backend that takes no promise (Backend::DeclareStableInput): each
// bfloat16 GEMM rounds its inputs anew.
class RoundsEveryInput : public kernels::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void DeclareStableInput(const float*, size_t) override {}
};

// The steps' promises that inputs stay unchanged hold: every built-in
// trains and predicts the same bits with its rounded GEMM inputs reused as
// with each rounded anew, step after step over the same memory changed in
// between (as a worker's weights and rows are).
TEST(ModelGraphTest, Bf16StepsReusingRoundedInputsChangeNoBit) {
  if (!kernels::CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  kernels::CpuOptions bf16;
  bf16.precision = kernels::GemmPrecision::kBf16;
  for (const std::string& name : BuiltinModelNames()) {
    BuiltinOptions options;
    // Widths of 16 and more: the MLPs' GEMMs round their inputs.
    options.embedding_dim = 8;
    options.hidden = {32, 24};
    const ModelPlan plan = BuiltinPlan(name, &options);
    std::unique_ptr<kernels::Backend> reusing, rounding;
    ASSERT_TRUE(kernels::NewCpuBackend(bf16, &reusing).ok());
    ASSERT_TRUE(kernels::NewCpuBackend(bf16, &rounding).ok());
    RoundsEveryInput rounds_every_input(rounding.get());
    ModelGraph graph(&plan, reusing.get());
    ModelGraph reference(&plan, &rounds_every_input);
    Step step = RandomStep(plan, 48, 12);
    for (int s = 0; s < 3; ++s) {
      GraphOutputs outputs, expected;
      ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok()) << name;
      ASSERT_TRUE(reference.TrainStep(step.Inputs(), &expected).ok()) << name;
      EXPECT_EQ(outputs.probabilities, expected.probabilities) << name << s;
      EXPECT_EQ(outputs.dense_grads, expected.dense_grads) << name << s;
      EXPECT_EQ(outputs.table_grads, expected.table_grads) << name << s;
      std::vector<float> predicted, predicted_expected;
      ASSERT_TRUE(graph.Predict(step.Inputs(), &predicted).ok()) << name;
      ASSERT_TRUE(reference.Predict(step.Inputs(), &predicted_expected).ok());
      EXPECT_EQ(predicted, predicted_expected) << name << s;
      // The next step: other weights and rows in the same memory.
      for (size_t t = 0; t < step.params.size(); ++t) {
        for (size_t i = 0; i < step.params[t].size(); ++i) {
          step.params[t][i] =
              0.8f * step.params[t][i] - 0.5f * outputs.dense_grads[t][i];
        }
      }
      for (std::vector<float>& rows : step.table_rows) {
        for (float& value : rows) value *= 0.8f;
      }
    }
  }
}

// Passes every call on, and counts the GEMM operands a bfloat16 backend
// rounds (every dimension 16 or more) that lie within a range declared
// stable, and those that do not.
class StableInputCounter : public kernels::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void DeclareStableInput(const float* data, size_t count) override {
    ++declared;
    ranges_.emplace_back(data, data + count);
    ForwardingBackend::DeclareStableInput(data, count);
  }
  void ForgetStableInputs() override {
    ranges_.clear();
    ForwardingBackend::ForgetStableInputs();
  }
  kernels::Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
                       float alpha, const float* a, int lda, const float* b,
                       int ldb, float beta, float* c, int ldc) override {
    if (m >= 16 && n >= 16 && k >= 16) {
      Count(a, transpose_a ? k : m, transpose_a ? m : k, lda);
      Count(b, transpose_b ? n : k, transpose_b ? k : n, ldb);
    }
    return ForwardingBackend::Gemm(transpose_a, transpose_b, m, n, k, alpha, a,
                                   lda, b, ldb, beta, c, ldc);
  }
  int stable = 0, unstable = 0, declared = 0;

 private:
  void Count(const float* data, int rows, int cols, int ld) {
    const float* end = data + static_cast<size_t>(rows - 1) * ld + cols;
    for (const auto& [first, last] : ranges_) {
      if (std::less_equal<>()(first, data) && std::less_equal<>()(end, last)) {
        ++stable;
        return;
      }
    }
    ++unstable;
  }
  std::vector<std::pair<const float*, const float*>> ranges_;
};

// Two MLPs, the second over the first's activated output: each GEMM
// input a bfloat16 backend rounds was promised stable (a promise left out
// rounds that matrix twice a step again).
TEST(ModelGraphTest, EveryRoundedInputOfAnMlpIsDeclaredStable) {
  const ModelPlan plan = Plan(R"(
layer { name: "emb" inputs: "f0" inputs: "f1" inputs: "f2" inputs: "f3"
        embedding { table: "large" } }
layer { name: "x" inputs: "emb" inputs: "dense" concat {} }
layer { name: "bottom" inputs: "x"
        mlp { units: 32 units: 24 last_activation: RELU } }
layer { name: "out" inputs: "bottom" mlp { units: 16 units: 1 } }
output: "out")");
  auto cpu = kernels::NewCpuBackend();
  StableInputCounter counter(cpu.get());
  ModelGraph graph(&plan, &counter);
  const Step step = RandomStep(plan, 48, 13);
  GraphOutputs outputs;
  ASSERT_TRUE(graph.TrainStep(step.Inputs(), &outputs).ok());
  // The layers of 16 units or more (the logit's are thinner): x W forward,
  // x^T g and g W^T backward, two inputs each.
  EXPECT_EQ(counter.stable, 18);
  EXPECT_EQ(counter.unstable, 0);
  // Predict() reads each matrix once: it promises nothing (a kept copy
  // would only hold memory).
  counter.stable = counter.unstable = counter.declared = 0;
  std::vector<float> probabilities;
  ASSERT_TRUE(graph.Predict(step.Inputs(), &probabilities).ok());
  EXPECT_EQ(counter.declared, 0);
  EXPECT_EQ(counter.stable, 0);
  EXPECT_EQ(counter.unstable, 6);  // x W of the three layers of 16 or more
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
