// EmbeddingStore::Export: full exports and deltas (the rows changed since
// an earlier export, and deletions of the rows dropped since).

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "gtest/gtest.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"

namespace ps::embedding {
namespace {

using ::absl::StatusCode;

// An export's part: key -> weights (empty: a deletion), in file order,
// checked to be the store's order.
std::map<uint64_t, std::vector<float>> ReadPart(const std::string& path) {
  std::map<uint64_t, std::vector<float>> rows;
  rocksdb::SstFileReader reader((rocksdb::Options()));
  EXPECT_TRUE(reader.Open(path).ok()) << path;
  std::unique_ptr<rocksdb::Iterator> it(
      reader.NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    EXPECT_EQ(it->key().size(), SlotOrderedKey::kBytes);
    const uint64_t key = SlotOrderedKey::Decode(it->key().data());
    std::vector<float> row(it->value().size() / sizeof(float));
    std::memcpy(row.data(), it->value().data(), it->value().size());
    rows[key] = row;
  }
  return rows;
}

// Exports table `table` of `store` to `path` (a delta when `since` is
// set): the export's time, or its error.
absl::StatusOr<uint32_t> TryExport(
    EmbeddingStore& store, const std::string& table, const std::string& path,
    std::optional<uint32_t> since,
    EmbeddingStore::ExportTarget* written = nullptr) {
  std::vector<EmbeddingStore::ExportTarget> targets(1);
  targets[0].table = table;
  targets[0].path = path;
  EmbeddingStore::ExportOptions options;
  options.changed_since_s = since;
  absl::StatusOr<uint32_t> time = store.Export(&targets, options);
  if (written != nullptr) *written = targets[0];
  return time;
}

// TryExport(), failing the test if it fails.
uint32_t ExportTo(EmbeddingStore& store, const std::string& table,
                  const std::string& path, std::optional<uint32_t> since,
                  EmbeddingStore::ExportTarget* written = nullptr) {
  absl::StatusOr<uint32_t> time = TryExport(store, table, path, since, written);
  EXPECT_TRUE(time.ok()) << time.status();
  return time.value_or(0);
}

// Waits until the wall clock's second is past `second`, so that what is
// pushed next has a later update time than an export taken in it.
void WaitPastSecond(uint32_t second) {
  while (absl::ToUnixSeconds(absl::Now()) <= second)
    absl::SleepFor(absl::Milliseconds(20));
}

std::vector<uint64_t> Range(uint64_t begin, uint64_t end) {
  std::vector<uint64_t> keys;
  for (uint64_t key = begin; key < end; ++key) keys.push_back(key);
  return keys;
}

TEST_F(EmbeddingStoreTest, ADeltaHoldsTheRowsChangedSinceTheExportBefore) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 4)));
  ASSERT_OK(store->Push("emb", Range(0, 100), std::vector<float>(400, 1.0f)));
  // Rows updated in the export's second are in the next delta too: these
  // are not.
  WaitPastSecond(static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())));
  const std::string dir = options_.data_dir + "_exports";
  const uint32_t base_time = ExportTo(*store, "emb", dir + "/base.sst", {});
  EXPECT_EQ(ReadPart(dir + "/base.sst").size(), 100u);

  WaitPastSecond(base_time);
  ASSERT_OK(store->Push("emb", Range(50, 60), std::vector<float>(40, 0.5f)));
  ASSERT_OK(store->Push("emb", Range(200, 205), std::vector<float>(20, 2.0f)));
  EmbeddingStore::ExportTarget written;
  const uint32_t delta_time =
      ExportTo(*store, "emb", dir + "/delta.sst", base_time, &written);
  EXPECT_GE(delta_time, base_time);
  const auto delta = ReadPart(dir + "/delta.sst");
  std::vector<uint64_t> changed = Range(50, 60);
  for (uint64_t key : Range(200, 205)) changed.push_back(key);
  ASSERT_EQ(delta.size(), changed.size());
  EXPECT_EQ(written.rows, changed.size());
  EXPECT_EQ(written.deleted_rows, 0u);
  const std::vector<float> pulled = PullRows(*store, "emb", changed, 4);
  for (size_t i = 0; i < changed.size(); ++i) {
    auto found = delta.find(changed[i]);
    ASSERT_NE(found, delta.end()) << changed[i];
    EXPECT_EQ(found->second, std::vector<float>(pulled.begin() + 4 * i,
                                                pulled.begin() + 4 * i + 4))
        << changed[i];
  }
  // Nothing changed since: no file.
  WaitPastSecond(delta_time);
  EmbeddingStore::ExportTarget empty;
  ExportTo(*store, "emb", dir + "/empty.sst", delta_time + 1, &empty);
  EXPECT_EQ(empty.rows, 0u);
}

TEST_F(EmbeddingStoreTest, AnExportOfSomeSlotsWritesTheirRowsAlone) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 4)));
  const std::vector<uint64_t> keys = Range(0, 400);
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(4 * keys.size(), 1)));
  // The lower half of the slots: about half of the keys.
  std::vector<bool> slots(kNumSlots, false);
  for (uint32_t slot = 0; slot < kNumSlots / 2; ++slot) slots[slot] = true;
  std::vector<EmbeddingStore::ExportTarget> targets(1);
  targets[0].table = "emb";
  targets[0].path = options_.data_dir + "_exports/half.sst";
  EmbeddingStore::ExportOptions options;
  options.slots = slots;
  ASSERT_OK(store->Export(&targets, options).status());
  const auto rows = ReadPart(targets[0].path);
  size_t owned = 0;
  for (uint64_t key : keys) {
    const bool in_half = slots[SlotForKey(key)];
    owned += in_half;
    EXPECT_EQ(rows.count(key), in_half ? 1u : 0u) << key;
  }
  EXPECT_GT(owned, 100u);
  EXPECT_LT(owned, 300u);
  EXPECT_EQ(targets[0].rows, owned);

  options.slots = std::vector<bool>(10, true);
  EXPECT_EQ(store->Export(&targets, options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(EmbeddingStoreTest, ADeltaDeletesTheRowsThatExpiredSince) {
  // On disk, rows go after the ttl and twice the write-back interval (1 s
  // in all here): 3 s.
  options_.write_back_interval = absl::Milliseconds(500);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
  ASSERT_OK(store->Push("emb", Range(0, 10), std::vector<float>(40, 1.0f)));
  const std::string dir = options_.data_dir + "_exports";
  const uint32_t base_time = ExportTo(*store, "emb", dir + "/base.sst", {});
  EXPECT_EQ(ReadPart(dir + "/base.sst").size(), 10u);

  absl::SleepFor(absl::Seconds(4.1));
  ASSERT_OK(store->Push("emb", {100}, std::vector<float>(4, 1.0f)));
  auto expect_deletions = [&](const std::string& path) {
    const auto delta = ReadPart(path);
    ASSERT_EQ(delta.size(), 11u) << path;
    for (uint64_t key : Range(0, 10)) {
      ASSERT_TRUE(delta.count(key)) << path << " key " << key;
      EXPECT_TRUE(delta.at(key).empty()) << path << " key " << key;
    }
    EXPECT_EQ(delta.at(100).size(), 4u);
  };
  // Expired but still stored: the scan finds them.
  EmbeddingStore::ExportTarget written;
  ExportTo(*store, "emb", dir + "/delta1.sst", base_time, &written);
  EXPECT_EQ(written.deleted_rows, 10u);
  expect_deletions(dir + "/delta1.sst");
  // Compacted away: the store remembers them.
  auto expired = store->Expire("emb");
  ASSERT_OK(expired);
  EXPECT_EQ(expired->rows_on_disk, 10u);
  ExportTo(*store, "emb", dir + "/delta2.sst", base_time);
  expect_deletions(dir + "/delta2.sst");
}

TEST_F(EmbeddingStoreTest, ADeltaSinceBeforeTheStoreKnowsWhatChangedIsRefused) {
  options_.write_back_interval = absl::Milliseconds(500);
  options_.max_dropped_rows_remembered = 5;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  const std::string dir = options_.data_dir + "_exports";
  uint32_t base_time = 0;
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(spec));
    ASSERT_OK(store->Push("emb", Range(0, 10), std::vector<float>(40, 1.0f)));
    base_time = ExportTo(*store, "emb", dir + "/base.sst", {});
    // A table declared after the export (say, dropped and declared again).
    WaitPastSecond(base_time);
    ASSERT_OK(store->DeclareTable(SgdTable("later", 4)));
    EXPECT_THAT(
        TryExport(*store, "later", dir + "/later.sst", base_time).status(),
        StatusIs(StatusCode::kFailedPrecondition));
    // More rows dropped than it remembers.
    absl::SleepFor(absl::Seconds(3.1));
    ASSERT_OK(store->Expire("emb").status());
    EXPECT_THAT(TryExport(*store, "emb", dir + "/emb.sst", base_time).status(),
                StatusIs(StatusCode::kFailedPrecondition));
  }
  // Reopened: what the process before dropped is not known.
  auto store = OpenStore(options_);
  EXPECT_THAT(
      TryExport(*store, "emb", dir + "/reopened.sst", base_time).status(),
      StatusIs(StatusCode::kFailedPrecondition));
  // A full export goes on, and a delta since it.
  const uint32_t again = ExportTo(*store, "emb", dir + "/again.sst", {});
  ExportTo(*store, "emb", dir + "/after.sst", again);
}

}  // namespace
}  // namespace ps::embedding
