// Finite-difference gradient checks of the whole training step, for each
// model, on the CPU backend.

#include "kernels/ctr_model.h"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/random_step.h"

namespace ps::kernels {
namespace {

// A small model and one step of random inputs for it.
struct Problem {
  ModelConfig config;
  RandomStep step;
  StepInputs Inputs() const { return step.Inputs(); }
};

Problem MakeProblem(ModelKind kind, uint32_t seed, int fields = 3,
                    int dense_features = 2) {
  ModelConfig config;
  config.kind = kind;
  config.fields = fields;
  config.dense_features = dense_features;
  config.embedding_dim = 4;
  config.hidden = {5, 3};
  Problem p{config, RandomStep(config, /*batch_size=*/6,
                               /*unique_rows=*/fields > 0 ? 5 : 0, seed,
                               /*scale=*/0.5f)};
  // A duplicate key inside one example.
  if (fields > 1) p.step.index[0] = p.step.index[1];
  for (int b = 0; b < p.step.batch; ++b) p.step.labels[b] = b % 2;
  return p;
}

double MeanLoss(CtrModel& model, const Problem& p) {
  StepOutputs out;
  EXPECT_TRUE(model.TrainStep(p.Inputs(), &out).ok());
  return static_cast<double>(out.loss_sum) / p.step.batch;
}

// Checks d(mean loss)/d(values[i]) against central differences.
void CheckGradient(CtrModel& model, Problem& p, std::vector<float>* values,
                   const std::vector<float>& analytic,
                   const std::string& what) {
  ASSERT_EQ(values->size(), analytic.size()) << what;
  // Small enough that no ReLU changes sides over the step, with dense
  // features up to 5 in size as the only inputs.
  const float eps = 3e-3f;
  for (size_t i = 0; i < values->size(); ++i) {
    const float saved = (*values)[i];
    (*values)[i] = saved + eps;
    const double plus = MeanLoss(model, p);
    (*values)[i] = saved - eps;
    const double minus = MeanLoss(model, p);
    (*values)[i] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << what << "[" << i << "]";
  }
}

std::string ShapeName(
    const ::testing::TestParamInfo<std::tuple<ModelKind, std::tuple<int, int>>>&
        info) {
  static const char* const kKinds[] = {"Lr", "WideDeep", "DeepFm"};
  const auto [fields, dense_features] = std::get<1>(info.param);
  return std::string(kKinds[static_cast<int>(std::get<0>(info.param))]) +
         "Fields" + std::to_string(fields) + "Dense" +
         std::to_string(dense_features);
}

// A model kind and an input shape: fields and dense features (a layout may
// have either alone).
class CtrModelGradientTest : public ::testing::TestWithParam<
                                 std::tuple<ModelKind, std::tuple<int, int>>> {
};

TEST_P(CtrModelGradientTest, MatchesFiniteDifferences) {
  const auto [kind, shape] = GetParam();
  const auto [fields, dense_features] = shape;
  Problem p = MakeProblem(kind, 42, fields, dense_features);
  auto backend = NewCpuBackend();
  CtrModel model(p.config, backend.get());
  StepOutputs out;
  ASSERT_TRUE(model.TrainStep(p.Inputs(), &out).ok());
  const StepOutputs analytic = out;
  // Every output is finite, and the loss moves with the inputs there are.
  EXPECT_TRUE(std::isfinite(out.loss_sum));
  for (float probability : out.probabilities)
    EXPECT_TRUE(probability > 0.0f && probability < 1.0f) << probability;
  CheckGradient(model, p, &p.step.wide_rows, analytic.wide_grads, "wide");
  if (kind != ModelKind::kLogisticRegression) {
    CheckGradient(model, p, &p.step.embedding_rows, analytic.embedding_grads,
                  "embedding");
  } else {
    EXPECT_TRUE(analytic.embedding_grads.empty());
  }
  const std::vector<DenseTensorSpec> tensors = DenseTensors(p.config);
  for (size_t t = 0; t < tensors.size(); ++t) {
    CheckGradient(model, p, &p.step.dense_params[t], analytic.dense_grads[t],
                  tensors[t].name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllModelsAndShapes, CtrModelGradientTest,
    ::testing::Combine(::testing::Values(ModelKind::kLogisticRegression,
                                         ModelKind::kWideDeep,
                                         ModelKind::kDeepFm),
                       // (fields, dense features): both, no dense, no fields
                       ::testing::Values(std::make_tuple(3, 2),
                                         std::make_tuple(3, 0),
                                         std::make_tuple(0, 2))),
    ShapeName);

// Gives `p` two crosses: returns a wide index of 5 slots per example into
// `wide_rows` rows, which it sizes and fills.
std::vector<int32_t> AddCrosses(Problem* p, int wide_rows) {
  p->config.crosses = 2;
  std::vector<int32_t> wide_index(p->step.batch * 5);
  for (size_t i = 0; i < wide_index.size(); ++i)
    wide_index[i] = static_cast<int32_t>((i * 5 + i / 3 + 1) % wide_rows);
  p->step.wide_rows.resize(wide_rows);
  for (int r = 0; r < wide_rows; ++r) p->step.wide_rows[r] = 0.1f * (r - 3);
  return wide_index;
}

TEST(CtrModelTest, CrossesAddWideOnlySlotsWithTheirOwnRows) {
  // deepfm with 2 crosses: the wide part reads 5 slots per example from 8
  // wide rows through wide_index; the embeddings still read 3 fields.
  Problem p = MakeProblem(ModelKind::kDeepFm, 11);
  constexpr int kWideRows = 8;
  std::vector<int32_t> wide_index = AddCrosses(&p, kWideRows);
  auto backend = NewCpuBackend();
  CtrModel model(p.config, backend.get());
  // Without a wide index the step is refused.
  StepOutputs out;
  EXPECT_EQ(model.TrainStep(p.Inputs(), &out).code(),
            StatusCode::kInvalidArgument);
  auto crossed = [&] {
    StepInputs in = p.Inputs();
    in.wide_index = wide_index.data();
    in.num_wide_rows = kWideRows;
    return in;
  };
  ASSERT_TRUE(model.TrainStep(crossed(), &out).ok());
  ASSERT_EQ(out.wide_grads.size(), static_cast<size_t>(kWideRows));
  // d(mean loss)/d(wide row r) by central differences, with the same index.
  // Small enough that no ReLU changes sides over the step, with dense
  // features up to 5 in size as the only inputs.
  const float eps = 3e-3f;
  auto mean_loss = [&] {
    StepOutputs probe;
    EXPECT_TRUE(model.TrainStep(crossed(), &probe).ok());
    return static_cast<double>(probe.loss_sum) / p.step.batch;
  };
  for (int r = 0; r < kWideRows; ++r) {
    const float saved = p.step.wide_rows[r];
    p.step.wide_rows[r] = saved + eps;
    const double plus = mean_loss();
    p.step.wide_rows[r] = saved - eps;
    const double minus = mean_loss();
    p.step.wide_rows[r] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(out.wide_grads[r], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "wide row " << r;
  }
  // Each example's logit moves with every slot it reads: raising the row of
  // a cross slot (index 3 or 4 of an example) changes its probability.
  std::vector<float> before, after;
  ASSERT_TRUE(model.Predict(crossed(), &before).ok());
  p.step.wide_rows[wide_index[3]] += 1.0f;
  ASSERT_TRUE(model.Predict(crossed(), &after).ok());
  EXPECT_GT(after[0], before[0]);
}

TEST(CtrModelTest, CrossesReadTheWideIndexNotTheFields) {
  // lr with 3 fields and 2 crosses equals lr with 5 fields whose index is
  // the wide index: same probabilities, same wide gradients.
  Problem p = MakeProblem(ModelKind::kLogisticRegression, 5);
  constexpr int kWideRows = 7;
  std::vector<int32_t> wide_index = AddCrosses(&p, kWideRows);
  StepInputs crossed = p.Inputs();
  crossed.wide_index = wide_index.data();
  crossed.num_wide_rows = kWideRows;
  ModelConfig flat = p.config;
  flat.fields = 5;
  flat.crosses = 0;
  StepInputs plain = p.Inputs();
  plain.index = wide_index.data();
  plain.num_unique = kWideRows;
  auto backend = NewCpuBackend();
  CtrModel crossed_model(p.config, backend.get());
  CtrModel flat_model(flat, backend.get());
  StepOutputs crossed_out, flat_out;
  ASSERT_TRUE(crossed_model.TrainStep(crossed, &crossed_out).ok());
  ASSERT_TRUE(flat_model.TrainStep(plain, &flat_out).ok());
  EXPECT_EQ(crossed_out.probabilities, flat_out.probabilities);
  EXPECT_EQ(crossed_out.wide_grads, flat_out.wide_grads);
}

TEST(CtrModelTest, PredictMatchesTrainStepProbabilities) {
  Problem p = MakeProblem(ModelKind::kDeepFm, 7);
  auto backend = NewCpuBackend();
  CtrModel model(p.config, backend.get());
  StepOutputs out;
  ASSERT_TRUE(model.TrainStep(p.Inputs(), &out).ok());
  std::vector<float> predicted;
  ASSERT_TRUE(model.Predict(p.Inputs(), &predicted).ok());
  ASSERT_EQ(predicted.size(), out.probabilities.size());
  for (size_t i = 0; i < predicted.size(); ++i) {
    EXPECT_NEAR(predicted[i], out.probabilities[i], 1e-6);
  }
}

TEST(CtrModelTest, StagingTheNextStepGivesTheSameResults) {
  // Three different batches, run once plainly and once with each step
  // staging the next one's inputs.
  std::vector<Problem> problems = {MakeProblem(ModelKind::kDeepFm, 1),
                                   MakeProblem(ModelKind::kDeepFm, 2),
                                   MakeProblem(ModelKind::kDeepFm, 3)};
  problems[2].step.batch = 4;  // a smaller last batch
  auto backend = NewCpuBackend();
  CtrModel plain(problems[0].config, backend.get());
  CtrModel staged(problems[0].config, backend.get());
  for (size_t i = 0; i < problems.size(); ++i) {
    StepOutputs expected, actual;
    ASSERT_TRUE(plain.TrainStep(problems[i].Inputs(), &expected).ok());
    const StepInputs current = problems[i].Inputs();
    StepInputs next;
    if (i + 1 < problems.size()) next = problems[i + 1].Inputs();
    ASSERT_TRUE(staged
                    .TrainStep(current, &actual,
                               i + 1 < problems.size() ? &next : nullptr)
                    .ok());
    EXPECT_EQ(actual.loss_sum, expected.loss_sum) << i;
    EXPECT_EQ(actual.embedding_grads, expected.embedding_grads) << i;
    EXPECT_EQ(actual.dense_grads, expected.dense_grads) << i;
    // An evaluation in between must not disturb the staged inputs.
    std::vector<float> predicted;
    ASSERT_TRUE(staged.Predict(problems[0].Inputs(), &predicted).ok());
  }
}

// Relative distance |x - y| / |y| (Euclidean norms).
double RelativeDistance(const std::vector<float>& x,
                        const std::vector<float>& y) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    difference += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    norm += double{y[i]} * y[i];
  }
  return std::sqrt(difference / norm);
}

// One step's gradients with bfloat16 GEMM inputs stay within 10% of FP32's
// (a transposed or misread operand would be off by ~100%); training with them
// ends at the same AUC (BENCHMARKS.md).
TEST(CtrModelTest, Bf16StepTracksTheFp32Step) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  ModelConfig config;  // 26 fields, dim 16, hidden 256,128: GEMMs in bf16
  const RandomStep random(config, /*batch_size=*/512, /*unique_rows=*/900,
                          /*seed=*/3);
  CpuOptions options;
  options.precision = GemmPrecision::kBf16;
  std::unique_ptr<Backend> bf16_backend;
  ASSERT_TRUE(NewCpuBackend(options, &bf16_backend).ok());
  auto fp32_backend = NewCpuBackend();
  CtrModel bf16(config, bf16_backend.get()), fp32(config, fp32_backend.get());
  StepOutputs rounded, exact;
  ASSERT_TRUE(bf16.TrainStep(random.Inputs(), &rounded).ok());
  ASSERT_TRUE(fp32.TrainStep(random.Inputs(), &exact).ok());
  EXPECT_NEAR(rounded.loss_sum, exact.loss_sum, 1e-3 * exact.loss_sum);
  for (size_t t = 0; t < exact.dense_grads.size(); ++t) {
    EXPECT_LT(RelativeDistance(rounded.dense_grads[t], exact.dense_grads[t]),
              0.1)
        << "dense tensor " << t;
  }
  const double embedding_distance =
      RelativeDistance(rounded.embedding_grads, exact.embedding_grads);
  EXPECT_LT(embedding_distance, 0.1);
  EXPECT_GT(embedding_distance, 1e-5) << "the GEMMs were not rounded";
}

TEST(CtrModelTest, DenseTensorsFollowTheConfig) {
  ModelConfig config;
  config.fields = 26;
  config.embedding_dim = 16;
  config.hidden = {256, 128};
  const std::vector<DenseTensorSpec> tensors = DenseTensors(config);
  ASSERT_EQ(tensors.size(), 8u);
  EXPECT_EQ(tensors[2].name, "mlp.0.weights");
  EXPECT_EQ(tensors[2].rows, 26 * 16 + 13);
  EXPECT_EQ(tensors[2].cols, 256);
  EXPECT_EQ(tensors[7].cols, 1);
  EXPECT_GT(tensors[2].init_scale, 0.0f);
  EXPECT_EQ(tensors[3].init_scale, 0.0f);  // biases start at zero
  config.kind = ModelKind::kLogisticRegression;
  EXPECT_EQ(DenseTensors(config).size(), 2u);
  // Without dense features there are no wide dense weights (a tensor of no
  // rows), and the MLP reads the embeddings alone.
  config.kind = ModelKind::kWideDeep;
  config.dense_features = 0;
  const std::vector<DenseTensorSpec> no_dense = DenseTensors(config);
  ASSERT_EQ(no_dense.size(), 7u);
  EXPECT_EQ(no_dense[0].name, "wide.bias");
  EXPECT_EQ(no_dense[1].rows, 26 * 16);
  for (const DenseTensorSpec& tensor : no_dense) EXPECT_GT(tensor.size(), 0u);
}

TEST(CtrModelTest, RejectsMismatchedDenseParameters) {
  Problem p = MakeProblem(ModelKind::kWideDeep, 1);
  auto backend = NewCpuBackend();
  CtrModel model(p.config, backend.get());
  StepInputs in = p.Inputs();
  in.dense_params.pop_back();
  StepOutputs out;
  EXPECT_EQ(model.TrainStep(in, &out).code(), StatusCode::kInvalidArgument);
}

TEST(ModelNamesTest, EveryKindHasOneNameThatNamesIt) {
  for (ModelKind kind : {ModelKind::kLogisticRegression, ModelKind::kWideDeep,
                         ModelKind::kDeepFm}) {
    ModelKind parsed = ModelKind::kLogisticRegression;
    ASSERT_TRUE(ModelKindFromName(ModelName(kind), &parsed)) << ModelName(kind);
    EXPECT_EQ(parsed, kind);
  }
  EXPECT_STREQ(ModelName(ModelKind::kWideDeep), "wide_deep");
  ModelKind untouched = ModelKind::kDeepFm;
  EXPECT_FALSE(ModelKindFromName("wide&deep", &untouched));
  EXPECT_EQ(untouched, ModelKind::kDeepFm);
}

}  // namespace
}  // namespace ps::kernels
