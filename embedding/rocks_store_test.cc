// RocksStore's own behaviour that the stores above it do not show.

#include "embedding/rocks_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"
#include "rocksdb/perf_context.h"
#include "rocksdb/perf_level.h"

namespace ps::embedding {
namespace {

// RocksDB counts key comparisons in a per-thread context unless told not
// to; the store's writes and reads turn that off on their thread (its
// cost showed in a training shard's profile).
TEST(RocksStoreTest, WritesAndReadsCountNothingInRocksDbsPerfContext) {
  RocksStoreOptions options;
  options.path = FreshTestDir("rocks_store") + "/db";
  absl::StatusOr<std::unique_ptr<RocksStore>> opened =
      RocksStore::Open(options);
  ASSERT_OK(opened);
  std::unique_ptr<RocksStore> rocks = *std::move(opened);
  TableSpec spec;
  spec.set_name("t");
  spec.set_dim(2);
  absl::StatusOr<TableId> table = rocks->CreateTable(spec);
  ASSERT_OK(table);

  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  RocksStore::Batch batch = rocks->NewBatch();
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 100; ++key) {
    const float row[3] = {static_cast<float>(key), 0.0f, 0.5f};
    batch.Put(*table, key * 7919, row, LogPosition(), {1, 1});
    keys.push_back(key * 7919);
  }
  ASSERT_OK(rocks->Write(&batch));
  EXPECT_EQ(rocksdb::GetPerfLevel(), rocksdb::PerfLevel::kDisable);
  EXPECT_EQ(rocksdb::get_perf_context()->user_key_comparison_count, 0u);

  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_OK(rocks->MultiGet(*table, keys, &values, &found));
  EXPECT_EQ(std::count(found.begin(), found.end(), true), 100);
  EXPECT_EQ(rocksdb::GetPerfLevel(), rocksdb::PerfLevel::kDisable);
  EXPECT_EQ(rocksdb::get_perf_context()->user_key_comparison_count, 0u);

  for (bool from_a_snapshot : {true, false}) {
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
    rocksdb::get_perf_context()->Reset();
    size_t scanned = 0;
    if (from_a_snapshot) {
      std::unique_ptr<RocksStore::Snapshot> snapshot = rocks->GetSnapshot();
      ASSERT_OK(
          rocks->Scan(*table, *snapshot, [&](uint64_t, absl::string_view) {
            ++scanned;
            return absl::OkStatus();
          }));
    } else {
      ASSERT_OK(rocks->ScanFrom(
          *table, std::nullopt,
          [&](uint64_t, absl::string_view) -> absl::StatusOr<bool> {
            ++scanned;
            return true;
          }));
    }
    EXPECT_EQ(scanned, 100u);
    EXPECT_EQ(rocksdb::GetPerfLevel(), rocksdb::PerfLevel::kDisable)
        << from_a_snapshot;
    EXPECT_EQ(rocksdb::get_perf_context()->user_key_comparison_count, 0u)
        << from_a_snapshot;
  }
}

}  // namespace
}  // namespace ps::embedding
