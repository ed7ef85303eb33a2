#include "embedding/row_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

const std::vector<float> kRow = {1.0f, 2.0f, 3.0f, 4.0f};

TEST(RowCacheTest, FindsWhatWasInserted) {
  RowCache cache(1 << 20);
  EXPECT_EQ(cache.Find(0, 7), nullptr);
  cache.Insert(0, 7, kRow, /*dirty=*/false);
  CachedRow* row = cache.Find(0, 7);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(std::vector<float>(row->values().begin(), row->values().end()),
            kRow);
  // Same key, other table: a different row.
  EXPECT_EQ(cache.Find(1, 7), nullptr);
  EXPECT_EQ(cache.bytes(), RowCache::RowBytes(kRow.size()));
}

TEST(RowCacheTest, EvictsRowsNotHitSinceTheyWereLastExamined) {
  RowCache cache(3 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(0, key, kRow, false);
  ASSERT_NE(cache.Find(0, 1), nullptr);  // 1 is now the most recent
  cache.Insert(0, 4, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  EXPECT_TRUE(dirty.empty());
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Find(0, 2), nullptr);  // the least recently used went
  EXPECT_NE(cache.Find(0, 1), nullptr);
  EXPECT_NE(cache.Find(0, 3), nullptr);
  EXPECT_NE(cache.Find(0, 4), nullptr);
  EXPECT_LE(cache.bytes(), cache.budget_bytes());
}

TEST(RowCacheTest, DirtyRowsAreHandedBackOnEviction) {
  RowCache cache(RowCache::RowBytes(kRow.size()));
  cache.Insert(0, 1, kRow, /*dirty=*/true);
  cache.Insert(0, 2, kRow, /*dirty=*/false);
  cache.Insert(0, 3, kRow, /*dirty=*/false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_EQ(dirty[0].key, 1u);
  EXPECT_EQ(dirty[0].values, kRow);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RowCacheTest, AnEvictedDirtyRowKeepsItsLogSequence) {
  RowCache cache(RowCache::RowBytes(kRow.size()));
  CachedRow* row = cache.Insert(3, 9, kRow, /*dirty=*/true);
  row->log_sequence = 42;
  row->values()[0] = 7.0f;
  cache.Insert(3, 10, kRow, /*dirty=*/false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_EQ(dirty[0].table_id, 3u);
  EXPECT_EQ(dirty[0].key, 9u);
  EXPECT_EQ(dirty[0].log_sequence, 42u);
  EXPECT_EQ(dirty[0].values, (std::vector<float>{7.0f, 2.0f, 3.0f, 4.0f}));
}

TEST(RowCacheTest, EveryRowIsVisitedNewestFirstAndSecondChancesRotate) {
  RowCache cache(3 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(0, key, kRow, false);
  std::vector<uint64_t> order;
  cache.ForEachRow([&](CachedRow& row) { order.push_back(row.key); });
  EXPECT_EQ(order, (std::vector<uint64_t>{3, 2, 1}));
  // 1 and 2 are hit, so inserting 4 evicts 3 after 1 and 2 rotate to the
  // newest end.
  ASSERT_NE(cache.Find(0, 1), nullptr);
  ASSERT_NE(cache.Find(0, 2), nullptr);
  cache.Insert(0, 4, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  order.clear();
  cache.ForEachRow([&](CachedRow& row) { order.push_back(row.key); });
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 1, 4}));
}

TEST(RowCacheTest, ForEachDirtyVisitsOnlyDirtyRows) {
  RowCache cache(1 << 20);
  cache.Insert(0, 1, kRow, true);
  cache.Insert(0, 2, kRow, false);
  cache.Insert(2, 3, kRow, true);
  std::vector<uint64_t> seen;
  cache.ForEachDirty([&](CachedRow& row) {
    seen.push_back(row.key);
    row.dirty = false;
  });
  EXPECT_EQ(seen.size(), 2u);
  int again = 0;
  cache.ForEachDirty([&](CachedRow&) { ++again; });
  EXPECT_EQ(again, 0);
}

}  // namespace
}  // namespace ps::embedding
