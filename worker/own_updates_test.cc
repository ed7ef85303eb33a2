#include "worker/own_updates.h"

#include <cstring>
#include <memory>
#include <vector>

#include "base/optimizer.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

TEST(FindSharedRowsTest, FindsTheNextStepsKeysThePreviousStepHas) {
  const std::vector<uint64_t> previous = {10, 20, 30, 40};
  const std::vector<uint64_t> next = {40, 5, 10, 7, 30};
  SharedRows shared;
  FindSharedRows(previous, next, /*dim=*/2, /*state_floats=*/3, &shared);
  EXPECT_EQ(shared.keys, (std::vector<uint64_t>{40, 10, 30}));
  EXPECT_EQ(shared.next_positions, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(shared.previous_positions, (std::vector<uint32_t>{3, 0, 2}));
  EXPECT_EQ(shared.other_keys, (std::vector<uint64_t>{5, 7}));
  EXPECT_EQ(shared.other_positions, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(shared.rows_with_state.size(), 3u * 5u);
  const client::TrainingClient::TableRows pull = shared.Pull("t");
  EXPECT_EQ(pull.keys.size(), 3u);
  EXPECT_EQ(pull.dim, 2);
  EXPECT_EQ(pull.state_floats, 3);
  EXPECT_EQ(pull.optimizer, &shared.optimizer);
}

TEST(FindSharedRowsTest, NothingSharedLeavesItEmpty) {
  SharedRows shared;
  shared.keys = {99};  // left from an earlier step
  shared.other_keys = {98};
  FindSharedRows(std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3, 4}, 1, 1,
                 &shared);
  EXPECT_TRUE(shared.keys.empty());
  EXPECT_TRUE(shared.rows_with_state.empty());
  EXPECT_EQ(shared.other_keys, (std::vector<uint64_t>{3, 4}));
}

// What a shard does with a push: each row's weights and state, updated by
// the table's optimizer with the push's scale times the table's multiplier.
void ApplyAsTheShardDoes(const OptimizerSpec& spec, float multiplier,
                         float push_scale, const float* gradient, int dim,
                         float* row) {
  std::unique_ptr<Optimizer> optimizer = Optimizer::Create(spec).value();
  optimizer->Apply(gradient, dim, push_scale * multiplier, row, row + dim);
}

class ReplayOwnPushTest : public testing::TestWithParam<OptimizerSpec::Kind> {};

TEST_P(ReplayOwnPushTest, GivesTheRowsTheShardWillHoldBitForBit) {
  constexpr int kDim = 3;
  OptimizerSpec spec;
  spec.set_kind(GetParam());
  spec = Optimizer::WithDefaults(spec);
  std::unique_ptr<Optimizer> optimizer = Optimizer::Create(spec).value();
  const int state_floats = optimizer->StateFloats(kDim);
  const int row_floats = kDim + state_floats;

  // The shard's rows of keys 1..4 after some history.
  std::vector<std::vector<float>> stored(5, std::vector<float>(row_floats));
  for (int key = 1; key <= 4; ++key) {
    for (int d = 0; d < kDim; ++d) stored[key][d] = 0.1f * key - 0.03f * d;
    optimizer->InitState(kDim, stored[key].data() + kDim);
    const float history[kDim] = {0.2f * key, -0.5f, 0.07f * key};
    optimizer->Apply(history, kDim, 1.0f, stored[key].data(),
                     stored[key].data() + kDim);
  }

  // The previous step pushed keys {3, 1, 4}; the next step pulls {4, 2, 3}.
  const std::vector<uint64_t> previous = {3, 1, 4};
  const std::vector<uint64_t> next = {4, 2, 3};
  const std::vector<float> gradients = {0.3f, -0.2f, 0.9f,  -1.5f, 0.25f,
                                        0.0f, 0.6f,  0.45f, -0.05f};
  const float push_scale = 0.5f, multiplier = 1.25f;

  SharedRows shared;
  FindSharedRows(previous, next, kDim, state_floats, &shared);
  ASSERT_EQ(shared.keys, (std::vector<uint64_t>{4, 3}));
  // The pull: the shard's rows before the push.
  for (size_t i = 0; i < shared.keys.size(); ++i) {
    std::memcpy(&shared.rows_with_state[i * row_floats],
                stored[shared.keys[i]].data(), row_floats * sizeof(float));
  }
  shared.optimizer.spec = spec;
  shared.optimizer.learning_rate_multiplier = multiplier;
  std::vector<float> rows(next.size() * kDim, -7.0f);
  // Key 2 was not pushed: its pulled row stays.
  for (int d = 0; d < kDim; ++d) rows[1 * kDim + d] = stored[2][d];
  ASSERT_OK(ReplayOwnPush(shared, gradients, push_scale, absl::MakeSpan(rows)));

  // Then the push lands on the shard.
  for (size_t i = 0; i < previous.size(); ++i) {
    ApplyAsTheShardDoes(spec, multiplier, push_scale, &gradients[i * kDim],
                        kDim, stored[previous[i]].data());
  }
  for (size_t i = 0; i < next.size(); ++i) {
    for (int d = 0; d < kDim; ++d) {
      EXPECT_EQ(rows[i * kDim + d], stored[next[i]][d])
          << "key " << next[i] << " float " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, ReplayOwnPushTest,
                         testing::Values(OptimizerSpec::SGD,
                                         OptimizerSpec::ADAGRAD,
                                         OptimizerSpec::ADAM,
                                         OptimizerSpec::FTRL));

TEST(ReplayOwnPushTest, RefusesRowsOfAnotherStateSize) {
  SharedRows shared;
  FindSharedRows(std::vector<uint64_t>{1}, std::vector<uint64_t>{1}, 2,
                 /*state_floats=*/1, &shared);
  shared.optimizer.spec.set_kind(OptimizerSpec::ADAGRAD);  // keeps 2
  std::vector<float> rows(2);
  EXPECT_FALSE(ReplayOwnPush(shared, std::vector<float>{1, 1}, 1.0f,
                             absl::MakeSpan(rows))
                   .ok());
}

TEST(ReplayOwnPushTest, RefusesPositionsOutsideTheBuffers) {
  SharedRows shared;
  FindSharedRows(std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{2}, 1, 0,
                 &shared);
  shared.optimizer.spec.set_kind(OptimizerSpec::SGD);
  std::vector<float> rows(1);
  // The previous step's gradients hold one row, not the two it pushed.
  EXPECT_FALSE(ReplayOwnPush(shared, std::vector<float>{0.5f}, 1.0f,
                             absl::MakeSpan(rows))
                   .ok());
}

}  // namespace
}  // namespace ps::worker
