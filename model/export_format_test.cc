#include "model/export_format.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/routing.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"

namespace ps::model {
namespace {

// A part's rows in file order: key and stored value.
std::vector<std::pair<uint64_t, std::string>> ReadPart(
    const std::string& path) {
  std::vector<std::pair<uint64_t, std::string>> rows;
  rocksdb::SstFileReader reader((rocksdb::Options()));
  EXPECT_TRUE(reader.Open(path).ok()) << path;
  std::unique_ptr<rocksdb::Iterator> it(
      reader.NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    EXPECT_EQ(it->key().size(), SlotOrderedKey::kBytes);
    rows.emplace_back(SlotOrderedKey::Decode(it->key().data()),
                      it->value().ToString());
  }
  return rows;
}

// Keys in the store's order.
std::vector<uint64_t> OrderedKeys(int count) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < count; ++i) keys.push_back(1000 + 7919 * i);
  std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) {
    return std::make_pair(SlotForKey(a), a) < std::make_pair(SlotForKey(b), b);
  });
  return keys;
}

std::string TempPath(const std::string& name) {
  return std::string(::testing::TempDir()) + "/export_format_test/" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" +
         name;
}

TEST(ExportFormatTest, RowsAndDeletionsReadBackInOrder) {
  for (bool half : {false, true}) {
    const std::string path = TempPath(half ? "half.sst" : "float.sst");
    ExportTableWriter writer(path, half);
    const std::vector<uint64_t> keys = OrderedKeys(50);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i % 10 == 3) {
        ASSERT_OK(writer.Delete(keys[i]));
      } else {
        const std::vector<float> row = {0.5f * i, -1.25f, 3.0f};
        ASSERT_OK(writer.Put(keys[i], row));
      }
    }
    ASSERT_OK(writer.Finish());
    EXPECT_EQ(writer.rows(), 50u);
    EXPECT_EQ(writer.deleted_rows(), 5u);
    EXPECT_EQ(writer.bytes(), std::filesystem::file_size(path));

    const auto rows = ReadPart(path);
    ASSERT_EQ(rows.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(rows[i].first, keys[i]);
      if (i % 10 == 3) {
        EXPECT_TRUE(rows[i].second.empty()) << i;
        continue;
      }
      ASSERT_EQ(rows[i].second.size(), ExportRowBytes(3, half));
      float row[3];
      DecodeExportRow(rows[i].second, half, 3, row);
      // 0.5 * i, -1.25 and 3 are exact in half precision too.
      EXPECT_EQ(row[0], 0.5f * i);
      EXPECT_EQ(row[1], -1.25f);
      EXPECT_EQ(row[2], 3.0f);
    }
  }
}

TEST(ExportFormatTest, HalfRoundsToTheNearestHalf) {
  // Halves near 1 are 1/1024 apart: 1 + 0.75/1024 rounds up to 1 + 1/1024,
  // where truncating would give 1.
  std::string value;
  EncodeExportRow(std::vector<float>{1.0f + 0.75f / 1024}, /*half=*/true,
                  &value);
  ASSERT_EQ(value.size(), 2u);
  float row;
  DecodeExportRow(value, /*half=*/true, 1, &row);
  EXPECT_EQ(row, 1.0f + 1.0f / 1024);
}

TEST(ExportFormatTest, APartWithNoRowHasNoFile) {
  const std::string path = TempPath("empty/part.sst");
  ExportTableWriter writer(path, false);
  ASSERT_OK(writer.Finish());
  EXPECT_EQ(writer.rows(), 0u);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ExportFormatTest, AWriterNeverFinishedLeavesNoFile) {
  const std::string path = TempPath("abandoned.sst");
  {
    ExportTableWriter writer(path, false);
    ASSERT_OK(writer.Put(42, std::vector<float>{1.0f}));
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ExportFormatTest, AKeyOutOfTheStoresOrderIsRefused) {
  const std::vector<uint64_t> keys = OrderedKeys(2);
  ExportTableWriter writer(TempPath("order.sst"), false);
  const std::vector<float> row = {1.0f};
  ASSERT_OK(writer.Put(keys[1], row));
  EXPECT_EQ(writer.Put(keys[0], row).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Delete(keys[1]).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.rows(), 1u);
  EXPECT_EQ(writer.deleted_rows(), 0u);
}

}  // namespace
}  // namespace ps::model
