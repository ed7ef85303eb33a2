#include "embedding/snapshot_export.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "base/routing.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

constexpr int kDim = 2;
constexpr int kRowFloats = 3;  // two weights, one float of optimizer state

// What a sink was handed, in order: ("put", key, first weight) or
// ("delete", key, 0).
struct Call {
  std::string what;
  uint64_t key;
  float weight;
  bool operator==(const Call& other) const {
    return what == other.what && key == other.key && weight == other.weight;
  }
};

class RecordingSink : public StoreSnapshots::ExportSink {
 public:
  absl::Status Put(uint64_t key, absl::Span<const float> row) override {
    EXPECT_EQ(row.size(), static_cast<size_t>(kDim));
    calls.push_back({"put", key, row[0]});
    return absl::OkStatus();
  }
  absl::Status Delete(uint64_t key) override {
    calls.push_back({"delete", key, 0.0f});
    return absl::OkStatus();
  }
  std::vector<Call> calls;
};

class SnapshotExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RocksStoreOptions options;
    options.path = FreshTestDir("snapshot_export") + "/db";
    absl::StatusOr<std::unique_ptr<RocksStore>> opened =
        RocksStore::Open(options);
    ASSERT_OK(opened);
    rocks_ = *std::move(opened);
    TableSpec spec;
    spec.set_name("t");
    spec.set_dim(kDim);
    absl::StatusOr<TableId> id = rocks_->CreateTable(spec);
    ASSERT_OK(id);
    table_.id = *id;
    table_.dim = kDim;
    table_.row_floats = kRowFloats;
  }

  // Stores `key` with first weight `weight`, last updated at `updated_s`.
  void Store(uint64_t key, float weight, uint32_t updated_s) {
    RocksStore::Batch batch = rocks_->NewBatch();
    const float row[kRowFloats] = {weight, -weight, 0.5f};
    batch.Put(table_.id, key, row, LogPosition(), {updated_s, 1});
    ASSERT_OK(rocks_->Write(&batch));
  }

  std::vector<Call> Export(const StoreSnapshots::ExportOptions& options,
                           uint32_t now_s, std::vector<uint64_t> dropped = {}) {
    std::unique_ptr<RocksStore::Snapshot> snapshot = rocks_->GetSnapshot();
    SnapshotExport snapshot_export(*rocks_, *snapshot, now_s, options);
    RecordingSink sink;
    EXPECT_OK(snapshot_export.WriteTable(table_, dropped, sink));
    return sink.calls;
  }

  // `keys` in the store's order.
  static std::vector<uint64_t> InStoreOrder(std::vector<uint64_t> keys) {
    std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) {
      return std::make_pair(SlotForKey(a), a) <
             std::make_pair(SlotForKey(b), b);
    });
    return keys;
  }

  std::unique_ptr<RocksStore> rocks_;
  SnapshotExport::Table table_;
};

TEST_F(SnapshotExportTest, HandsTheSnapshotsRowsInTheStoresOrder) {
  const std::vector<uint64_t> keys = {7, 1000003, 42, 99999999999ULL, 5};
  for (uint64_t key : keys) Store(key, static_cast<float>(key % 97), 100);
  std::unique_ptr<RocksStore::Snapshot> snapshot = rocks_->GetSnapshot();
  // Written after the snapshot: not in the export.
  Store(11, 1.0f, 100);
  Store(7, 55.0f, 100);
  StoreSnapshots::ExportOptions options;
  SnapshotExport snapshot_export(*rocks_, *snapshot, 200, options);
  RecordingSink sink;
  ASSERT_OK(snapshot_export.WriteTable(table_, {}, sink));
  std::vector<Call> expected;
  for (uint64_t key : InStoreOrder(keys)) {
    expected.push_back({"put", key, static_cast<float>(key % 97)});
  }
  EXPECT_EQ(sink.calls, expected);
}

TEST_F(SnapshotExportTest, ADeltaHasTheChangedRowsAndTheDeletions) {
  table_.expiry = {kRowFloats, /*ttl_s=*/50, 0};
  Store(1, 1.0f, 140);  // unchanged since 150, live at 180
  Store(2, 2.0f, 160);  // changed since 150
  Store(3, 3.0f, 120);  // live at 150, expired at 180: deleted
  Store(4, 4.0f, 90);   // expired by 150 already: nothing
  Store(5, 5.0f, 150);  // updated at the delta's time: in it
  // Dropped from disk since 150 (a compaction): deleted, merged in order.
  // 2 is stored: the stored row decides.
  const std::vector<uint64_t> dropped = InStoreOrder({2, 8, 9});
  StoreSnapshots::ExportOptions options;
  options.changed_since_s = 150;
  const std::vector<Call> calls = Export(options, 180, dropped);
  std::map<uint64_t, std::string> what;
  for (const Call& call : calls) {
    EXPECT_TRUE(what.emplace(call.key, call.what).second)
        << "key " << call.key << " twice";
  }
  const std::map<uint64_t, std::string> expected = {
      {2, "put"}, {3, "delete"}, {5, "put"}, {8, "delete"}, {9, "delete"}};
  EXPECT_EQ(what, expected);
  std::vector<uint64_t> order;
  for (const Call& call : calls) order.push_back(call.key);
  EXPECT_EQ(order, InStoreOrder(order)) << "not in the store's order";
  // A full export has neither the expired rows nor deletions.
  std::vector<uint64_t> full;
  for (const Call& call : Export({}, 180, {})) {
    EXPECT_EQ(call.what, "put");
    full.push_back(call.key);
  }
  EXPECT_EQ(full, InStoreOrder({1, 2, 5}));
}

TEST_F(SnapshotExportTest, OnlyTheExportsSlotsLeave) {
  table_.expiry = {kRowFloats, /*ttl_s=*/50, 0};
  auto owned = [](uint64_t key) { return SlotForKey(key) % 2 == 0; };
  StoreSnapshots::ExportOptions options;
  options.slots.emplace(kNumSlots, false);
  for (uint32_t slot = 0; slot < kNumSlots; slot += 2) {
    (*options.slots)[slot] = true;
  }
  // Changed since the delta's time (120), live at its end (160).
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; key <= 200; ++key) {
    keys.push_back(key * 2654435761ULL);
    Store(keys.back(), 2.0f, 140);
  }
  // Expired since (live at 120, expired at 160), and dropped from disk
  // since: half of each in the export's slots, deleted; the others not.
  std::vector<uint64_t> expired;
  std::vector<uint64_t> dropped;
  for (uint64_t key = 1000; expired.size() < 4 || dropped.size() < 4; ++key) {
    const bool want_owned = (expired.size() + dropped.size()) % 2 == 0;
    if (owned(key) != want_owned) continue;
    if (expired.size() < 4) {
      expired.push_back(key);
      Store(key, 1.0f, 100);
    } else {
      dropped.push_back(key);
    }
  }
  options.changed_since_s = 120;
  std::vector<uint64_t> put;
  std::vector<uint64_t> deleted;
  for (const Call& call : Export(options, 160, InStoreOrder(dropped))) {
    (call.what == "put" ? put : deleted).push_back(call.key);
  }
  std::vector<uint64_t> owned_keys;
  for (uint64_t key : keys) {
    if (owned(key)) owned_keys.push_back(key);
  }
  std::vector<uint64_t> owned_gone;
  for (const std::vector<uint64_t>* gone : {&expired, &dropped}) {
    for (uint64_t key : *gone) {
      if (owned(key)) owned_gone.push_back(key);
    }
  }
  ASSERT_FALSE(owned_keys.empty());
  ASSERT_LT(owned_keys.size(), keys.size());
  ASSERT_EQ(owned_gone.size(), 4u);
  EXPECT_EQ(put, InStoreOrder(owned_keys));
  EXPECT_EQ(deleted, InStoreOrder(owned_gone));
}

}  // namespace
}  // namespace ps::embedding
