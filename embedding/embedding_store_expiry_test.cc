// EmbeddingStore's expiry (TableSpec.row_ttl_s): expired rows leave the hot
// tier and disk, read as absent meanwhile, and a replayed update still lands
// on a row whose disk copy looks expired.

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/rocks_store.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

TEST(ExpiryRuleTest, ARowIsKeptAtLeastItsTtlInWholeSeconds) {
  ExpiryRule rule;
  rule.ttl_s = 1;
  // Updated late in second 100: at 101 it may be only a moment old.
  const RowMeta meta{/*updated_at_s=*/100, /*push_count=*/1};
  EXPECT_FALSE(rule.Expired(meta, 100));
  EXPECT_FALSE(rule.Expired(meta, 101));
  EXPECT_TRUE(rule.Expired(meta, 102));
  // Pushed often enough, or never stamped, a row stays.
  rule.evict_below_count = 1;
  EXPECT_FALSE(rule.Expired(meta, 200));
  EXPECT_FALSE(rule.Expired(RowMeta{}, 200));
  rule.ttl_s = 0;
  EXPECT_FALSE(rule.Expired(RowMeta{100, 0}, 200));
}

TEST_F(EmbeddingStoreTest,
       ExpiredRowsGoFromMemoryAndByCompactionAfterARestart) {
  // On disk, rows go after the ttl and twice the write-back interval (1 s
  // in all here).
  options_.write_back_interval = absl::Milliseconds(500);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  // Rows pushed three times or more never expire here.
  TableSpec counted = SgdTable("counted", 4);
  counted.set_row_ttl_s(1);
  counted.set_evict_below_count(3);
  std::vector<uint64_t> old_keys, fresh_keys;
  for (uint64_t key = 0; key < 100; ++key) old_keys.push_back(key);
  for (uint64_t key = 1000; key < 1010; ++key) fresh_keys.push_back(key);
  auto stored = [](EmbeddingStore& store, const std::string& table,
                   uint64_t key) {
    std::vector<float> weights;
    bool stored = false;
    EXPECT_OK(store.GetRow(table, key, &weights, &stored));
    return stored;
  };
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(spec));
    ASSERT_OK(store->tables().DeclareTable(counted));
    ASSERT_OK(store->Push("emb", old_keys, std::vector<float>(400, 1.0f)));
    for (int push = 0; push < 3; ++push)
      ASSERT_OK(store->Push("counted", {7}, std::vector<float>(4, 1.0f)));
    ASSERT_OK(store->Push("counted", {8}, std::vector<float>(4, 1.0f)));
  }
  // Past the ttl, with no process running: a restart, then a compaction.
  absl::SleepFor(absl::Seconds(3.1));
  auto store = OpenStore(options_);
  // Not yet compacted, an expired row already reads as absent.
  EXPECT_FALSE(stored(*store, "emb", 3));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {3}, 4)[0], InitialRow(spec, 3)[0]);
  ASSERT_OK(store->Push("emb", fresh_keys, std::vector<float>(40, 1.0f)));
  ASSERT_OK(store->Flush());
  const uint64_t disk_before = store->Stats().disk_bytes;
  auto expired = store->tables().Expire("emb");
  ASSERT_OK(expired);
  EXPECT_EQ(expired->rows_on_disk, old_keys.size());
  for (uint64_t key : old_keys) EXPECT_FALSE(stored(*store, "emb", key)) << key;
  for (uint64_t key : fresh_keys)
    EXPECT_TRUE(stored(*store, "emb", key)) << key;
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1000}, 4)[0],
                  InitialRow(spec, 1000)[0] - 1.0f);
  auto counted_expired = store->tables().Expire("counted");
  ASSERT_OK(counted_expired);
  EXPECT_EQ(counted_expired->rows_on_disk, 1u);
  EXPECT_TRUE(stored(*store, "counted", 7));
  EXPECT_FALSE(stored(*store, "counted", 8));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.rows_expired_on_disk, old_keys.size() + 1);
  EXPECT_LE(stats.disk_bytes, disk_before);
  EXPECT_THAT(store->tables().Expire("nope"), StatusIs(StatusCode::kNotFound));
  ASSERT_OK(store->tables().DeclareTable(SgdTable("forever", 4)));
  EXPECT_THAT(store->tables().Expire("forever"),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(EmbeddingStoreTest, ExpiredRowsLeaveTheHotTierByThemselves) {
  options_.durability = Durability::kPeriodic;
  options_.write_back_interval = absl::Milliseconds(200);
  options_.num_stripes = 2;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  ASSERT_OK(store->tables().DeclareTable(SgdTable("forever", 4)));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 50; ++key) keys.push_back(key);
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(200, 1.0f)));
  ASSERT_OK(store->Push("forever", keys, std::vector<float>(200, 1.0f)));
  WaitUntil(
      [&] { return store->Stats().rows_expired_in_memory >= keys.size(); },
      absl::Seconds(20), absl::Milliseconds(100));
  EXPECT_EQ(store->Stats().rows_expired_in_memory, keys.size());
  // The table without a ttl keeps its rows.
  EXPECT_FLOAT_EQ(PullRows(*store, "forever", {5}, 4)[0],
                  InitialRow(SgdTable("forever", 4), 5)[0] - 1.0f);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 4)[0], InitialRow(spec, 5)[0]);

  TableSpec bad = SgdTable("bad", 4);
  bad.set_evict_below_count(2);
  EXPECT_THAT(store->tables().DeclareTable(bad),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(EmbeddingStoreTest, ExpireSweepsAWholeLargeStripeAPartAtATime) {
  // No background sweep: Expire() alone must find every expired row of a
  // stripe larger than one part of the sweep.
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 1;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 40000; ++key) keys.push_back(key);
  ASSERT_OK(
      store->Push("emb", keys, std::vector<float>(keys.size() * 4, 1.0f)));
  ASSERT_OK(store->Flush());  // clean: expirable in memory
  absl::SleepFor(absl::Seconds(2.1));
  absl::StatusOr<ExpireOutcome> outcome = store->tables().Expire("emb");
  ASSERT_OK(outcome);
  EXPECT_EQ(outcome->rows_in_memory, keys.size());
}

TEST_F(EmbeddingStoreTest, AnExpiredRowStillInTheHotTierReadsAsAbsent) {
  // No sweep runs in this test: only a lookup can find the row expired.
  options_.write_back_interval = absl::Hours(1);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  ASSERT_OK(store->Push("emb", {5, 6}, std::vector<float>(8, 1.0f)));
  ASSERT_OK(store->Flush());  // clean in the hot tier
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 4)[0],
                  InitialRow(spec, 5)[0] - 1.0f);
  absl::SleepFor(absl::Seconds(2.1));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 4)[0], InitialRow(spec, 5)[0]);
  // A push starts the row afresh.
  ASSERT_OK(store->Push("emb", {6}, std::vector<float>(4, 1.0f)));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {6}, 4)[0],
                  InitialRow(spec, 6)[0] - 1.0f);
}

TEST_F(EmbeddingStoreTest, ReplayLandsOnARowWhoseDiskCopyLooksExpired) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  TableSpec spec = SgdTable("emb", 2);
  spec.set_row_ttl_s(1);
  // The row reaches disk, then a second push is only in the push log when
  // the process dies; it restarts after the disk copy's ttl.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->tables().DeclareTable(spec).ok()) std::_Exit(1);
        if (!store->Push("emb", {3}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (!store->Flush().ok()) std::_Exit(3);
        absl::SleepFor(absl::Milliseconds(500));
        if (!store->Push("emb", {3}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  absl::SleepFor(absl::Seconds(1.6));
  auto store = OpenStore(options_);
  // Both pushes: the second was applied to the stored row, not to a fresh
  // one.
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {3}, 2)[0],
                  InitialRow(spec, 3)[0] - 2.0f);
}

}  // namespace
}  // namespace ps::embedding
