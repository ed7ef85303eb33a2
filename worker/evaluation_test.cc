#include "worker/evaluation.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace ps::worker {
namespace {

// The AUC by its definition: over every (positive, negative) pair, a win
// when the positive scores higher, half of one on a tie.
double AucByCountingPairs(const std::vector<float>& scores,
                          const std::vector<float>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] == 1.0f && labels[j] == 0.0f) {
        pairs += 1;
        wins += scores[i] > scores[j]    ? 1.0
                : scores[i] == scores[j] ? 0.5
                                         : 0.0;
      }
    }
  }
  return wins / pairs;
}

TEST(EvaluationTest, AucOfPerfectReversedAndTiedScores) {
  EXPECT_DOUBLE_EQ(ExactAuc({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.9f, 0.8f, 0.2f, 0.1f}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 1}), 0.5);
  // One positive above one of two negatives and tied with the other:
  // (1 + 0.5) / 2.
  EXPECT_DOUBLE_EQ(ExactAuc({0.3f, 0.7f, 0.7f}, {0, 0, 1}), 0.75);
  EXPECT_DOUBLE_EQ(ExactAuc({0.3f, 0.7f}, {1, 1}), 0.5);  // one class only
}

TEST(EvaluationTest, AucMatchesPairCountingOnRandomData) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> bucket(0, 20);  // many ties
  std::vector<float> scores(500), labels(500);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = bucket(rng) / 20.0f;
    labels[i] = (rng() % 3 == 0) ? 1.0f : 0.0f;
  }
  EXPECT_NEAR(ExactAuc(scores, labels), AucByCountingPairs(scores, labels),
              1e-12);
}

// Scores of both signs, zeros of both signs (equal, so tied), and many
// ties, against counting pairs.
TEST(EvaluationTest, AucOfSignedScoresAndZerosMatchesPairCounting) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> bucket(-10, 10);
  std::vector<float> scores(700), labels(700);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = bucket(rng) / 4.0f;
    if (scores[i] == 0.0f && rng() % 2 == 0) scores[i] = -0.0f;
    labels[i] = (rng() % 3 == 0) ? 1.0f : 0.0f;
  }
  EXPECT_NEAR(ExactAuc(scores, labels), AucByCountingPairs(scores, labels),
              1e-12);
  // -0.0 tied with 0.0: a positive at -0.0 against a negative at 0.0 is
  // half a win.
  EXPECT_DOUBLE_EQ(ExactAuc({-0.0f, 0.0f}, {1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(ExactAuc({-1.0f, -0.5f, 2.0f}, {0, 1, 1}), 1.0);
}

TEST(EvaluationTest, AucWithANanScoreFinishes) {
  // A NaN score (a diverged model) is a tie group of one: with its sign
  // bit clear (std::nanf) it ranks above every number, with it set (what
  // x86 arithmetic makes, inf * 0 say) below every number.
  const float nan = std::nanf("");
  EXPECT_DOUBLE_EQ(ExactAuc({0.2f, nan, 0.7f, 0.1f}, {0, 1, 1, 0}), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.2f, std::copysign(nan, -1.0f), 0.7f}, {1, 0, 1}),
                   1.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.2f, nan, 0.7f}, {1, 0, 1}), 0.0);
}

TEST(EvaluationTest, LogLoss) {
  EXPECT_NEAR(MeanLogLoss({0.5f, 0.5f}, {0, 1}), std::log(2.0), 1e-7);
  EXPECT_NEAR(MeanLogLoss({0.9f}, {1}), -std::log(0.9), 1e-6);
  EXPECT_TRUE(std::isfinite(MeanLogLoss({0.0f, 1.0f}, {1, 0})));
  EXPECT_EQ(MeanLogLoss({}, {}), 0.0);
}

TEST(EvaluationTest, TaskScoresKeepEachTasksKnownExamples) {
  TaskScores scores({"ctr", "cvr"});
  // Two examples, task-major; cvr knows only the second.
  scores.Add(2, {0.9f, 0.2f, 0.3f, 0.7f}, {1, 0, 0, 1}, {1, 1, 0, 1});
  // Every label known.
  scores.Add(1, {0.4f, 0.1f}, {1, 0}, {});
  EXPECT_EQ(scores.examples(), 3);
  const std::vector<TaskMetrics> metrics = scores.Metrics();
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_EQ(metrics[0].task, "ctr");
  EXPECT_EQ(metrics[0].examples, 3);
  EXPECT_NEAR(metrics[0].auc, 1.0, 1e-12);  // 0.9 and 0.4 over 0.2
  EXPECT_NEAR(metrics[0].logloss, MeanLogLoss({0.9f, 0.2f, 0.4f}, {1, 0, 1}),
              1e-12);
  EXPECT_EQ(metrics[1].examples, 2);
  EXPECT_NEAR(metrics[1].logloss, MeanLogLoss({0.7f, 0.1f}, {1, 0}), 1e-12);
  EXPECT_NEAR(metrics[1].auc, 1.0, 1e-12);
  scores.Clear();
  EXPECT_EQ(scores.examples(), 0);
  EXPECT_EQ(scores.Metrics()[1].examples, 0);
}

}  // namespace
}  // namespace ps::worker
