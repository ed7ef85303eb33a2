// Rows moved between two stores by slot: read page by page from one,
// written into the other (weights, optimizer state and expiry metadata
// alike; through the hot tier or ingested as an SST file), durable there
// across a reopen and its push-log replay, and deleted from the first.
// Rows are stored by slot: ranges of slots read and delete exactly their
// rows, and a store written before (8-byte keys) is upgraded in place or,
// read-only, still restores.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "base/routing.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/restore.h"
#include "embedding/rocks_store.h"
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
        store.slots().ReadSlotRows("t", InMove, after, page, &done);
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
  ASSERT_OK(source->tables().DeclareTable(AdagradTable()));
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
    ASSERT_OK(target->tables().DeclareTable(AdagradTable()));
    // Stale pushes of moving keys on the target (slots it owned once), out
    // of memory by now but in its push log: the moved rows replace them,
    // and a replay does not apply their records to them.
    const std::vector<uint64_t> stale(moving.begin(), moving.begin() + 4);
    ASSERT_OK(target->Push("t", stale,
                           std::vector<float>(stale.size() * kDim, 5.0f)));
    ASSERT_OK(target->slots().WriteSlotRows("t", read));
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
  absl::StatusOr<uint64_t> deleted = source->slots().DeleteSlotRows(InMove);
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
  ASSERT_OK(source->tables().DeclareTable(AdagradTable()));
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
        if (!target->tables().DeclareTable(AdagradTable()).ok()) std::_Exit(1);
        if (!target->slots().WriteSlotRows("t", read).ok()) std::_Exit(2);
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
  ASSERT_OK(store->tables().DeclareTable(AdagradTable()));
  ASSERT_OK(store->Push("t", {1, 2}, std::vector<float>(2 * kDim, 0.5f)));
  bool done = false;
  absl::StatusOr<std::vector<SlotRow>> on_disk = store->slots().ReadSlotRows(
      "t", [](uint32_t) { return true; }, std::nullopt, 100, &done);
  ASSERT_OK(on_disk);
  EXPECT_TRUE(on_disk->empty());
  absl::StatusOr<std::vector<SlotRow>> hot =
      store->slots().ReadRowsOfKeys("t", {2, 1});
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
  ASSERT_OK(store->tables().DeclareTable(AdagradTable()));
  const std::vector<uint64_t> keys = {3, 1, 2};
  ASSERT_OK(
      store->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.5f)));
  ASSERT_OK(store->Push("t", {1}, std::vector<float>(kDim, 0.25f)));
  absl::StatusOr<std::vector<SlotRow>> rows =
      store->slots().ReadRowsOfKeys("t", {2, 1, 99, 3});
  ASSERT_OK(rows);
  ASSERT_EQ(rows->size(), 3u);  // 99 has no row
  EXPECT_EQ((*rows)[0].key, 1u);
  EXPECT_EQ((*rows)[1].key, 2u);
  EXPECT_EQ((*rows)[2].key, 3u);
  EXPECT_EQ((*rows)[0].meta.push_count, 2u);
  EXPECT_EQ((*rows)[1].meta.push_count, 1u);
  const std::vector<uint64_t> one = {1};
  EXPECT_EQ(RowsWithState(*store, one), (*rows)[0].floats);
  EXPECT_EQ(store->slots().ReadRowsOfKeys("missing", {1}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SlotRowsTest, RowsOfAnotherSizeAreRefused) {
  std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(AdagradTable()));
  SlotRow row;
  row.key = 1;
  row.floats.assign(kDim, 1.0f);  // no optimizer state
  EXPECT_THAT(store->slots().WriteSlotRows("t", {row}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store->slots().WriteSlotRows("missing", {}),
              StatusIs(absl::StatusCode::kNotFound));
  bool done = false;
  EXPECT_THAT(
      store->slots().ReadSlotRows("missing", InMove, std::nullopt, 1, &done),
      StatusIs(absl::StatusCode::kNotFound));
}

// Slots in several ranges, one of a single slot, the first and last
// slot included.
bool InScatteredRanges(uint32_t slot) {
  return slot % 3 == 0 || (slot >= 100 && slot < 400) || slot == kNumSlots - 1;
}

TEST_F(SlotRowsTest, RangesOfSlotsReadAndDeleteExactlyTheirRows) {
  std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(AdagradTable()));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 30000; ++key) keys.push_back(key * 1000003);
  // Rows in the first and the last slot, the bounds of the key ranges.
  bool first_slot = false, last_slot = false;
  for (uint64_t key = 1; !(first_slot && last_slot); ++key) {
    const uint32_t slot = SlotForKey(key);
    if ((slot == 0 && !first_slot) || (slot == kNumSlots - 1 && !last_slot)) {
      keys.push_back(key);
      (slot == 0 ? first_slot : last_slot) = true;
    }
  }
  ASSERT_OK(
      store->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.2f)));
  ASSERT_OK(store->Flush());
  std::vector<uint64_t> expected;
  for (uint64_t key : keys)
    if (InScatteredRanges(SlotForKey(key))) expected.push_back(key);
  ASSERT_GT(expected.size(), 100u);
  ASSERT_LT(expected.size(), keys.size() / 2);
  // In slot order, then key order, each once, across pages of 7.
  std::sort(expected.begin(), expected.end(), [](uint64_t a, uint64_t b) {
    return std::make_pair(SlotForKey(a), a) < std::make_pair(SlotForKey(b), b);
  });
  std::vector<uint64_t> read;
  std::optional<uint64_t> after;
  bool done = false;
  while (!done) {
    absl::StatusOr<std::vector<SlotRow>> rows =
        store->slots().ReadSlotRows("t", InScatteredRanges, after, 7, &done);
    ASSERT_OK(rows);
    ASSERT_LE(rows->size(), 7u);
    for (const SlotRow& row : *rows) read.push_back(row.key);
    if (!rows->empty()) after = rows->back().key;
  }
  EXPECT_EQ(read, expected);

  absl::StatusOr<uint64_t> deleted =
      store->slots().DeleteSlotRows(InScatteredRanges);
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, expected.size());
  store.reset();
  store = OpenStore(options_);
  for (uint64_t key : keys) {
    std::vector<float> weights;
    bool stored = false;
    ASSERT_OK(store->GetRow("t", key, &weights, &stored));
    EXPECT_EQ(stored, !InScatteredRanges(SlotForKey(key))) << key;
  }
}

TEST_F(SlotRowsTest, IngestedRowsReplaceTheHotTiersCopiesAndStay) {
  std::unique_ptr<EmbeddingStore> source = OpenStore(options_);
  ASSERT_OK(source->tables().DeclareTable(AdagradTable()));
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 200; ++key) keys.push_back(key);
  ASSERT_OK(
      source->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.4f)));
  ASSERT_OK(source->Flush());
  const std::vector<SlotRow> read = ReadAll(*source, 1000);
  ASSERT_GT(read.size(), 10u);
  std::vector<uint64_t> moved;
  for (const SlotRow& row : read) moved.push_back(row.key);
  {
    target_options_.durability = Durability::kWal;
    std::unique_ptr<EmbeddingStore> target = OpenStore(target_options_);
    ASSERT_OK(target->tables().DeclareTable(AdagradTable()));
    // Copies in the hot tier, dirty and clean (an earlier move that did
    // not finish): the ingested rows win over both.
    ASSERT_OK(target->Push("t", {moved[0], moved[1]},
                           std::vector<float>(2 * kDim, 9.0f)));
    ASSERT_OK(target->Flush());
    ASSERT_OK(target->Push("t", {moved[0]}, std::vector<float>(kDim, 3.0f)));
    // Rows in another order than read: the store sorts them.
    std::vector<SlotRow> shuffled(read.rbegin(), read.rend());
    ASSERT_OK(target->slots().IngestSlotRows("t", shuffled));
    EXPECT_EQ(RowsWithState(*target, moved), RowsWithState(*source, moved));
    std::vector<SlotRow> twice = {read[0], read[0]};
    EXPECT_THAT(target->slots().IngestSlotRows("t", twice),
                StatusIs(absl::StatusCode::kInvalidArgument));
    SlotRow short_row = read[0];
    short_row.floats.pop_back();
    EXPECT_THAT(target->slots().IngestSlotRows("t", {short_row}),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(target->slots().IngestSlotRows("missing", read),
                StatusIs(absl::StatusCode::kNotFound));
    // A refused ingestion leaves the hot tier as it was.
    std::vector<SlotRow> with_twice = {read[0], read[1], read[0]};
    const std::vector<uint64_t> first = {moved[0]};
    const std::vector<float> before = RowsWithState(*target, first);
    ASSERT_OK(target->Push("t", first, std::vector<float>(kDim, 1.0f)));
    const std::vector<float> pushed = RowsWithState(*target, first);
    ASSERT_NE(pushed, before);
    EXPECT_THAT(target->slots().IngestSlotRows("t", with_twice),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(RowsWithState(*target, first), pushed);
  }
  // Ingested by a process killed right after (no flush, no close): durable
  // by themselves.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::filesystem::remove_all(target_options_.data_dir);
  EXPECT_EXIT(
      {
        auto target = OpenStore(target_options_);
        if (!target->tables().DeclareTable(AdagradTable()).ok()) std::_Exit(1);
        if (!target->slots().IngestSlotRows("t", read).ok()) std::_Exit(2);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  std::unique_ptr<EmbeddingStore> target = OpenStore(target_options_);
  EXPECT_EQ(RowsWithState(*target, moved), RowsWithState(*source, moved));
  const std::vector<SlotRow> again = ReadAll(*target, 1000);
  ASSERT_EQ(again.size(), read.size());
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(again[i].key, read[i].key);
    EXPECT_EQ(again[i].meta.push_count, read[i].meta.push_count);
  }
}

TEST_F(SlotRowsTest, AStoreKeyedBeforeSlotsIsUpgradedInPlace) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 500; ++key) keys.push_back(key * 7919);
  std::vector<float> rows;
  {
    std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(AdagradTable()));
    ASSERT_OK(store->tables().DeclareTable(SgdTable("other", 2)));
    ASSERT_OK(
        store->Push("t", keys, std::vector<float>(keys.size() * kDim, 0.3f)));
    ASSERT_OK(
        store->Push("other", keys, std::vector<float>(keys.size() * 2, 0.1f)));
    ASSERT_OK(store->Flush());
    rows = RowsWithState(*store, keys);
  }
  // Every other row under its old key: an upgrade stopped part-way.
  ASSERT_TRUE(StoreRowsUnderOldKeys(options_.data_dir, 2));

  // Read-only (a checkpoint's part), such a store is only scanned: what a
  // restore does with a checkpoint of an older version.
  {
    RocksStoreOptions part;
    part.path = options_.data_dir;
    part.read_only = true;
    absl::StatusOr<std::unique_ptr<RocksStore>> opened = RocksStore::Open(part);
    ASSERT_OK(opened);
    const TableId id = (*opened)->opened_tables()[0].id;
    std::vector<std::string> values;
    std::vector<bool> found;
    EXPECT_THAT((*opened)->MultiGet(id, {keys[0]}, &values, &found),
                StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  RestoreOptions restore;
  restore.parts = {options_.data_dir};
  restore.tables = {AdagradTable()};
  restore.keep = [](uint64_t, size_t) { return true; };
  restore.store = target_options_;
  absl::StatusOr<RestoreStats> restored = RestoreRows(restore);
  ASSERT_OK(restored);
  EXPECT_EQ(restored->rows_kept, keys.size());
  {
    std::unique_ptr<EmbeddingStore> target = OpenStore(target_options_);
    EXPECT_EQ(RowsWithState(*target, keys), rows);
  }

  // Opened to write, it is upgraded: the same rows, read by slot.
  {
    std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
    EXPECT_EQ(RowsWithState(*store, keys), rows);
    size_t in_move = 0;
    for (uint64_t key : keys) in_move += Moving(key);
    EXPECT_EQ(ReadAll(*store, 64).size(), in_move);
  }
  // No row is left under an old key, and the format is recorded.
  size_t old_keys = 0;
  size_t new_keys = 0;
  bool format_recorded = false;
  ASSERT_TRUE(EditRocksDb(
      options_.data_dir,
      [&](rocksdb::DB* db, const auto& names, const auto& handles) {
        std::string format;
        format_recorded =
            db->Get(rocksdb::ReadOptions(), "row_key_format", &format).ok();
        for (size_t f = 0; f < names.size(); ++f) {
          if (names[f].rfind("table.", 0) != 0) continue;
          std::unique_ptr<rocksdb::Iterator> it(
              db->NewIterator(rocksdb::ReadOptions(), handles[f]));
          for (it->SeekToFirst(); it->Valid(); it->Next())
            (it->key().size() == 8 ? old_keys : new_keys)++;
        }
        return true;
      }));
  EXPECT_TRUE(format_recorded);
  EXPECT_EQ(old_keys, 0u);
  EXPECT_EQ(new_keys, 2 * keys.size());
}

}  // namespace
}  // namespace ps::embedding
