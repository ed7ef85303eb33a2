// SlotMoveSource on a real store: the keys pushes change during a move are
// recorded and read again after those pushes, a bound on them pauses the
// slots, and the map may not switch while any is left to copy.

#include "server/slot_move.h"

#include <memory>
#include <string>
#include <vector>

#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "cluster/slot_ownership.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

constexpr uint32_t kDim = 2;

class SlotMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    embedding::StoreOptions options;
    options.data_dir = FreshTestDir("slot_move");
    store_ = embedding::OpenStore(options);
    ASSERT_OK(store_->tables().DeclareTable(embedding::SgdTable("t", kDim)));
    absl::StatusOr<std::unique_ptr<cluster::SlotOwnership>> slots =
        cluster::SlotOwnership::Open(options.data_dir, 2);
    ASSERT_OK(slots);
    slots_ = *std::move(slots);
    // Shard 0's keys (even slots at epoch 1).
    for (uint64_t key = 1; keys_.size() < 12; ++key)
      if (ShardForKey(key, 2) == 0) keys_.push_back(key);
  }

  // Pushes `keys` once (a gradient of -1 each), as the data service does:
  // admitted by the move first; whether it was.
  bool Push(SlotMoveSource& moves, const std::vector<uint64_t>& keys) {
    absl::ReaderMutexLock pushing(&slots_->push_lock());
    if (!moves.Admit(keys)) return false;
    EXPECT_OK(
        store_->Push("t", keys, std::vector<float>(keys.size() * kDim, -1.0f)));
    moves.Record("t", keys);
    return true;
  }

  SlotMap GivenAway() const {
    return SlotMap::Initial(2).WithSlotsMovedFrom(0, kNumSlots - 1, 0, 1);
  }

  std::unique_ptr<embedding::EmbeddingStore> store_;
  std::unique_ptr<cluster::SlotOwnership> slots_;
  std::vector<uint64_t> keys_;
};

TEST_F(SlotMoveTest, PushesGoOnAndTheRowsTheyChangeAreReadAgain) {
  SlotMoveSource moves(store_.get(), slots_.get(), 0);
  ASSERT_OK(moves.Begin(0, kNumSlots - 1, 1, absl::Seconds(30)));
  const std::vector<uint64_t> pushed(keys_.begin(), keys_.begin() + 3);
  ASSERT_TRUE(Push(moves, pushed));
  ASSERT_TRUE(Push(moves, pushed));
  EXPECT_EQ(moves.ChangedTables(), std::vector<std::string>({"t"}));
  // Not paused, rows to copy: the map may not switch yet.
  bool switching = false;
  EXPECT_EQ(
      moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching).code(),
      absl::StatusCode::kFailedPrecondition);

  uint64_t left = 0;
  absl::StatusOr<std::vector<embedding::SlotRow>> changed =
      moves.ReadChanged("t", /*pause=*/false, 2, &left);
  ASSERT_OK(changed);
  ASSERT_EQ(changed->size(), 2u);
  EXPECT_EQ(left, 1u);
  for (const embedding::SlotRow& row : *changed) {
    // Both pushes are in the row read.
    const std::vector<float> now =
        embedding::PullRows(*store_, "t", {row.key}, kDim);
    EXPECT_EQ(row.floats[0], now[0]);
    EXPECT_EQ(row.meta.push_count, 2u);
  }
  changed = moves.ReadChanged("t", /*pause=*/true, 10, &left);
  ASSERT_OK(changed);
  EXPECT_EQ(changed->size(), 1u);
  EXPECT_EQ(left, 0u);
  // Paused: the slots' pushes wait, others' do not.
  EXPECT_FALSE(Push(moves, pushed));
  EXPECT_TRUE(moves.Admit({}));
  // The tables with rows left to copy: none.
  EXPECT_TRUE(moves.ChangedTables().empty());
  EXPECT_OK(moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching));
  EXPECT_TRUE(switching);
  moves.AfterChange();
}

TEST_F(SlotMoveTest, TooManyChangedKeysPauseTheSlots) {
  SlotMoveSource moves(store_.get(), slots_.get(), 0, /*max_changed_keys=*/4);
  ASSERT_OK(moves.Begin(0, kNumSlots - 1, 1, absl::Seconds(30)));
  ASSERT_TRUE(Push(moves, {keys_[0], keys_[1], keys_[2]}));
  // The push that passes the bound is applied (recorded), the next waits.
  ASSERT_TRUE(Push(moves, {keys_[3], keys_[4]}));
  EXPECT_FALSE(Push(moves, {keys_[5]}));
  uint64_t left = 0;
  absl::StatusOr<std::vector<embedding::SlotRow>> changed =
      moves.ReadChanged("t", /*pause=*/false, 100, &left);
  ASSERT_OK(changed);
  EXPECT_EQ(changed->size(), 5u);
  EXPECT_FALSE(Push(moves, {keys_[6]}));
  bool switching = false;
  EXPECT_OK(moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching));
  moves.AfterChange();
}

TEST_F(SlotMoveTest, ChangedKeysThatCouldNotBeReadAreKept) {
  SlotMoveSource moves(store_.get(), slots_.get(), 0);
  ASSERT_OK(moves.Begin(0, kNumSlots - 1, 1, absl::Seconds(30)));
  {
    absl::ReaderMutexLock pushing(&slots_->push_lock());
    // A table dropped since its push: reading its rows fails.
    ASSERT_TRUE(moves.Admit({keys_[0]}));
    moves.Record("gone", {keys_[0]});
  }
  uint64_t left = 0;
  EXPECT_EQ(
      moves.ReadChanged("gone", /*pause=*/true, 10, &left).status().code(),
      absl::StatusCode::kNotFound);
  bool switching = false;
  EXPECT_EQ(
      moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(moves.ChangedTables(), std::vector<std::string>({"gone"}));
}

TEST_F(SlotMoveTest, GivingSlotsAwayWithNoMoveHereNeedsSaying) {
  SlotMoveSource moves(store_.get(), slots_.get(), 0);
  bool switching = false;
  // No move under way (as after this shard restarted mid-move): the
  // switch a mover retries is refused.
  EXPECT_EQ(
      moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching).code(),
      absl::StatusCode::kFailedPrecondition);
  // Said to move no rows, it may.
  EXPECT_OK(moves.MayGiveAway(GivenAway(), /*without_move=*/true, &switching));
  EXPECT_FALSE(switching);
  // A change that gives nothing of this shard away needs no move.
  EXPECT_OK(moves.MayGiveAway(
      SlotMap::Initial(2).WithSlotsMovedFrom(0, kNumSlots - 1, 1, 0),
      /*without_move=*/false, &switching));
  // A move of some slots does not cover others the change gives away.
  ASSERT_OK(moves.Begin(0, 99, 1, absl::Seconds(30)));
  uint64_t left = 0;
  ASSERT_OK(moves.ReadChanged("", /*pause=*/true, 10, &left));
  EXPECT_EQ(
      moves.MayGiveAway(GivenAway(), /*without_move=*/false, &switching).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(switching);
  EXPECT_OK(
      moves.MayGiveAway(SlotMap::Initial(2).WithSlotsMovedFrom(0, 99, 0, 1),
                        /*without_move=*/false, &switching));
  EXPECT_TRUE(switching);
  moves.AfterChange();
}

}  // namespace
}  // namespace ps::server
