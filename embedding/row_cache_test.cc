#include "embedding/row_cache.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

const std::vector<float> kRow = {1.0f, 2.0f, 3.0f, 4.0f};

// Resident set size of this process, from /proc.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(RowCacheTest, RowsLieInTheHugePageArenaUnlessToldNot) {
  // 77 floats: a chunk size no other test in this binary allocates.
  const std::vector<float> row(77, 1.5f);
  const size_t before = ChunkArena::Global().mapped_bytes();
  {
    RowCache on_heap(1 << 20, /*huge_pages=*/false);
    on_heap.Insert(0, 1, row, false);
    EXPECT_EQ(ChunkArena::Global().mapped_bytes(), before);
    EXPECT_EQ(on_heap.Find(0, 1)->floats()[76], 1.5f);
  }
  {
    RowCache on_huge_pages(1 << 20, /*huge_pages=*/true);
    on_huge_pages.Insert(0, 1, row, false);
    EXPECT_EQ(ChunkArena::Global().mapped_bytes(),
              before + ChunkArena::kRegionBytes);
    EXPECT_EQ(on_huge_pages.Find(0, 1)->floats()[76], 1.5f);
  }
  // The cache's chunk went back, and with it the region.
  EXPECT_EQ(ChunkArena::Global().mapped_bytes(), before);
}

TEST(RowCacheTest, FindsWhatWasInserted) {
  RowCache cache(1 << 20);
  EXPECT_EQ(cache.Find(0, 7), nullptr);
  cache.Insert(0, 7, kRow, /*dirty=*/false);
  CachedRow* row = cache.Find(0, 7);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(std::vector<float>(row->floats(), row->floats() + kRow.size()),
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
  row->floats()[0] = 7.0f;
  cache.Insert(3, 10, kRow, /*dirty=*/false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_EQ(dirty[0].table_id, 3u);
  EXPECT_EQ(dirty[0].key, 9u);
  EXPECT_EQ(dirty[0].log_sequence, 42u);
  EXPECT_EQ(dirty[0].values, (std::vector<float>{7.0f, 2.0f, 3.0f, 4.0f}));
}

// The rows present, in the order ForEachRow() visits them.
std::vector<uint64_t> Keys(RowCache& cache) {
  std::vector<uint64_t> keys;
  cache.ForEachRow([&](uint32_t, CachedRow& row, absl::Span<float>) {
    keys.push_back(row.key);
  });
  return keys;
}

TEST(RowCacheTest, TheHandSweepsOnAndSecondChancesAreUsedUp) {
  RowCache cache(3 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(0, key, kRow, false);
  EXPECT_EQ(Keys(cache), (std::vector<uint64_t>{1, 2, 3}));
  // 1 and 2 are hit, so inserting 4 evicts 3, the hand passing 1 and 2 and
  // taking their second chances.
  ASSERT_NE(cache.Find(0, 1), nullptr);
  ASSERT_NE(cache.Find(0, 2), nullptr);
  cache.Insert(0, 4, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(Keys(cache), (std::vector<uint64_t>{1, 2, 4}));
  // 5 takes 3's entry, behind the hand, which goes on from 4: 4 is older.
  cache.Insert(0, 5, kRow, false);
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(Keys(cache), (std::vector<uint64_t>{1, 2, 5}));
  // 6 takes 4's entry; the hand wraps around, and 1 used its second chance
  // already.
  cache.Insert(0, 6, kRow, false);
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(Keys(cache), (std::vector<uint64_t>{2, 5, 6}));
  EXPECT_TRUE(dirty.empty());
}

TEST(RowCacheTest, TheHandSweepsEveryTable) {
  RowCache cache(4 * RowCache::RowBytes(kRow.size()));
  cache.Insert(0, 1, kRow, false);
  cache.Insert(0, 2, kRow, false);
  cache.Insert(5, 1, kRow, false);
  cache.Insert(5, 2, kRow, false);
  // Hit every row but table 5's key 1, then overfill by one.
  for (auto [table, key] :
       {std::pair<uint32_t, uint64_t>{0, 1}, {0, 2}, {5, 2}})
    ASSERT_NE(cache.Find(table, key), nullptr);
  cache.Insert(5, 3, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(cache.Find(5, 1), nullptr);
  EXPECT_NE(cache.Find(0, 1), nullptr);
  EXPECT_NE(cache.Find(0, 2), nullptr);
  EXPECT_NE(cache.Find(5, 2), nullptr);
  EXPECT_NE(cache.Find(5, 3), nullptr);
}

TEST(RowCacheTest, ErasedRowsFreeTheirSlotsForNewRows) {
  RowCache cache(1 << 20);
  std::vector<float> other = {9.0f, 8.0f, 7.0f, 6.0f};
  CachedRow* two = nullptr;
  for (uint64_t key = 1; key <= 3; ++key) {
    CachedRow* row = cache.Insert(0, key, kRow, false);
    if (key == 2) two = row;
  }
  cache.Erase(0, two);
  EXPECT_EQ(cache.Find(0, 2), nullptr);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * RowCache::RowBytes(kRow.size()));
  // The entry is reused, and the new row is found under its own key only.
  CachedRow* four = cache.Insert(0, 4, other, true);
  EXPECT_EQ(four, two);
  EXPECT_EQ(cache.Find(0, 4), four);
  EXPECT_EQ(cache.Find(0, 2), nullptr);
  EXPECT_EQ(four->floats()[0], 9.0f);
  EXPECT_EQ(four->version, 0u);
  EXPECT_EQ(Keys(cache), (std::vector<uint64_t>{1, 4, 3}));
}

TEST(RowCacheTest, EraseTableDropsOnlyThatTablesRows) {
  RowCache cache(1 << 20);
  const std::vector<float> wide = {1.0f, 2.0f};
  for (uint64_t key = 1; key <= 3; ++key) {
    cache.Insert(0, key, kRow, false);
    cache.Insert(7, key, wide, true);
  }
  EXPECT_EQ(cache.EraseTable(0), 3u);
  EXPECT_EQ(cache.EraseTable(0), 0u);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.bytes(), 3 * RowCache::RowBytes(wide.size()));
  EXPECT_EQ(cache.Find(0, 1), nullptr);
  CachedRow* row = cache.Find(7, 1);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->floats()[1], 2.0f);
  // The hand still works over what is left.
  RowCache small(RowCache::RowBytes(wide.size()));
  small.Insert(1, 1, kRow, false);
  small.Insert(2, 1, wide, false);
  small.Insert(2, 2, wide, false);
  small.EraseTable(1);
  std::vector<EvictedRow> dirty;
  small.EvictToBudget(&dirty);
  EXPECT_EQ(small.size(), 1u);
  EXPECT_LE(small.bytes(), small.budget_bytes());
}

TEST(RowCacheTest, AfterEraseTableTheHandStartsTheNextTableFromItsFirstRow) {
  RowCache cache(4 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(1, key, kRow, false);
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(2, key, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);  // (1, 1) and (1, 2): the hand is in table 1
  ASSERT_EQ(cache.Find(1, 2), nullptr);
  ASSERT_EQ(cache.EraseTable(1), 1u);
  cache.Insert(2, 4, kRow, false);
  cache.Insert(2, 5, kRow, false);
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(cache.Find(2, 1), nullptr);
  EXPECT_NE(cache.Find(2, 3), nullptr);
}

TEST(RowCacheTest, ManyRowsGrowTheIndexAndStayFindable) {
  RowCache cache(size_t{1} << 30);
  constexpr uint64_t kRows = 20000;  // several chunks, several rehashes
  for (uint64_t key = 0; key < kRows; ++key) {
    CachedRow* row = cache.Insert(3, key * 7919, kRow, false);
    row->floats()[0] = static_cast<float>(key);
  }
  for (uint64_t key = 0; key < kRows; key += 7) {
    CachedRow* row = cache.Find(3, key * 7919);
    ASSERT_NE(row, nullptr) << key;
    ASSERT_EQ(row->key, key * 7919);
    ASSERT_EQ(row->floats()[0], static_cast<float>(key));
    ASSERT_EQ(row->floats()[3], 4.0f);
  }
  EXPECT_EQ(cache.Find(3, 1), nullptr);
}

TEST(RowCacheTest, FindManyFindsWhatFindFinds) {
  RowCache cache(size_t{1} << 30);
  // Enough keys that many share a 7-bit hash tag within a probe group.
  constexpr uint64_t kRows = 20000;
  for (uint64_t key = 0; key < kRows; ++key)
    cache.Insert(2, key * 31, kRow, false);
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 2 * kRows; ++key) keys.push_back(key * 31 + 1);
  for (uint64_t key = 0; key < kRows; ++key) keys.push_back(key * 31);
  keys.push_back(5 * 31);  // a last window of one key
  std::vector<CachedRow*> rows(keys.size());
  cache.FindMany(2, keys, absl::MakeSpan(rows), kRow.size());
  size_t found = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(rows[i], cache.Find(2, keys[i])) << keys[i];
    if (rows[i] != nullptr) {
      ASSERT_EQ(rows[i]->key, keys[i]);
      ++found;
    }
  }
  EXPECT_EQ(found, kRows + 1);
  cache.FindMany(9, keys, absl::MakeSpan(rows), 1);  // no such table
  for (CachedRow* row : rows) ASSERT_EQ(row, nullptr);
}

TEST(RowCacheTest, FindManyGivesTheRowsItFindsASecondChance) {
  RowCache cache(3 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(0, key, kRow, false);
  const std::vector<uint64_t> keys = {1, 3};
  std::vector<CachedRow*> rows(keys.size());
  cache.FindMany(0, keys, absl::MakeSpan(rows), kRow.size());
  cache.Insert(0, 4, kRow, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(cache.Find(0, 2), nullptr);
  EXPECT_NE(cache.Find(0, 1), nullptr);
  EXPECT_NE(cache.Find(0, 3), nullptr);
}

TEST(RowCacheTest, EraseTableBeforeTheHandKeepsTheHandOnItsRow) {
  RowCache cache(4 * RowCache::RowBytes(kRow.size()));
  cache.Insert(1, 1, kRow, false);
  cache.Insert(2, 1, kRow, false);
  for (uint64_t key = 1; key <= 3; ++key) cache.Insert(3, key, kRow, false);
  for (auto [table, key] :
       {std::pair<uint32_t, uint64_t>{1, 1}, {2, 1}, {3, 1}})
    ASSERT_NE(cache.Find(table, key), nullptr);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);  // (3, 2): the hand stops at table 3's entry 2
  ASSERT_EQ(cache.Find(3, 2), nullptr);
  ASSERT_EQ(cache.EraseTable(1), 1u);
  cache.Insert(3, 4, kRow, false);
  cache.Insert(2, 2, kRow, false);
  cache.EvictToBudget(&dirty);
  EXPECT_EQ(cache.Find(3, 3), nullptr);  // where the hand was
  EXPECT_NE(cache.Find(2, 1), nullptr);
}

TEST(RowCacheTest, CompactGivesBackFreeSlotsAndKeepsEveryRow) {
  RowCache cache(size_t{1} << 30);
  constexpr uint64_t kRows = 20000;  // several chunks
  std::vector<CachedRow*> rows;
  for (uint64_t key = 0; key < kRows; ++key) {
    CachedRow* row = cache.Insert(4, key, kRow, /*dirty=*/key % 3 == 0);
    row->floats()[1] = static_cast<float>(key);
    row->log_sequence = key + 100;
    row->version = static_cast<uint32_t>(key);
    row->updated_at_s = 7;
    row->push_count = static_cast<uint32_t>(key % 5);
    rows.push_back(row);
  }
  cache.Insert(5, 1, kRow, false);
  // A few free entries are kept for the next rows: nothing to do.
  cache.Erase(4, rows[5]);
  EXPECT_EQ(cache.Compact(), 0u);
  const size_t allocated = cache.allocated_entry_bytes();
  for (uint64_t key = 0; key < kRows; ++key) {
    if (key % 10 != 0 && key != 5) cache.Erase(4, rows[key]);
  }
  cache.Erase(5, cache.Find(5, 1));
  EXPECT_GT(cache.Compact(), 0u);
  EXPECT_LT(cache.allocated_entry_bytes(), allocated / 4);
  EXPECT_EQ(cache.size(), kRows / 10);
  EXPECT_EQ(cache.bytes(), kRows / 10 * RowCache::RowBytes(kRow.size()));
  for (uint64_t key = 0; key < kRows; key += 10) {
    const CachedRow* row = cache.Find(4, key);
    ASSERT_NE(row, nullptr) << key;
    EXPECT_EQ(row->floats()[1], static_cast<float>(key));
    EXPECT_EQ(row->floats()[3], 4.0f);
    EXPECT_EQ(row->dirty, key % 3 == 0);
    EXPECT_EQ(row->log_sequence, key + 100);
    EXPECT_EQ(row->version, key);
    EXPECT_EQ(row->updated_at_s, 7u);
    EXPECT_EQ(row->push_count, key % 5);
  }
  EXPECT_EQ(cache.Find(4, 11), nullptr);
  // New rows go on after the moved ones; a table with no rows left is gone.
  cache.Insert(4, 11, kRow, false);
  EXPECT_NE(cache.Find(4, 11), nullptr);
  EXPECT_EQ(cache.EraseTable(5), 0u);
  cache.EraseTable(4);
  EXPECT_EQ(cache.allocated_entry_bytes(), 0u);
}

TEST(RowCacheTest, CompactKeepsSecondChances) {
  const std::vector<float> large(8000, 1.0f);  // 2 entries a chunk
  RowCache cache(9 * RowCache::RowBytes(large.size()));
  std::vector<CachedRow*> rows;
  for (uint64_t key = 0; key < 20; ++key)
    rows.push_back(cache.Insert(0, key, large, false));
  for (uint64_t key = 0; key < 12; ++key) cache.Erase(0, rows[key]);
  ASSERT_NE(cache.Find(0, 12), nullptr);
  ASSERT_EQ(cache.Compact(), 8u);  // 12..19 move to entries 0..7
  cache.Insert(0, 100, large, false);
  cache.Insert(0, 101, large, false);
  std::vector<EvictedRow> dirty;
  cache.EvictToBudget(&dirty);
  EXPECT_NE(cache.Find(0, 12), nullptr);
  EXPECT_EQ(cache.Find(0, 13), nullptr);
}

TEST(RowCacheTest, RandomOperationsAgreeWithAMap) {
  std::mt19937_64 rng(11);
  // Rows of 1000, 8000 and 1 floats in tables 0, 1 and 2 (table 1's chunks
  // hold 2 entries). Traffic moves from table 1 to table 0 halfway, so that
  // table 1 is left with free entries for compaction to give back.
  const std::vector<size_t> row_floats = {1000, 8000, 1};
  RowCache cache(40 * RowCache::RowBytes(8000));
  size_t moved = 0;
  struct Expected {
    std::vector<float> values;
    bool dirty;
  };
  std::map<std::pair<uint32_t, uint64_t>, Expected> expected;
  for (int step = 0; step < 20000; ++step) {
    const uint32_t favourite = step < 10000 ? 1 : 0;
    const uint32_t table =
        rng() % 5 != 0 ? favourite : static_cast<uint32_t>(rng() % 3);
    const uint64_t key = rng() % 1000;
    const int op = static_cast<int>(rng() % 100);
    CachedRow* row = cache.Find(table, key);
    ASSERT_EQ(row != nullptr, expected.count({table, key}) == 1)
        << "step " << step;
    const size_t floats = row_floats[table];
    if (row != nullptr) {
      const Expected& want = expected[{table, key}];
      ASSERT_EQ(std::vector<float>(row->floats(), row->floats() + floats),
                want.values);
      ASSERT_EQ(row->dirty, want.dirty);
    }
    if (op < 50 && row == nullptr) {
      std::vector<float> values(floats, 0.5f);
      values[0] = static_cast<float>(step);
      values[floats - 1] += static_cast<float>(key);
      const bool dirty = rng() % 2 == 0;
      cache.Insert(table, key, values, dirty);
      expected[{table, key}] = Expected{values, dirty};
    } else if (op < 60 && row != nullptr) {
      cache.Erase(table, row);
      expected.erase({table, key});
    } else if (op < 80) {
      const size_t before = cache.size();
      std::vector<EvictedRow> dirty;
      cache.EvictToBudget(&dirty);
      ASSERT_LE(cache.bytes(), cache.budget_bytes());
      for (const EvictedRow& evicted : dirty) {
        auto it = expected.find({evicted.table_id, evicted.key});
        ASSERT_NE(it, expected.end());
        ASSERT_TRUE(it->second.dirty);
        ASSERT_EQ(evicted.values, it->second.values);
        expected.erase(it);
      }
      // What else left was clean.
      size_t clean_gone = 0;
      for (auto it = expected.begin(); it != expected.end();) {
        const CachedRow* kept = cache.Find(it->first.first, it->first.second);
        if (kept == nullptr) {
          ASSERT_FALSE(it->second.dirty);
          it = expected.erase(it);
          ++clean_gone;
          continue;
        }
        // Rows moved by compaction, whole (first and last float).
        const std::vector<float>& want = it->second.values;
        ASSERT_EQ(kept->floats()[0], want[0]);
        ASSERT_EQ(kept->floats()[want.size() - 1], want.back());
        ASSERT_EQ(kept->dirty, it->second.dirty);
        ++it;
      }
      ASSERT_EQ(before - cache.size(), dirty.size() + clean_gone);
    } else if (op < 90) {
      moved += cache.Compact();
    } else if (op == 99) {
      cache.EraseTable(table);
      for (auto it = expected.begin(); it != expected.end();) {
        it = it->first.first == table ? expected.erase(it) : std::next(it);
      }
    } else {
      std::vector<uint64_t> keys;
      for (int i = 0; i < 37; ++i) keys.push_back(rng() % 1000);
      std::vector<CachedRow*> rows(keys.size());
      cache.FindMany(table, keys, absl::MakeSpan(rows), floats);
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(rows[i] != nullptr, expected.count({table, keys[i]}) == 1);
        if (rows[i] != nullptr) {
          ASSERT_EQ(rows[i]->key, keys[i]);
        }
      }
    }
    ASSERT_EQ(cache.size(), expected.size());
  }
  EXPECT_GT(moved, 0u);
}

// 104 bytes counted (a 96-byte entry, 8 of index), the index's slack, and the
// tail of each 2 MiB region that no 48 KiB chunk fills (1.5 bytes a row).
TEST(RowCacheTest, ADim16SgdRowCostsAtMost112BytesOfMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are resident "
                  "beside every byte the cache allocates";
#endif
  constexpr uint64_t kRows = 1000000;
  const std::vector<float> row(16, 1.0f);
  const size_t before = ResidentBytes();
  auto cache = std::make_unique<RowCache>(size_t{1} << 40);
  for (uint64_t key = 0; key < kRows; ++key)
    cache->Insert(0, key * 7919, row, /*dirty=*/false);
  const double resident_per_row =
      static_cast<double>(ResidentBytes() - before) / kRows;
  EXPECT_LE(resident_per_row, 112.0);
  // What the budget counts is close to what the rows cost.
  EXPECT_NEAR(static_cast<double>(cache->bytes()) / kRows, resident_per_row,
              8.0);
  ASSERT_NE(cache->Find(0, 7919 * (kRows - 1)), nullptr);
}

TEST(RowCacheTest, ForEachRowFromWalksEveryRowAPartAtATime) {
  RowCache cache(1 << 20);
  for (uint64_t key = 0; key < 10; ++key) cache.Insert(0, key, kRow, false);
  for (uint64_t key = 0; key < 5; ++key) cache.Insert(3, key, {1.0f}, false);
  cache.Erase(0, cache.Find(0, 4));
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  RowCache::RowCursor cursor;
  int calls = 0;
  bool more = true;
  while (more) {
    ++calls;
    more = cache.ForEachRowFrom(
        &cursor, 4, [&](uint32_t table, CachedRow& row, absl::Span<float> v) {
          EXPECT_EQ(v.size(), table == 0 ? kRow.size() : 1u);
          seen.emplace_back(table, row.key);
        });
    // Erasing the rows just visited between parts leaves the walk intact.
    if (calls == 2) cache.Erase(0, cache.Find(0, 6));
  }
  // 15 entries (one free) in parts of 4: 4 calls.
  EXPECT_EQ(calls, 4);
  std::vector<std::pair<uint32_t, uint64_t>> expected;
  for (uint64_t key = 0; key < 10; ++key) {
    if (key != 4) expected.emplace_back(0, key);
  }
  for (uint64_t key = 0; key < 5; ++key) expected.emplace_back(3, key);
  EXPECT_EQ(seen, expected);
}

TEST(RowCacheTest, AWalkSurvivesRowsAndTablesGoingBetweenParts) {
  const std::vector<float> large(8000, 1.0f);  // 2 entries a chunk
  RowCache cache(size_t{1} << 30);
  for (uint64_t key = 0; key < 4; ++key) cache.Insert(1, key, kRow, false);
  for (uint64_t key = 0; key < 20; ++key) cache.Insert(2, key, large, false);
  RowCache::RowCursor cursor;
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  auto visit = [&](uint32_t table, CachedRow& row, absl::Span<float>) {
    seen.emplace_back(table, row.key);
  };
  ASSERT_TRUE(cache.ForEachRowFrom(&cursor, 6, visit));  // into table 2
  // Table 1 goes, rows ahead of the cursor go, and compaction moves the
  // rest down and frees chunks.
  cache.EraseTable(1);
  for (uint64_t key = 3; key < 20; ++key) {
    if (key != 15) cache.Erase(2, cache.Find(2, key));
  }
  ASSERT_GT(cache.Compact(), 0u);
  while (cache.ForEachRowFrom(&cursor, 6, visit)) {
  }
  // Every row visited was present when visited: after the first part, only
  // table 2's keys 0, 1, 2 and 15 were left.
  for (size_t i = 6; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].first, 2u);
    EXPECT_TRUE(seen[i].second <= 2 || seen[i].second == 15) << seen[i].second;
  }
}

TEST(RowCacheTest, ForEachDirtyVisitsOnlyDirtyRows) {
  RowCache cache(1 << 20);
  cache.Insert(0, 1, kRow, true);
  cache.Insert(0, 2, kRow, false);
  cache.Insert(2, 3, kRow, true);
  std::vector<uint64_t> seen;
  cache.ForEachDirty([&](uint32_t, CachedRow& row, absl::Span<float>) {
    seen.push_back(row.key);
    row.dirty = false;
  });
  EXPECT_EQ(seen.size(), 2u);
  int again = 0;
  cache.ForEachDirty([&](uint32_t, CachedRow&, absl::Span<float>) { ++again; });
  EXPECT_EQ(again, 0);
}

}  // namespace
}  // namespace ps::embedding
