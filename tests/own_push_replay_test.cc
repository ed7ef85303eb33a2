// A worker's replay of its own push (worker/own_updates.h) against a real
// store: rows pulled with their state, the push replayed onto them, then the
// same push applied by the store; the replayed weights must be the store's
// bit for bit, for every optimizer, with an administrator's learning rate
// and a learning-rate scale on the push, for rows pushed before and rows
// never pushed.

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "embedding/embedding_store.h"
#include "gtest/gtest.h"
#include "worker/own_updates.h"

namespace ps {
namespace {

class OwnPushReplayTest : public testing::TestWithParam<OptimizerSpec::Kind> {};

TEST_P(OwnPushReplayTest, ReplayedRowsAreTheStoresAfterThePush) {
  constexpr int kDim = 5;
  embedding::StoreOptions options;
  options.data_dir = FreshTestDir(absl::StrCat("own_push_replay_", GetParam()));
  auto store = embedding::EmbeddingStore::Open(options);
  ASSERT_OK(store);
  TableSpec spec;
  spec.set_name("t");
  spec.set_dim(kDim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_optimizer()->set_kind(GetParam());
  ASSERT_OK((*store)->tables().DeclareTable(spec).status());
  // Some history, and a learning rate an administrator set (a multiplier
  // that is not a power of two).
  const std::vector<uint64_t> history_keys = {1, 2, 3};
  std::vector<float> history(history_keys.size() * kDim);
  for (size_t i = 0; i < history.size(); ++i)
    history[i] = 0.37f * static_cast<float>(i % 7) - 0.9f;
  ASSERT_OK((*store)->Push("t", history_keys, history).status());
  ASSERT_OK((*store)->Push("t", history_keys, history).status());
  auto declared = (*store)->tables().GetTableOptimizer("t");
  ASSERT_OK(declared);
  ASSERT_OK((*store)->tables().SetLearningRate(
      "t", declared->spec.learning_rate() * 1.37f));

  // The previous step pushed keys {3, 1, 9} (9 never pushed before); the
  // next step pulls {9, 2, 3}: 9 and 3 are shared.
  const std::vector<uint64_t> previous = {3, 1, 9};
  const std::vector<uint64_t> next = {9, 2, 3};
  std::vector<float> gradients(previous.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i)
    gradients[i] = 0.21f * static_cast<float>(i % 5) - 0.33f;
  const float push_scale = 0.61f;

  auto table_optimizer_or = (*store)->tables().GetTableOptimizer("t");
  ASSERT_OK(table_optimizer_or);
  const auto& table_optimizer = *table_optimizer_or;
  ASSERT_NE(table_optimizer.learning_rate_multiplier, 1.0f);
  worker::SharedRows shared;
  worker::FindSharedRows(previous, next, kDim, table_optimizer.state_floats,
                         &shared);
  ASSERT_EQ(shared.keys.size(), 2u);
  ASSERT_OK((*store)->PullWithState("t", shared.keys,
                                    absl::MakeSpan(shared.rows_with_state)));
  shared.optimizer.spec = table_optimizer.spec;
  shared.optimizer.learning_rate_multiplier =
      table_optimizer.learning_rate_multiplier;
  std::vector<float> rows(next.size() * kDim, 0.0f);
  ASSERT_OK((*store)->Pull("t", shared.other_keys,
                           absl::MakeSpan(&rows[kDim], kDim)));  // key 2
  ASSERT_OK(worker::ReplayOwnPush(shared, gradients, push_scale,
                                  absl::MakeSpan(rows)));

  // The push lands.
  embedding::PushOrigin origin;
  ASSERT_OK(
      (*store)->Push("t", previous, gradients, origin, push_scale).status());
  std::vector<float> stored(next.size() * kDim);
  ASSERT_OK((*store)->Pull("t", next, absl::MakeSpan(stored)));
  for (size_t i = 0; i < rows.size(); ++i) {
    uint32_t replayed_bits, stored_bits;
    std::memcpy(&replayed_bits, &rows[i], sizeof(float));
    std::memcpy(&stored_bits, &stored[i], sizeof(float));
    EXPECT_EQ(replayed_bits, stored_bits)
        << "key " << next[i / kDim] << " float " << i % kDim << ": replayed "
        << rows[i] << ", stored " << stored[i];
  }
  // The push changed the shared rows (the check is not of rows left alone).
  EXPECT_NE(stored[0], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, OwnPushReplayTest,
                         testing::Values(OptimizerSpec::SGD,
                                         OptimizerSpec::ADAGRAD,
                                         OptimizerSpec::ADAM,
                                         OptimizerSpec::FTRL));

}  // namespace
}  // namespace ps
