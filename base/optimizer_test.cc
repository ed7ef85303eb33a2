// Each optimizer against values worked out by hand (the arithmetic is in the
// comments).
#include "base/optimizer.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::unique_ptr<Optimizer> Make(OptimizerSpec spec) {
  auto optimizer = Optimizer::Create(spec);
  EXPECT_OK(optimizer);
  return std::move(optimizer).value();
}

OptimizerSpec Spec(OptimizerSpec::Kind kind, float learning_rate) {
  OptimizerSpec spec;
  spec.set_kind(kind);
  spec.set_learning_rate(learning_rate);
  return spec;
}

TEST(OptimizerTest, SgdSubtractsLearningRateTimesGradient) {
  auto sgd = Make(Spec(OptimizerSpec::SGD, 0.1f));
  EXPECT_EQ(sgd->StateFloats(2), 0);
  float weights[2] = {1.0f, -1.0f};
  const float gradient[2] = {2.0f, -0.5f};
  sgd->Apply(gradient, 2, weights, nullptr);
  // 1 - 0.1 * 2 = 0.8; -1 - 0.1 * -0.5 = -0.95
  EXPECT_FLOAT_EQ(weights[0], 0.8f);
  EXPECT_FLOAT_EQ(weights[1], -0.95f);
}

TEST(OptimizerTest, AdagradScalesByAccumulatedSquares) {
  OptimizerSpec spec = Spec(OptimizerSpec::ADAGRAD, 0.1f);
  spec.set_initial_accumulator(0.1f);
  auto adagrad = Make(spec);
  ASSERT_EQ(adagrad->StateFloats(1), 1);
  float weight = 1.0f;
  float accumulator;
  adagrad->InitState(1, &accumulator);
  EXPECT_FLOAT_EQ(accumulator, 0.1f);
  const float gradient = 2.0f;
  adagrad->Apply(&gradient, 1, &weight, &accumulator);
  // accumulator = 0.1 + 4 = 4.1; weight = 1 - 0.1 * 2 / sqrt(4.1) = 0.9012270
  EXPECT_FLOAT_EQ(accumulator, 4.1f);
  EXPECT_NEAR(weight, 0.9012270f, 1e-6);
  adagrad->Apply(&gradient, 1, &weight, &accumulator);
  // accumulator = 8.1; weight = 0.9012270 - 0.2 / sqrt(8.1) = 0.8309542
  EXPECT_NEAR(weight, 0.8309542f, 1e-6);
}

TEST(OptimizerTest, AdamFirstStepsMoveByLearningRate) {
  auto adam = Make(Spec(OptimizerSpec::ADAM, 0.01f));
  ASSERT_EQ(adam->StateFloats(1), 4);
  float weight = 1.0f;
  float state[4];
  adam->InitState(1, state);
  const float gradient = 2.0f;
  adam->Apply(&gradient, 1, &weight, state);
  // m = 0.1 * 2 = 0.2, v = 0.001 * 4 = 0.004; bias-corrected m/(1-0.9) = 2,
  // v/(1-0.999) = 4, so the step is 0.01 * 2 / (2 + 1e-8) = 0.01.
  EXPECT_NEAR(state[0], 0.2f, 1e-7);
  EXPECT_NEAR(state[1], 0.004f, 1e-7);  // 1 - 0.999f is inexact in float
  EXPECT_NEAR(weight, 0.99f, 1e-6);
  adam->Apply(&gradient, 1, &weight, state);
  // m = 0.9 * 0.2 + 0.2 = 0.38, corrected by 1 - 0.81 -> 2;
  // v = 0.999 * 0.004 + 0.004 = 0.007996, corrected by 1 - 0.998001 -> 4.
  EXPECT_NEAR(state[0], 0.38f, 1e-6);
  EXPECT_NEAR(weight, 0.98f, 1e-5);
  // A different gradient: m = 0.9 * 0.38 - 0.1 = 0.242, corrected by
  // 1 - 0.729 -> 0.8929889; v = 0.999 * 0.007996 + 0.001 = 0.008988004,
  // corrected by 1 - 0.997002999 -> 2.9989993; step = 0.01 * 0.8929889 /
  // 1.7317619 = 0.0051565.
  const float negative = -1.0f;
  adam->Apply(&negative, 1, &weight, state);
  EXPECT_NEAR(weight, 0.98f - 0.0051565f, 2e-5);
}

TEST(OptimizerTest, FtrlMatchesClosedForm) {
  OptimizerSpec spec = Spec(OptimizerSpec::FTRL, 0.1f);
  spec.set_ftrl_beta(1.0f);
  auto ftrl = Make(spec);
  ASSERT_EQ(ftrl->StateFloats(1), 2);
  float weight = 0.0f;
  float state[2];
  ftrl->InitState(1, state);
  const float gradient = 2.0f;
  ftrl->Apply(&gradient, 1, &weight, state);
  // sigma = (sqrt(4) - 0) / 0.1 = 20; z = 2 - 20 * 0 = 2; n = 4;
  // w = -z / ((beta + sqrt(n)) / alpha) = -2 / 30
  EXPECT_FLOAT_EQ(state[0], 2.0f);
  EXPECT_FLOAT_EQ(state[1], 4.0f);
  EXPECT_NEAR(weight, -2.0f / 30.0f, 1e-7);
  ftrl->Apply(&gradient, 1, &weight, state);
  // sigma = (sqrt(8) - 2) / 0.1 = 8.2842712; z = 2 + 2 + 8.2842712 / 15 =
  // 4.5522847; w = -4.5522847 / ((1 + 2.8284271) / 0.1) = -0.1189074
  EXPECT_NEAR(state[0], 4.5522847f, 1e-5);
  EXPECT_NEAR(weight, -0.1189074f, 1e-6);
}

TEST(OptimizerTest, FtrlL1ClipsSmallWeightsToZeroAndL2ShrinksThem) {
  OptimizerSpec spec = Spec(OptimizerSpec::FTRL, 0.1f);
  spec.set_l1(1.0f);
  auto ftrl = Make(spec);
  float weight = 0.0f;
  float state[2];
  ftrl->InitState(1, state);
  const float gradient = 2.0f;
  ftrl->Apply(&gradient, 1, &weight, state);
  // z = 2 > l1 = 1: w = -(2 - 1) / 30
  EXPECT_NEAR(weight, -1.0f / 30.0f, 1e-7);

  // l2 adds to the denominator: w = -(2 - 1) / ((1 + 2) / 0.1 + 10) = -1/40.
  spec.set_l2(10.0f);
  auto shrunk = Make(spec);
  weight = 0.0f;
  shrunk->InitState(1, state);
  shrunk->Apply(&gradient, 1, &weight, state);
  EXPECT_NEAR(weight, -1.0f / 40.0f, 1e-7);
  spec.set_l2(0.0f);

  spec.set_l1(3.0f);
  auto sparse = Make(spec);
  weight = 0.5f;
  sparse->InitState(1, state);
  sparse->Apply(&gradient, 1, &weight, state);
  // z = 2 - 20 * 0.5 = -8, |z| > 3: w = -(-8 + 3) / 30 = 1/6
  EXPECT_NEAR(weight, 1.0f / 6.0f, 1e-6);
  const float small = 0.1f;
  float weight2 = 0.0f;
  sparse->InitState(1, state);
  sparse->Apply(&small, 1, &weight2, state);
  // z = 0.1 <= 3: w = 0
  EXPECT_EQ(weight2, 0.0f);
}

TEST(OptimizerTest, DefaultsFillZeroFields) {
  OptimizerSpec spec = Optimizer::WithDefaults(Spec(OptimizerSpec::ADAM, 0.0f));
  EXPECT_FLOAT_EQ(spec.learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(spec.beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec.beta2(), 0.999f);
}

TEST(OptimizerTest, RejectsBadHyperParameters) {
  EXPECT_THAT(Optimizer::Create(Spec(OptimizerSpec::SGD, -1.0f)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Optimizer::Create(Spec(OptimizerSpec::SGD, NAN)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  OptimizerSpec adam = Spec(OptimizerSpec::ADAM, 0.1f);
  adam.set_beta1(1.0f);
  EXPECT_THAT(Optimizer::Create(adam),
              StatusIs(absl::StatusCode::kInvalidArgument));
  OptimizerSpec unknown;
  unknown.set_kind(static_cast<OptimizerSpec::Kind>(42));
  EXPECT_THAT(Optimizer::Create(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(FirstNonFiniteTest, FindsTheFirstNanOrInfinityAnywhere) {
  std::vector<float> values(1000, 0.5f);
  values[3] = std::numeric_limits<float>::max();
  values[4] = -std::numeric_limits<float>::max();
  values[5] = std::numeric_limits<float>::denorm_min();
  values[6] = -0.0f;
  EXPECT_EQ(FirstNonFinite(values), -1);
  EXPECT_EQ(FirstNonFinite({}), -1);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{517}, size_t{999}}) {
      std::vector<float> with_bad = values;
      with_bad[at] = bad;
      if (at != 999) with_bad[999] = bad;  // the first one counts
      EXPECT_EQ(FirstNonFinite(with_bad), static_cast<int64_t>(at)) << bad;
    }
  }
}

TEST(OptimizerTest, ApplyTellsWhenFiniteInputsOverflow) {
  for (OptimizerSpec::Kind kind : {OptimizerSpec::SGD, OptimizerSpec::ADAGRAD,
                                   OptimizerSpec::ADAM, OptimizerSpec::FTRL}) {
    auto optimizer = Make(Spec(kind, 0.5f));
    const int dim = 3;
    std::vector<float> weights(dim, 1.0f);
    std::vector<float> state(optimizer->StateFloats(dim) + 1);
    optimizer->InitState(dim, state.data());
    const float small[dim] = {0.1f, -0.2f, 0.3f};
    EXPECT_TRUE(optimizer->Apply(small, dim, weights.data(), state.data()))
        << "kind " << kind;
    // From weights of 3e38, a gradient of -3e38 overflows SGD's weight and
    // its square the other optimizers' state.
    const float huge[dim] = {0.1f, 0.1f, -3e38f};
    weights.assign(dim, 3e38f);
    EXPECT_FALSE(optimizer->Apply(huge, dim, weights.data(), state.data()))
        << "kind " << kind;
  }
}

TEST(OptimizerTest, ALearningRateScaleScalesEveryOptimizersStep) {
  // From the same state (after a few unscaled steps, so that FTRL's z and
  // n are not zero), a step with scale 0.5 moves the weight half as far as
  // the unscaled one, and the next unscaled step goes on from there rather
  // than jumping.
  for (OptimizerSpec::Kind kind : {OptimizerSpec::SGD, OptimizerSpec::ADAGRAD,
                                   OptimizerSpec::ADAM, OptimizerSpec::FTRL}) {
    OptimizerSpec spec;
    spec.set_kind(kind);
    auto optimizer = Optimizer::Create(spec);
    ASSERT_TRUE(optimizer.ok());
    std::vector<float> state((*optimizer)->StateFloats(1));
    (*optimizer)->InitState(1, state.data());
    float weight = 0.2f;
    for (float warmup : {0.4f, -0.1f, 0.3f}) {
      ASSERT_TRUE((*optimizer)->Apply(&warmup, 1, 1.0f, &weight, state.data()));
    }
    std::vector<float> half_state = state;
    const float start = weight;
    float half_weight = weight;
    const float gradient = 0.3f;
    ASSERT_TRUE((*optimizer)->Apply(&gradient, 1, 1.0f, &weight, state.data()));
    ASSERT_TRUE(
        (*optimizer)
            ->Apply(&gradient, 1, 0.5f, &half_weight, half_state.data()));
    EXPECT_LT(weight, start) << kind;
    EXPECT_NEAR(start - half_weight, 0.5f * (start - weight), 1e-5) << kind;
    // A zero gradient, unscaled: the weight stays where the scaled step
    // left it (SGD, Adagrad, FTRL), or moves by Adam's momentum alone.
    const float zero = 0.0f;
    const float before = half_weight;
    ASSERT_TRUE(
        (*optimizer)->Apply(&zero, 1, 1.0f, &half_weight, half_state.data()));
    if (kind != OptimizerSpec::ADAM) {
      EXPECT_NEAR(half_weight, before, 1e-6) << kind;
    }
  }
}

TEST(OptimizerNamesTest, EveryKindHasOneNameThatNamesIt) {
  for (OptimizerSpec::Kind kind : {OptimizerSpec::SGD, OptimizerSpec::ADAGRAD,
                                   OptimizerSpec::ADAM, OptimizerSpec::FTRL}) {
    OptimizerSpec::Kind parsed = OptimizerSpec::SGD;
    ASSERT_TRUE(OptimizerKindFromName(OptimizerName(kind), &parsed))
        << OptimizerName(kind);
    EXPECT_EQ(parsed, kind);
  }
  EXPECT_STREQ(OptimizerName(OptimizerSpec::ADAGRAD), "adagrad");
  OptimizerSpec::Kind untouched = OptimizerSpec::ADAM;
  EXPECT_FALSE(OptimizerKindFromName("Adam", &untouched));
  EXPECT_FALSE(OptimizerKindFromName("", &untouched));
  EXPECT_EQ(untouched, OptimizerSpec::ADAM);
}

// An Adagrad embedding of 3 columns and an FTRL weight after it in one row
// take the same bits as the two kept apart, step after step.
TEST(OptimizerTest, LaterColumnsTrainAsTheirOwnRows) {
  OptimizerSpec adagrad = Spec(OptimizerSpec::ADAGRAD, 0.05f);
  OptimizerSpec ftrl = Spec(OptimizerSpec::FTRL, 0.05f);
  OptimizerSpec both = adagrad;
  LaterColumnsOptimizer* later = both.add_later_columns();
  later->set_first_column(3);
  *later->mutable_optimizer() = ftrl;
  auto joined = Make(both);
  auto apart_embedding = Make(adagrad);
  auto apart_wide = Make(ftrl);
  ASSERT_EQ(joined->StateFloats(4), 3 + 2);

  std::vector<float> row(4 + 5), embedding(3 + 3), wide(1 + 2);
  for (int i = 0; i < 4; ++i) row[i] = 0.1f * (i + 1);
  for (int i = 0; i < 3; ++i) embedding[i] = row[i];
  wide[0] = row[3];
  joined->InitState(4, row.data() + 4);
  apart_embedding->InitState(3, embedding.data() + 3);
  apart_wide->InitState(1, wide.data() + 1);
  const float steps[3][4] = {
      {0.5f, -1.0f, 2.0f, 0.25f},
      {-0.5f, 0.0f, 1.0f, -3.0f},
      {1.5f, 2.0f, -0.75f, 0.5f},
  };
  for (const auto& gradient : steps) {
    EXPECT_TRUE(joined->Apply(gradient, 4, 0.5f, row.data(), row.data() + 4));
    apart_embedding->Apply(gradient, 3, 0.5f, embedding.data(),
                           embedding.data() + 3);
    apart_wide->Apply(gradient + 3, 1, 0.5f, wide.data(), wide.data() + 1);
  }
  // Weights, then the embedding's accumulators, then FTRL's z and n.
  const std::vector<float> apart = {embedding[0], embedding[1], embedding[2],
                                    wide[0],      embedding[3], embedding[4],
                                    embedding[5], wide[1],      wide[2]};
  EXPECT_EQ(row, apart);
  EXPECT_NE(wide[1], 0.0f);
}

TEST(OptimizerTest, LaterColumnsOverflowIsReported) {
  OptimizerSpec spec = Spec(OptimizerSpec::SGD, 1.0f);
  LaterColumnsOptimizer* later = spec.add_later_columns();
  later->set_first_column(1);
  *later->mutable_optimizer() = Spec(OptimizerSpec::SGD, 1.0f);
  auto joined = Make(spec);
  float weights[2] = {0.0f, std::numeric_limits<float>::max()};
  const float gradient[2] = {1.0f, -std::numeric_limits<float>::max()};
  // Only the later group overflows.
  EXPECT_FALSE(joined->Apply(gradient, 2, weights, nullptr));
  EXPECT_EQ(weights[0], -1.0f);
}

TEST(OptimizerTest, LaterColumnsMustFitTheRow) {
  OptimizerSpec spec = Spec(OptimizerSpec::ADAGRAD, 0.05f);
  LaterColumnsOptimizer* later = spec.add_later_columns();
  later->set_first_column(16);
  later->mutable_optimizer()->set_kind(OptimizerSpec::FTRL);
  EXPECT_OK(Optimizer::Create(spec, 17));
  EXPECT_EQ(Optimizer::Create(spec, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  later->set_first_column(0);
  EXPECT_EQ(Optimizer::Create(spec, 17).status().code(),
            absl::StatusCode::kInvalidArgument);
  later->set_first_column(8);
  LaterColumnsOptimizer* second = spec.add_later_columns();
  second->set_first_column(8);
  EXPECT_EQ(Optimizer::Create(spec, 17).status().code(),
            absl::StatusCode::kInvalidArgument);
  second->set_first_column(9);
  EXPECT_OK(Optimizer::Create(spec, 17));
  *second->mutable_optimizer() = spec;
  EXPECT_EQ(Optimizer::Create(spec, 17).status().code(),
            absl::StatusCode::kInvalidArgument);
  second->mutable_optimizer()->clear_later_columns();
  second->mutable_optimizer()->set_learning_rate(-1.0f);
  EXPECT_EQ(Optimizer::Create(spec, 17).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, LaterColumnsGetDefaultsAndNames) {
  OptimizerSpec spec = Spec(OptimizerSpec::ADAGRAD, 0.0f);
  LaterColumnsOptimizer* later = spec.add_later_columns();
  later->set_first_column(16);
  later->mutable_optimizer()->set_kind(OptimizerSpec::FTRL);
  const OptimizerSpec filled = Optimizer::WithDefaults(spec);
  EXPECT_EQ(filled.later_columns(0).optimizer().ftrl_beta(), 1.0f);
  EXPECT_EQ(filled.later_columns(0).optimizer().learning_rate(), 0.05f);
  EXPECT_EQ(OptimizerNames(spec), "adagrad+ftrl@16");
  EXPECT_EQ(OptimizerNames(Spec(OptimizerSpec::ADAM, 0.0f)), "adam");
}

}  // namespace
}  // namespace ps
