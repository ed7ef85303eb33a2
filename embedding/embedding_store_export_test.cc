// StoreSnapshots::Export: full exports and deltas (the rows changed since
// an earlier export, and deletions of the rows dropped since).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

using ::absl::StatusCode;

// An export's rows of one table as the store gives them: key -> weights
// (empty: a deletion), checked to come in the store's order.
class Part : public StoreSnapshots::ExportSink {
 public:
  absl::Status Put(uint64_t key, absl::Span<const float> row) override {
    InOrder(key);
    rows_[key].assign(row.begin(), row.end());
    return absl::OkStatus();
  }
  absl::Status Delete(uint64_t key) override {
    InOrder(key);
    rows_[key].clear();
    ++deleted_;
    return absl::OkStatus();
  }
  const std::map<uint64_t, std::vector<float>>& rows() const { return rows_; }
  size_t deleted() const { return deleted_; }

 private:
  void InOrder(uint64_t key) {
    const std::pair<uint32_t, uint64_t> here(SlotForKey(key), key);
    EXPECT_TRUE(!last_.has_value() || *last_ < here) << "key " << key;
    last_ = here;
  }
  std::map<uint64_t, std::vector<float>> rows_;
  size_t deleted_ = 0;
  std::optional<std::pair<uint32_t, uint64_t>> last_;
};

// Exports table `table` of `store` into `part` (a delta when `since` is
// set): the export's time, or its error.
absl::StatusOr<uint32_t> TryExport(EmbeddingStore& store,
                                   const std::string& table,
                                   std::optional<uint32_t> since, Part* part) {
  StoreSnapshots::ExportOptions options;
  options.changed_since_s = since;
  return store.snapshots().Export({{table, part}}, options);
}

// TryExport(), failing the test if it fails.
uint32_t ExportTo(EmbeddingStore& store, const std::string& table,
                  std::optional<uint32_t> since, Part* part) {
  absl::StatusOr<uint32_t> time = TryExport(store, table, since, part);
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
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 4)));
  ASSERT_OK(store->Push("emb", Range(0, 100), std::vector<float>(400, 1.0f)));
  // Rows updated in the export's second are in the next delta too: these
  // are not.
  WaitPastSecond(static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())));
  Part base;
  const uint32_t base_time = ExportTo(*store, "emb", {}, &base);
  EXPECT_EQ(base.rows().size(), 100u);

  WaitPastSecond(base_time);
  ASSERT_OK(store->Push("emb", Range(50, 60), std::vector<float>(40, 0.5f)));
  ASSERT_OK(store->Push("emb", Range(200, 205), std::vector<float>(20, 2.0f)));
  Part written;
  const uint32_t delta_time = ExportTo(*store, "emb", base_time, &written);
  EXPECT_GE(delta_time, base_time);
  const auto& delta = written.rows();
  std::vector<uint64_t> changed = Range(50, 60);
  for (uint64_t key : Range(200, 205)) changed.push_back(key);
  ASSERT_EQ(delta.size(), changed.size());
  EXPECT_EQ(written.deleted(), 0u);
  const std::vector<float> pulled = PullRows(*store, "emb", changed, 4);
  for (size_t i = 0; i < changed.size(); ++i) {
    auto found = delta.find(changed[i]);
    ASSERT_NE(found, delta.end()) << changed[i];
    EXPECT_EQ(found->second, std::vector<float>(pulled.begin() + 4 * i,
                                                pulled.begin() + 4 * i + 4))
        << changed[i];
  }
  // Nothing changed since: no row.
  WaitPastSecond(delta_time);
  Part empty;
  ExportTo(*store, "emb", delta_time + 1, &empty);
  EXPECT_TRUE(empty.rows().empty());
}

TEST_F(EmbeddingStoreTest, AnExportOfSomeSlotsWritesTheirRowsAlone) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 4)));
  const std::vector<uint64_t> keys = Range(0, 400);
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(4 * keys.size(), 1)));
  // The lower half of the slots: about half of the keys.
  std::vector<bool> slots(kNumSlots, false);
  for (uint32_t slot = 0; slot < kNumSlots / 2; ++slot) slots[slot] = true;
  Part part;
  StoreSnapshots::ExportOptions options;
  options.slots = slots;
  ASSERT_OK(store->snapshots().Export({{"emb", &part}}, options).status());
  const auto& rows = part.rows();
  size_t owned = 0;
  for (uint64_t key : keys) {
    const bool in_half = slots[SlotForKey(key)];
    owned += in_half;
    EXPECT_EQ(rows.count(key), in_half ? 1u : 0u) << key;
  }
  EXPECT_GT(owned, 100u);
  EXPECT_LT(owned, 300u);
  EXPECT_EQ(rows.size(), owned);

  options.slots = std::vector<bool>(10, true);
  Part refused;
  EXPECT_EQ(
      store->snapshots().Export({{"emb", &refused}}, options).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(store->snapshots().Export({{"emb", nullptr}}, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(EmbeddingStoreTest, ADeltaDeletesTheRowsThatExpiredSince) {
  // On disk, rows go after the ttl and twice the write-back interval (1 s
  // in all here): 3 s.
  options_.write_back_interval = absl::Milliseconds(500);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  ASSERT_OK(store->Push("emb", Range(0, 10), std::vector<float>(40, 1.0f)));
  Part base;
  const uint32_t base_time = ExportTo(*store, "emb", {}, &base);
  EXPECT_EQ(base.rows().size(), 10u);

  absl::SleepFor(absl::Seconds(4.1));
  ASSERT_OK(store->Push("emb", {100}, std::vector<float>(4, 1.0f)));
  auto expect_deletions = [&](const Part& part) {
    const auto& delta = part.rows();
    ASSERT_EQ(delta.size(), 11u);
    for (uint64_t key : Range(0, 10)) {
      ASSERT_TRUE(delta.count(key)) << "key " << key;
      EXPECT_TRUE(delta.at(key).empty()) << "key " << key;
    }
    EXPECT_EQ(delta.at(100).size(), 4u);
    EXPECT_EQ(part.deleted(), 10u);
  };
  // Expired but still stored: the scan finds them.
  Part delta1;
  ExportTo(*store, "emb", base_time, &delta1);
  expect_deletions(delta1);
  // Compacted away: the store remembers them.
  auto expired = store->tables().Expire("emb");
  ASSERT_OK(expired);
  EXPECT_EQ(expired->rows_on_disk, 10u);
  Part delta2;
  ExportTo(*store, "emb", base_time, &delta2);
  expect_deletions(delta2);
}

TEST_F(EmbeddingStoreTest, ADeltaOfSomeSlotsDeletesTheirRowsAlone) {
  options_.write_back_interval = absl::Milliseconds(500);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  const std::vector<uint64_t> keys = Range(0, 60);
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(4 * keys.size(), 1)));
  Part base;
  const uint32_t base_time = ExportTo(*store, "emb", {}, &base);
  ASSERT_EQ(base.rows().size(), keys.size());
  absl::SleepFor(absl::Seconds(4.1));

  std::vector<bool> slots(kNumSlots, false);
  for (uint32_t slot = 0; slot < kNumSlots / 2; ++slot) slots[slot] = true;
  size_t owned = 0;
  for (uint64_t key : keys) owned += slots[SlotForKey(key)];
  ASSERT_GT(owned, 10u);
  ASSERT_LT(owned, keys.size() - 10);
  StoreSnapshots::ExportOptions options;
  options.changed_since_s = base_time;
  options.slots = slots;
  auto expect_owned_deletions = [&](const Part& part, const char* when) {
    EXPECT_EQ(part.deleted(), owned) << when;
    EXPECT_EQ(part.rows().size(), owned) << when;
    for (const auto& [key, row] : part.rows()) {
      EXPECT_TRUE(slots[SlotForKey(key)]) << when << " key " << key;
      EXPECT_TRUE(row.empty()) << when << " key " << key;
    }
  };
  // Expired but still stored: the scan finds them.
  Part stored;
  ASSERT_OK(store->snapshots().Export({{"emb", &stored}}, options).status());
  expect_owned_deletions(stored, "expired");
  // Compacted away: the store remembers them.
  ASSERT_OK(store->tables().Expire("emb").status());
  Part dropped;
  ASSERT_OK(store->snapshots().Export({{"emb", &dropped}}, options).status());
  expect_owned_deletions(dropped, "dropped");
}

TEST_F(EmbeddingStoreTest, ADeltaSinceBeforeTheStoreKnowsWhatChangedIsRefused) {
  options_.write_back_interval = absl::Milliseconds(500);
  options_.max_dropped_rows_remembered = 5;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  uint32_t base_time = 0;
  Part part;
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(spec));
    ASSERT_OK(store->Push("emb", Range(0, 10), std::vector<float>(40, 1.0f)));
    base_time = ExportTo(*store, "emb", {}, &part);
    // A table declared after the export (say, dropped and declared again).
    WaitPastSecond(base_time);
    ASSERT_OK(store->tables().DeclareTable(SgdTable("later", 4)));
    EXPECT_THAT(TryExport(*store, "later", base_time, &part).status(),
                StatusIs(StatusCode::kFailedPrecondition));
    // More rows dropped than it remembers.
    absl::SleepFor(absl::Seconds(3.1));
    ASSERT_OK(store->tables().Expire("emb").status());
    EXPECT_THAT(TryExport(*store, "emb", base_time, &part).status(),
                StatusIs(StatusCode::kFailedPrecondition));
  }
  // Reopened: what the process before dropped is not known.
  auto store = OpenStore(options_);
  EXPECT_THAT(TryExport(*store, "emb", base_time, &part).status(),
              StatusIs(StatusCode::kFailedPrecondition));
  // A full export goes on, and a delta since it.
  Part again_part, after;
  const uint32_t again = ExportTo(*store, "emb", {}, &again_part);
  ExportTo(*store, "emb", again, &after);
}

}  // namespace
}  // namespace ps::embedding
