// Rows moved between two stores by slot: read page by page from one,
// written into the other (weights, optimizer state and expiry metadata
// alike), durable there across a reopen and its push-log replay, and
// deleted from the first.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "base/routing.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

constexpr uint32_t kDim = 3;
constexpr uint32_t kFirstSlot = 0;
constexpr uint32_t kLastSlot = 8191;

TableSpec AdagradTable() {
  TableSpec spec = SgdTable("t", kDim, 0.5f);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  return spec;
}

bool InMove(uint32_t slot) { return slot >= kFirstSlot && slot <= kLastSlot; }
bool Moving(uint64_t key) { return InMove(SlotForKey(key)); }

// Every row of table "t" in the slots, read `page` rows at a time.
std::vector<SlotRow> ReadAll(EmbeddingStore& store, size_t page) {
  std::vector<SlotRow> all;
  std::optional<uint64_t> after;
  bool done = false;
  while (!done) {
    absl::StatusOr<std::vector<SlotRow>> rows =
        store.ReadSlotRows("t", InMove, after, page, &done);
    EXPECT_OK(rows);
    if (!rows.ok()) break;
    EXPECT_LE(rows->size(), page);
    if (!rows->empty()) after = rows->back().key;
    for (SlotRow& row : *rows) all.push_back(std::move(row));
  }
  return all;
}

// Weights and optimizer state of `keys`.
std::vector<float> RowsWithState(EmbeddingStore& store,
                                 const std::vector<uint64_t>& keys) {
  std::vector<float> rows(keys.size() * 2 * kDim);
  EXPECT_OK(store.PullWithState("t", keys, absl::MakeSpan(rows)));
  return rows;
}

class SlotRowsTest : public EmbeddingStoreTest {
 protected:
  void SetUp() override {
    EmbeddingStoreTest::SetUp();
    target_options_ = options_;
    target_options_.data_dir = options_.data_dir + "_target";
    std::filesystem::remove_all(target_options_.data_dir);
  }
  StoreOptions target_options_;
};

TEST_F(SlotRowsTest, RowsMoveWholeAndStayDurableWhereTheyGo) {
  std::unique_ptr<EmbeddingStore> source = OpenStore(options_);
  ASSERT_OK(source->DeclareTable(AdagradTable()));
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 300; ++key) keys.push_back(key * 7);
  std::vector<float> gradients(keys.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) gradients[i] = 0.01f * (i % 17);
  ASSERT_OK(source->Push("t", keys, gradients));
  ASSERT_OK(source->Push("t", keys, gradients));
  ASSERT_OK(source->Flush());
  std::vector<uint64_t> moving;
  std::vector<uint64_t> staying;
  for (uint64_t key : keys) (Moving(key) ? moving : staying).push_back(key);
  ASSERT_FALSE(moving.empty());
  ASSERT_FALSE(staying.empty());

  std::vector<SlotRow> read = ReadAll(*source, 16);
  ASSERT_EQ(read.size(), moving.size());
  for (const SlotRow& row : read) {
    EXPECT_TRUE(Moving(row.key));
    EXPECT_EQ(row.meta.push_count, 2u);
    EXPECT_NE(row.meta.updated_at_s, 0u);
  }
  {
    // A hot tier of one stripe that holds almost nothing: rows go to disk
    // as soon as they are touched.
    StoreOptions tiny = target_options_;
    tiny.cache_bytes = 1;
    tiny.num_stripes = 1;
    std::unique_ptr<EmbeddingStore> target = OpenStore(tiny);
    ASSERT_OK(target->DeclareTable(AdagradTable()));
    // Stale pushes of moving keys on the target (slots it owned once), out
    // of memory by now but in its push log: the moved rows replace them,
    // and a replay does not apply their records to them.
    const std::vector<uint64_t> stale(moving.begin(), moving.begin() + 4);
    ASSERT_OK(target->Push("t", stale,
                           std::vector<float>(stale.size() * kDim, 5.0f)));
    ASSERT_OK(target->WriteSlotRows("t", read));
    EXPECT_EQ(RowsWithState(*target, moving), RowsWithState(*source, moving));
    // What a move does before its switch.
    ASSERT_OK(target->Flush());
    std::vector<float> weights;
    bool stored = true;
    ASSERT_OK(target->GetRow("t", staying[0], &weights, &stored));
    EXPECT_FALSE(stored);
  }
  // Reopened (its push log replayed): the same rows and metadata.
  std::unique_ptr<EmbeddingStore> target = OpenStore(target_options_);
  EXPECT_EQ(RowsWithState(*target, moving), RowsWithState(*source, moving));
  EXPECT_EQ(RowsWithState(*target, moving), RowsWithState(*source, moving));
  ASSERT_OK(target->Flush());
  std::vector<SlotRow> again = ReadAll(*target, 1000);
  ASSERT_EQ(again.size(), read.size());
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(again[i].key, read[i].key);
    EXPECT_EQ(again[i].floats, read[i].floats);
    EXPECT_EQ(again[i].meta.push_count, read[i].meta.push_count);
    EXPECT_EQ(again[i].meta.updated_at_s, read[i].meta.updated_at_s);
  }

  // The source lets the moved rows go, in memory and on disk.
  absl::StatusOr<uint64_t> deleted = source->DeleteSlotRows(InMove);
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, moving.size());
  for (uint64_t key : moving) {
    std::vector<float> weights;
    bool stored = true;
    ASSERT_OK(source->GetRow("t", key, &weights, &stored));
    EXPECT_FALSE(stored) << key;
  }
  bool stored = false;
  std::vector<float> weights;
  ASSERT_OK(source->GetRow("t", staying[0], &weights, &stored));
  EXPECT_TRUE(stored);
  source.reset();
  source = OpenStore(options_);
  EXPECT_TRUE(ReadAll(*source, 1000).empty());
}

TEST_F(SlotRowsTest, WrittenRowsSurviveAProcessKilledRightAfter) {
  std::unique_ptr<EmbeddingStore> source = OpenStore(options_);
  ASSERT_OK(source->DeclareTable(AdagradTable()));
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 100; ++key) keys.push_back(key);
  ASSERT_OK(
      source->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.3f)));
  ASSERT_OK(source->Flush());
  const std::vector<SlotRow> read = ReadAll(*source, 1000);
  ASSERT_FALSE(read.empty());
  target_options_.durability = Durability::kWal;
  target_options_.write_back_interval = absl::Hours(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child exits without closing the store, as if killed, once the
  // write returned.
  EXPECT_EXIT(
      {
        auto target = OpenStore(target_options_);
        if (!target->DeclareTable(AdagradTable()).ok()) std::_Exit(1);
        if (!target->WriteSlotRows("t", read).ok()) std::_Exit(2);
        if (!target->Flush().ok()) std::_Exit(3);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  std::unique_ptr<EmbeddingStore> target = OpenStore(target_options_);
  std::vector<uint64_t> moved;
  for (const SlotRow& row : read) moved.push_back(row.key);
  EXPECT_EQ(RowsWithState(*target, moved), RowsWithState(*source, moved));
}

// Rows read by key are as they are now, in the hot tier or only on disk,
// with their optimizer state and metadata.
TEST_F(SlotRowsTest, RowsOfKeysAreTheNewest) {
  // In the hot tier only: nothing of them is on disk yet.
  std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(AdagradTable()));
  ASSERT_OK(store->Push("t", {1, 2}, std::vector<float>(2 * kDim, 0.5f)));
  bool done = false;
  absl::StatusOr<std::vector<SlotRow>> on_disk = store->ReadSlotRows(
      "t", [](uint32_t) { return true; }, std::nullopt, 100, &done);
  ASSERT_OK(on_disk);
  EXPECT_TRUE(on_disk->empty());
  absl::StatusOr<std::vector<SlotRow>> hot = store->ReadRowsOfKeys("t", {2, 1});
  ASSERT_OK(hot);
  ASSERT_EQ(hot->size(), 2u);
  EXPECT_EQ((*hot)[0].key, 1u);
  EXPECT_EQ((*hot)[0].meta.push_count, 1u);
  const std::vector<uint64_t> first = {1};
  EXPECT_EQ(RowsWithState(*store, first), (*hot)[0].floats);
  store.reset();

  // Only on disk: read from there.
  StoreOptions tiny = target_options_;
  tiny.cache_bytes = 1;  // rows leave the hot tier at once
  store = OpenStore(tiny);
  ASSERT_OK(store->DeclareTable(AdagradTable()));
  const std::vector<uint64_t> keys = {3, 1, 2};
  ASSERT_OK(
      store->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.5f)));
  ASSERT_OK(store->Push("t", {1}, std::vector<float>(kDim, 0.25f)));
  absl::StatusOr<std::vector<SlotRow>> rows =
      store->ReadRowsOfKeys("t", {2, 1, 99, 3});
  ASSERT_OK(rows);
  ASSERT_EQ(rows->size(), 3u);  // 99 has no row
  EXPECT_EQ((*rows)[0].key, 1u);
  EXPECT_EQ((*rows)[1].key, 2u);
  EXPECT_EQ((*rows)[2].key, 3u);
  EXPECT_EQ((*rows)[0].meta.push_count, 2u);
  EXPECT_EQ((*rows)[1].meta.push_count, 1u);
  const std::vector<uint64_t> one = {1};
  EXPECT_EQ(RowsWithState(*store, one), (*rows)[0].floats);
  EXPECT_EQ(store->ReadRowsOfKeys("missing", {1}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SlotRowsTest, RowsOfAnotherSizeAreRefused) {
  std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(AdagradTable()));
  SlotRow row;
  row.key = 1;
  row.floats.assign(kDim, 1.0f);  // no optimizer state
  EXPECT_THAT(store->WriteSlotRows("t", {row}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store->WriteSlotRows("missing", {}),
              StatusIs(absl::StatusCode::kNotFound));
  bool done = false;
  EXPECT_THAT(store->ReadSlotRows("missing", InMove, std::nullopt, 1, &done),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace ps::embedding
