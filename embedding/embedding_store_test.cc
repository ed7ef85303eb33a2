#include "embedding/embedding_store.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/test_faults.h"
#include "base/transient_error.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

TableSpec SgdTable(const std::string& name, uint32_t dim,
                   float learning_rate = 1.0f) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_initializer()->set_seed(17);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(learning_rate);
  return spec;
}

std::unique_ptr<EmbeddingStore> OpenStore(const StoreOptions& options) {
  auto store = EmbeddingStore::Open(options);
  EXPECT_OK(store);
  return std::move(store).value();
}

std::vector<float> PullRows(EmbeddingStore& store, const std::string& table,
                            const std::vector<uint64_t>& keys, uint32_t dim) {
  std::vector<float> out(keys.size() * dim);
  EXPECT_OK(store.Pull(table, keys, absl::MakeSpan(out)));
  return out;
}

std::vector<float> InitialRow(const TableSpec& spec, uint64_t key) {
  std::vector<float> row(spec.dim());
  Initializer(spec.initializer()).Fill(key, absl::MakeSpan(row));
  return row;
}

// Resident set size of this process, from /proc.
size_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

class EmbeddingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.data_dir = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  StoreOptions options_;
};

TEST_F(EmbeddingStoreTest, DeclareIsIdempotentAndRejectsConflicts) {
  auto store = OpenStore(options_);
  EXPECT_THAT(store->DeclareTable(SgdTable("emb", 8)), IsOk());
  auto again = store->DeclareTable(SgdTable("emb", 8));
  ASSERT_OK(again);
  EXPECT_FALSE(*again);
  EXPECT_THAT(store->DeclareTable(SgdTable("emb", 16)),
              StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(store->DeclareTable(SgdTable("emb", 8, 0.5f)),
              StatusIs(StatusCode::kAlreadyExists));
}

TEST_F(EmbeddingStoreTest, DeclareValidatesTheSpec) {
  options_.max_dim = 64;
  auto store = OpenStore(options_);
  EXPECT_THAT(store->DeclareTable(SgdTable("", 8)),
              StatusIs(StatusCode::kInvalidArgument));
  // A table names files of exports and checkpoints: never a path.
  for (const char* name : {"a/b", "..", ".", ".hidden", "-rf", "a..b"}) {
    EXPECT_THAT(store->DeclareTable(SgdTable(name, 8)),
                StatusIs(StatusCode::kInvalidArgument))
        << name;
  }
  EXPECT_THAT(store->DeclareTable(SgdTable("wide_deep.dense.mlp-0", 8)),
              IsOk());
  EXPECT_THAT(store->DeclareTable(SgdTable("zero", 0)),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->DeclareTable(SgdTable("huge", 65)),
              StatusIs(StatusCode::kResourceExhausted));
  EXPECT_THAT(store->DeclareTable(SgdTable("negative_rate", 8, -1.0f)),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->GetTableSpec("huge"), StatusIs(StatusCode::kNotFound));
}

TEST_F(EmbeddingStoreTest, MaxTablesIsEnforced) {
  options_.max_tables = 2;
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("a", 4)));
  ASSERT_OK(store->DeclareTable(SgdTable("b", 4)));
  EXPECT_THAT(store->DeclareTable(SgdTable("c", 4)),
              StatusIs(StatusCode::kResourceExhausted));
}

TEST_F(EmbeddingStoreTest, NeverPushedKeysReturnInitialValuesAndAreNotStored) {
  auto store = OpenStore(options_);
  const TableSpec spec = SgdTable("emb", 4);
  ASSERT_OK(store->DeclareTable(spec));
  const std::vector<uint64_t> keys = {5, 1, 5, 99};
  std::vector<float> rows = PullRows(*store, "emb", keys, 4);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(
        std::vector<float>(rows.begin() + 4 * i, rows.begin() + 4 * (i + 1)),
        InitialRow(spec, keys[i]));
  }
  std::vector<float> row;
  bool stored = true;
  ASSERT_OK(store->GetRow("emb", 5, &row, &stored));
  EXPECT_FALSE(stored);
  EXPECT_EQ(row, InitialRow(spec, 5));
  ASSERT_OK(store->Flush());
  EXPECT_EQ(store->ListTables()[0].estimated_rows, 0u);
}

TEST_F(EmbeddingStoreTest, PullChecksTableAndOutputSize) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 4)));
  std::vector<float> out(4);
  const std::vector<uint64_t> keys = {1};
  EXPECT_THAT(store->Pull("nope", keys, absl::MakeSpan(out)),
              StatusIs(StatusCode::kNotFound));
  std::vector<float> short_out(3);
  EXPECT_THAT(store->Pull("emb", keys, absl::MakeSpan(short_out)),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(EmbeddingStoreTest, PushAppliesOptimizerAndSumsDuplicateKeys) {
  auto store = OpenStore(options_);
  const TableSpec spec = SgdTable("emb", 2, /*learning_rate=*/0.5f);
  ASSERT_OK(store->DeclareTable(spec));
  // Key 7 appears twice: its gradients sum to (3, -3) before one SGD step.
  const std::vector<uint64_t> keys = {7, 8, 7};
  const std::vector<float> gradients = {1, -1, 4, 4, 2, -2};
  auto updated = store->Push("emb", keys, gradients);
  ASSERT_OK(updated);
  EXPECT_EQ(updated->rows_updated, 2u);
  EXPECT_FALSE(updated->duplicate);
  const std::vector<float> initial7 = InitialRow(spec, 7);
  const std::vector<float> initial8 = InitialRow(spec, 8);
  std::vector<float> rows = PullRows(*store, "emb", {7, 8}, 2);
  EXPECT_FLOAT_EQ(rows[0], initial7[0] - 0.5f * 3);
  EXPECT_FLOAT_EQ(rows[1], initial7[1] + 0.5f * 3);
  EXPECT_FLOAT_EQ(rows[2], initial8[0] - 0.5f * 4);
  EXPECT_FLOAT_EQ(rows[3], initial8[1] - 0.5f * 4);
  std::vector<float> row;
  bool stored = false;
  ASSERT_OK(store->GetRow("emb", 7, &row, &stored));
  EXPECT_TRUE(stored);
}

TEST_F(EmbeddingStoreTest, APushsLearningRateScaleScalesItsStep) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 2, 0.5f)));
  const std::vector<uint64_t> keys = {4, 5};
  const std::vector<float> before = PullRows(*store, "emb", keys, 2);
  ASSERT_OK(store->Push("emb", {4}, {1.0f, -2.0f}, PushOrigin(), 0.25f));
  ASSERT_OK(store->Push("emb", {5}, {1.0f, -2.0f}));
  const std::vector<float> after = PullRows(*store, "emb", keys, 2);
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f * 0.25f * 1.0f);
  EXPECT_FLOAT_EQ(after[1], before[1] + 0.5f * 0.25f * 2.0f);
  EXPECT_FLOAT_EQ(after[2], before[2] - 0.5f * 1.0f);
  for (float bad : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    EXPECT_THAT(store->Push("emb", {4}, {1.0f, 1.0f}, PushOrigin(), bad),
                StatusIs(StatusCode::kInvalidArgument));
  }
  EXPECT_EQ(PullRows(*store, "emb", keys, 2), after);
}

TEST_F(EmbeddingStoreTest, BadPushChangesNothing) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 2)));
  const std::vector<uint64_t> keys = {1, 2};
  ASSERT_OK(store->Push("emb", keys, {1, 1, 1, 1}));
  const std::vector<float> before = PullRows(*store, "emb", keys, 2);

  EXPECT_THAT(store->Push("emb", keys, {1, 1, 1, NAN}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->Push("emb", keys, {1, INFINITY, 1, 1}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->Push("emb", keys, {1, 1, 1}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->Push("other", keys, {1, 1, 1, 1}),
              StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(PullRows(*store, "emb", keys, 2), before);
}

TEST_F(EmbeddingStoreTest, EvictedDirtyRowsAreWrittenBack) {
  options_.durability = Durability::kPeriodic;
  options_.write_back_interval = absl::Hours(1);  // only eviction writes back
  options_.num_stripes = 4;
  options_.cache_bytes = 64 * RowCache::RowBytes(4);
  auto store = OpenStore(options_);
  const TableSpec spec = SgdTable("emb", 4);
  ASSERT_OK(store->DeclareTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 2000; ++key) keys.push_back(key);
  ASSERT_OK(
      store->Push("emb", keys, std::vector<float>(keys.size() * 4, -1.0f)));
  EXPECT_LE(store->Stats().hot_tier_bytes, options_.cache_bytes);
  std::vector<float> rows = PullRows(*store, "emb", keys, 4);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FLOAT_EQ(rows[4 * i], InitialRow(spec, keys[i])[0] + 1.0f)
        << "key " << i;
  }
  StoreStats stats = store->Stats();
  EXPECT_GT(stats.hot_tier_misses, 0u);
  EXPECT_LE(stats.hot_tier_bytes, options_.cache_bytes);
}

TEST_F(EmbeddingStoreTest, TableFourTimesLargerThanBudgetWorksInBoundedMemory) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RSS is not the store's under ThreadSanitizer, whose "
                  "shadow memory grows with every byte the test touches";
#endif
  options_.cache_bytes = 2 << 20;
  options_.rocksdb_write_buffer_bytes = 8 << 20;
  options_.rocksdb_block_cache_bytes = 4 << 20;
  // A stripe whose periodic write-back is in flight evicts nothing until it
  // lands (so that no newer copy of a row reaches RocksDB first), and may be
  // over its share meanwhile: none runs here, so the bound is exact.
  options_.write_back_interval = absl::Hours(1);
  auto store = OpenStore(options_);
  TableSpec spec = SgdTable("big", 32);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  ASSERT_OK(store->DeclareTable(spec));
  // 40000 rows x (32 weights + 32 accumulators) x 4 bytes = 10 MiB of row
  // data alone: five times the hot tier's budget.
  constexpr uint64_t kRows = 40000;
  constexpr size_t kBatch = 4000;
  const size_t rss_before = ResidentBytes();
  std::vector<float> gradients(kBatch * 32, 0.5f);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t start = 0; start < kRows; start += kBatch) {
      std::vector<uint64_t> keys;
      for (uint64_t key = start; key < start + kBatch; ++key)
        keys.push_back(key * 7919);
      ASSERT_OK(store->Push("big", keys, gradients));
    }
  }
  EXPECT_LE(store->Stats().hot_tier_bytes, options_.cache_bytes);
  // Every row took two Adagrad steps of the same gradient; check a sample
  // across the whole key range against the closed form.
  for (uint64_t key = 0; key < kRows; key += 997) {
    const std::vector<float> row = PullRows(*store, "big", {key * 7919}, 32);
    const float initial = InitialRow(spec, key * 7919)[0];
    const float expected = initial - 1.0f * 0.5f / std::sqrt(0.1f + 0.25f) -
                           1.0f * 0.5f / std::sqrt(0.1f + 0.5f);
    ASSERT_NEAR(row[0], expected, 1e-5) << "key " << key;
  }
  ASSERT_OK(store->Flush());
  EXPECT_GT(store->ListTables()[0].estimated_rows, kRows / 2);
  // RSS may grow by the hot tier, RocksDB's memtables and block cache, and
  // allocator slack, but not by the table's size. (Not under AddressSanitizer,
  // whose quarantine keeps freed memory resident on purpose.)
#ifndef __SANITIZE_ADDRESS__
  const size_t rss_growth =
      ResidentBytes() - std::min(rss_before, ResidentBytes());
  EXPECT_LT(rss_growth, options_.cache_bytes + (24u << 20)) << rss_growth;
#else
  (void)rss_before;
#endif
}

TEST_F(EmbeddingStoreTest, MemoryOfRowsEvictedForAnotherTableIsGivenBack) {
  options_.cache_bytes = 8 << 20;
  options_.num_stripes = 4;
  // Only Flush() writes back: a push during a background write-back would
  // not evict, and leave the hot tier over its budget at the check.
  options_.write_back_interval = absl::Hours(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("a", 16)));
  ASSERT_OK(store->DeclareTable(SgdTable("b", 16)));
  // 100000 rows of ~104 bytes: more than the budget, per table. All of
  // table a's, then all of table b's, which push a's out of memory.
  constexpr uint64_t kRows = 100000;
  constexpr uint64_t kBatch = 5000;
  const std::vector<float> gradients(kBatch * 16, 0.5f);
  for (const char* table : {"a", "b"}) {
    for (uint64_t start = 0; start < kRows; start += kBatch) {
      std::vector<uint64_t> keys;
      for (uint64_t key = start; key < start + kBatch; ++key)
        keys.push_back(key);
      ASSERT_OK(store->Push(table, keys, gradients));
    }
    ASSERT_OK(store->Flush());
    const StoreStats stats = store->Stats();
    EXPECT_LE(stats.hot_tier_bytes, options_.cache_bytes);
    // A partly used chunk per stripe (48 KiB) beside the rows; the slots
    // table a's rows left are given back.
    EXPECT_LE(stats.hot_tier_allocated_bytes, options_.cache_bytes * 5 / 4)
        << "after table " << table;
    EXPECT_GE(stats.hot_tier_allocated_bytes, stats.hot_tier_bytes * 9 / 10);
  }
  // Table a's rows come back from RocksDB.
  EXPECT_FLOAT_EQ(PullRows(*store, "a", {7}, 16)[0],
                  InitialRow(SgdTable("a", 16), 7)[0] - 0.5f);
}

TEST_F(EmbeddingStoreTest, ReopenResumesTablesAndRows) {
  for (Durability durability : {Durability::kWal, Durability::kPeriodic}) {
    options_.durability = durability;
    std::filesystem::remove_all(options_.data_dir);
    const TableSpec spec = SgdTable("emb", 3);
    std::vector<float> expected;
    {
      auto store = OpenStore(options_);
      ASSERT_OK(store->DeclareTable(spec));
      ASSERT_OK(store->Push("emb", {1, 2}, {1, 2, 3, 4, 5, 6}));
      expected = PullRows(*store, "emb", {1, 2}, 3);
    }
    auto store = OpenStore(options_);
    auto reopened = store->GetTableSpec("emb");
    ASSERT_OK(reopened);
    EXPECT_EQ(reopened->dim(), 3u);
    EXPECT_EQ(PullRows(*store, "emb", {1, 2}, 3), expected);
    // Declaring the same table again after a restart is not a conflict.
    auto again = store->DeclareTable(spec);
    ASSERT_OK(again);
    EXPECT_FALSE(*again);
  }
}

TEST_F(EmbeddingStoreTest, MissesAskRocksDbOnlyWhenRowsMayBeStoredThere) {
  options_.num_stripes = 4;
  const TableSpec spec = SgdTable("emb", 4);
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 500; ++key) keys.push_back(key);
  {
    // A table declared here starts empty: while nothing is evicted, the hot
    // tier holds every stored row, and misses are answered from memory.
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(spec));
    PullRows(*store, "emb", keys, 4);
    ASSERT_OK(store->Push("emb", keys, std::vector<float>(500 * 4, -1.0f)));
    EXPECT_EQ(store->Stats().disk_lookups, 0u);
  }
  {
    // After a restart the rows are in RocksDB only.
    auto store = OpenStore(options_);
    const std::vector<float> rows = PullRows(*store, "emb", keys, 4);
    EXPECT_EQ(store->Stats().disk_lookups, keys.size());
    EXPECT_FLOAT_EQ(rows[4 * 7], InitialRow(spec, 7)[0] + 1.0f);
  }
  // A table declared here whose stripes evicted rows asks RocksDB again.
  std::filesystem::remove_all(options_.data_dir);
  options_.durability = Durability::kPeriodic;
  options_.write_back_interval = absl::Hours(1);
  options_.cache_bytes = 64 * RowCache::RowBytes(4);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(500 * 4, -1.0f)));
  const std::vector<float> rows = PullRows(*store, "emb", keys, 4);
  EXPECT_GT(store->Stats().disk_lookups, 0u);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FLOAT_EQ(rows[4 * i], InitialRow(spec, keys[i])[0] + 1.0f)
        << "key " << i;
  }
}

TEST_F(EmbeddingStoreTest, PushLogIsReplayedOnceAfterACrash) {
  TableSpec spec = SgdTable("emb", 3);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  const std::vector<uint64_t> keys = {1, 2, 3, 1, 50, 7, 50};
  auto push_rounds = [&](EmbeddingStore& store) {
    for (int round = 0; round < 3; ++round) {
      std::vector<float> gradients;
      for (size_t i = 0; i < keys.size() * 3; ++i)
        gradients.push_back(0.1f * (round + 1) - 0.03f * i);
      // Learning-rate scales, in the records of scaled pushes.
      const float scale[3] = {1.0f, 0.5f, 3.0f};
      ASSERT_OK(store.Push("emb", keys, gradients, PushOrigin(), scale[round]));
      // Rows written back and the log mark after the first round: replay
      // must skip that round's records and apply the later ones.
      if (round == 0) {
        ASSERT_OK(store.Flush());
      }
    }
  };
  // The reference: the same pushes in a store that closes cleanly.
  StoreOptions reference_options = options_;
  reference_options.data_dir += "_reference";
  std::vector<float> expected;
  {
    auto reference = OpenStore(reference_options);
    ASSERT_OK(reference->DeclareTable(spec));
    push_rounds(*reference);
    expected = PullRows(*reference, "emb", keys, 3);
  }
  // A child process pushes under kWal and exits without writing a row back,
  // as if killed: only the push log holds its updates.
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 4;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->DeclareTable(spec).ok()) std::_Exit(1);
        push_rounds(*store);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // Replayed under a different stripe count, and only once.
  options_.num_stripes = 7;
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    EXPECT_EQ(PullRows(*store, "emb", keys, 3), expected) << "open " << open;
  }
}

// Opens the RocksDB database in `dir` with every column family, behind the
// store's back, and calls edit(db, family names, their handles): what an
// older version or a stopped process left there. Fails if it cannot open or
// `edit` returns false.
::testing::AssertionResult EditRocksDb(
    const std::string& dir,
    const std::function<bool(rocksdb::DB*, const std::vector<std::string>&,
                             const std::vector<rocksdb::ColumnFamilyHandle*>&)>&
        edit) {
  rocksdb::DBOptions db_options;
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(db_options, dir, &names).ok())
    return ::testing::AssertionFailure() << "cannot list families in " << dir;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& name : names)
    families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(db_options, dir, families, &handles, &db).ok())
    return ::testing::AssertionFailure() << "cannot open " << dir;
  const bool edited = edit(db, names, handles);
  for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
  delete db;
  if (!edited) return ::testing::AssertionFailure() << "cannot edit " << dir;
  return ::testing::AssertionSuccess();
}

// Writes `value` at `key` in column family `family` of the database in `dir`.
::testing::AssertionResult PutInRocksDb(const std::string& dir,
                                        const std::string& family,
                                        absl::string_view key,
                                        absl::string_view value) {
  return EditRocksDb(
      dir, [&](rocksdb::DB* db, const auto& names, const auto& handles) {
        for (size_t i = 0; i < names.size(); ++i) {
          if (names[i] == family) {
            return db
                ->Put(rocksdb::WriteOptions(), handles[i],
                      rocksdb::Slice(key.data(), key.size()),
                      rocksdb::Slice(value.data(), value.size()))
                .ok();
          }
        }
        return false;
      });
}

// Pushes SGD steps of -1 to keys 0..9 of a dim-2 table in a child process
// that exits as if killed: only the push log holds the updates.
void PushAndDie(const StoreOptions& options, int pushes) {
  auto child = [&] {
    auto store = OpenStore(options);
    if (!store->DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
    const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 0; i < pushes; ++i) {
      if (!store->Push("emb", keys, std::vector<float>(20, -1.0f)).ok())
        std::_Exit(1);
    }
    std::_Exit(0);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST_F(EmbeddingStoreTest, SegmentsOfAReplayedEpochAreNeverReadAgain) {
  options_.write_back_interval = absl::Hours(1);
  PushAndDie(options_, 3);
  const std::string log_dir = options_.data_dir + "/push_log";
  const std::string saved = options_.data_dir + "_saved_log";
  std::filesystem::remove_all(saved);
  std::filesystem::copy(log_dir, saved);
  ASSERT_FALSE(Files(saved).empty());
  const float initial = InitialRow(SgdTable("emb", 2), 4)[0];
  {
    auto store = OpenStore(options_);  // replays the 3 pushes
    EXPECT_FLOAT_EQ(PullRows(*store, "emb", {4}, 2)[0], initial + 3.0f);
  }
  // As if the replaying process died after recording the new epoch but
  // before deleting the old segments: they must go unread.
  for (const std::string& file : Files(saved)) {
    std::filesystem::copy_file(saved + "/" + file, log_dir + "/" + file,
                               std::filesystem::copy_options::skip_existing);
  }
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {4}, 2)[0], initial + 3.0f);
  for (const std::string& file : Files(log_dir)) {
    EXPECT_EQ(std::count(Files(saved).begin(), Files(saved).end(), file), 0)
        << file << " survived";
  }
}

TEST_F(EmbeddingStoreTest, ALogNewerThanTheRowsIsRefused) {
  options_.write_back_interval = absl::Hours(1);
  PushAndDie(options_, 1);
  const std::string log_dir = options_.data_dir + "/push_log";
  const std::vector<std::string> files = Files(log_dir);
  ASSERT_EQ(files.size(), 1u);
  // A segment from another store's later epoch, say.
  std::filesystem::rename(log_dir + "/" + files[0],
                          log_dir + "/0000000099-0000000000.pushlog");
  auto store = EmbeddingStore::Open(options_);
  EXPECT_THAT(store.status(), StatusIs(StatusCode::kDataLoss));
}

TEST_F(EmbeddingStoreTest, APushLogKeptInRocksDbByAnOlderVersionIsRefused) {
  { auto store = OpenStore(options_); }
  // What versions that kept the log in RocksDB left: a record at
  // (stripe 0, sequence 1) in the "push_log" family.
  ASSERT_TRUE(PutInRocksDb(options_.data_dir, "push_log",
                           std::string(11, '\0') + '\1', std::string(40, 'r')));
  auto store = EmbeddingStore::Open(options_);
  EXPECT_THAT(store.status(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_NE(store.status().message().find("moved to files"), std::string::npos)
      << store.status();
}

TEST_F(EmbeddingStoreTest, EvictedRowsAreNotReplayedTwice) {
  TableSpec spec = SgdTable("emb", 3);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 40; ++key) keys.push_back(key * 7919);
  auto push_rounds = [&](EmbeddingStore& store) {
    for (int round = 0; round < 5; ++round) {
      // A different half of the keys each round, so rows keep leaving and
      // coming back.
      std::vector<uint64_t> some;
      std::vector<float> gradients;
      for (size_t i = round % 2; i < keys.size(); i += 2) {
        some.push_back(keys[i]);
        for (int d = 0; d < 3; ++d)
          gradients.push_back(0.05f * (round + 1) - 0.01f * d);
      }
      ASSERT_OK(store.Push("emb", some, gradients));
    }
  };
  std::vector<float> expected;
  {
    StoreOptions reference_options = options_;
    reference_options.data_dir += "_reference";
    auto reference = OpenStore(reference_options);
    ASSERT_OK(reference->DeclareTable(spec));
    push_rounds(*reference);
    expected = PullRows(*reference, "emb", keys, 3);
  }
  // A hot tier of ~4 rows per stripe: dirty rows are evicted (and written
  // alone, without a mark) on almost every push; no write-back by the clock.
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 2;
  options_.cache_bytes = 2 * 4 * RowCache::RowBytes(3 + 3);
  auto child = [&] {
    auto store = OpenStore(options_);
    if (!store->DeclareTable(spec).ok()) std::_Exit(1);
    push_rounds(*store);
    if (store->Stats().disk_lookups == 0) std::_Exit(3);  // no eviction?
    std::_Exit(0);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  options_.num_stripes = 3;
  options_.cache_bytes = 256 << 20;
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    EXPECT_EQ(PullRows(*store, "emb", keys, 3), expected) << "open " << open;
  }
}

TEST_F(EmbeddingStoreTest, RowsStoredWithoutALogPositionStillRead) {
  const TableSpec spec = SgdTable("emb", 2);
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(spec));
  }
  // What versions before rows carried their log position stored: the row's
  // floats alone (2 weights; SGD keeps no state).
  const uint64_t key = 42;
  const float row[2] = {1.5f, -2.5f};
  ASSERT_TRUE(PutInRocksDb(
      options_.data_dir, "table.emb",
      absl::string_view(reinterpret_cast<const char*>(&key), sizeof(key)),
      absl::string_view(reinterpret_cast<const char*>(row), sizeof(row))));
  auto store = OpenStore(options_);
  std::vector<float> weights;
  bool stored = false;
  ASSERT_OK(store->GetRow("emb", 42, &weights, &stored));
  EXPECT_TRUE(stored);
  EXPECT_EQ(weights, (std::vector<float>{1.5f, -2.5f}));
}

TEST_F(EmbeddingStoreTest, AFullDiskRefusesPushesUntilThereIsRoomAgain) {
  options_.write_back_interval = absl::Hours(1);
  auto child = [&] {
    auto store = OpenStore(options_);
    if (!store->DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
    // From here on no file of this process may grow past 64 kB (EFBIG, as
    // a full disk would refuse), until the limit is lifted again.
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit = {64 << 10, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(2);
    std::vector<uint64_t> keys;
    for (uint64_t key = 0; key < 100; ++key) keys.push_back(key);
    const std::vector<float> gradients(200, -1.0f);
    absl::StatusOr<PushOutcome> pushed;
    int applied = 0;
    for (int i = 0; i < 1000; ++i) {
      pushed = store->Push("emb", keys, gradients);
      if (!pushed.ok()) break;
      ++applied;
    }
    if (pushed.ok()) std::_Exit(3);
    if (pushed.status().code() != absl::StatusCode::kResourceExhausted ||
        !IsTransient(pushed.status()))
      std::_Exit(4);
    const std::vector<float> before = PullRows(*store, "emb", keys, 2);
    // Still full: refused again, nothing applied.
    if (store->Push("emb", keys, gradients).ok()) std::_Exit(5);
    if (PullRows(*store, "emb", keys, 2) != before) std::_Exit(6);
    // Room again: pushes go on.
    const rlimit lifted = {RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lifted) != 0) std::_Exit(7);
    if (!store->Push("emb", keys, gradients).ok()) std::_Exit(8);
    ++applied;
    const float moved = PullRows(*store, "emb", {5}, 2)[0] -
                        InitialRow(SgdTable("emb", 2), 5)[0];
    if (std::abs(moved - applied) > 1e-3) std::_Exit(9);
    std::_Exit(0);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(EmbeddingStoreTest, ALongLogIsWrittenBackBeforeItsTurn) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);  // never, by the clock
  options_.num_stripes = 4;
  options_.max_push_log_bytes = 64 << 10;
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 8)));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 500; ++key) keys.push_back(key);
  // 200 pushes log ~200 x 500 x (8 + 32) bytes = 4 MB, 60x the bound.
  for (int push = 0; push < 200; ++push) {
    ASSERT_OK(store->Push("emb", keys, std::vector<float>(500 * 8, 0.01f)));
  }
  // The flusher catches up within moments; one push per stripe over its
  // share is allowed.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (store->Stats().push_log_bytes > (64 << 10) + 500 * 40 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_LE(store->Stats().push_log_bytes, (64u << 10) + 500 * 40);
  const std::vector<float> row = PullRows(*store, "emb", {7}, 8);
  // 200 SGD steps of 0.01 (rounded once per step).
  EXPECT_NEAR(row[0], InitialRow(SgdTable("emb", 8), 7)[0] - 200 * 0.01f, 1e-4);
}

TEST_F(EmbeddingStoreTest, ConcurrentPushesLoseNoUpdate) {
  options_.cache_bytes = 256 * RowCache::RowBytes(1);  // force eviction too
  options_.num_stripes = 8;
  auto store = OpenStore(options_);
  TableSpec spec = SgdTable("counter", 1);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  ASSERT_OK(store->DeclareTable(spec));
  constexpr int kThreads = 4;
  constexpr int kPushes = 200;
  constexpr uint64_t kKeys = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      std::vector<uint64_t> keys;
      for (uint64_t key = 0; key < kKeys; ++key) keys.push_back(key);
      const std::vector<float> minus_one(kKeys, -1.0f);
      for (int i = 0; i < kPushes; ++i) {
        // Interleave pulls with pushes from other threads.
        if (i % 10 == t) PullRows(*store, "counter", keys, 1);
        ASSERT_OK(store->Push("counter", keys, minus_one));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < kKeys; ++key) keys.push_back(key);
  for (float value : PullRows(*store, "counter", keys, 1)) {
    ASSERT_EQ(value, static_cast<float>(kThreads * kPushes));
  }
}

PushOrigin Origin(uint64_t sequence, uint64_t incarnation = 1000) {
  PushOrigin origin;
  origin.worker = 3;
  origin.incarnation = incarnation;
  origin.sequence = sequence;
  return origin;
}

TEST_F(EmbeddingStoreTest, ARetriedPushIsAppliedOnce) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 2)));
  const std::vector<uint64_t> keys = {1, 2, 1};
  const std::vector<float> minus_one(6, -1.0f);
  auto first = store->Push("emb", keys, minus_one, Origin(1));
  ASSERT_OK(first);
  EXPECT_FALSE(first->duplicate);
  auto retry = store->Push("emb", keys, minus_one, Origin(1));
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->rows_updated, 2u);
  EXPECT_EQ(store->Stats().duplicate_pushes, 1u);
  const float initial = InitialRow(SgdTable("emb", 2), 1)[0];
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial + 2.0f);
  // Without an origin, every arrival applies.
  ASSERT_OK(store->Push("emb", keys, minus_one));
  ASSERT_OK(store->Push("emb", keys, minus_one));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial + 6.0f);
  // A newer incarnation of worker 3 fences the older one off.
  ASSERT_OK(store->Push("emb", keys, minus_one, Origin(1, 2000)));
  EXPECT_THAT(store->Push("emb", keys, minus_one, Origin(2, 1000)),
              StatusIs(StatusCode::kFailedPrecondition));
}

// Pushes -1 to keys 0..9 of dim-2 table "emb" with origins 1..pushes, in a
// child that then dies without writing anything back.
void PushWithOriginsAndDie(const StoreOptions& options, int pushes,
                           bool wait_for_deleted_segments = false) {
  auto child = [&] {
    auto store = OpenStore(options);
    if (!store->DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
    const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 1; i <= pushes; ++i) {
      if (!store->Push("emb", keys, std::vector<float>(20, -1.0f), Origin(i))
               .ok())
        std::_Exit(2);
    }
    if (wait_for_deleted_segments) {
      // Until the segment holding the first pushes is gone.
      const std::string first_segment =
          options.data_dir + "/push_log/0000000001-0000000000.pushlog";
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (std::filesystem::exists(first_segment)) {
        if (absl::Now() > give_up) std::_Exit(3);
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    std::_Exit(0);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// Retries every push 1..pushes of PushWithOriginsAndDie and checks that
// none applies again.
void ExpectEveryRetryIsADuplicate(const StoreOptions& options, int pushes) {
  auto store = OpenStore(options);
  const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int i = 1; i <= pushes; ++i) {
    auto retry =
        store->Push("emb", keys, std::vector<float>(20, -1.0f), Origin(i));
    ASSERT_OK(retry);
    EXPECT_TRUE(retry->duplicate) << "push " << i << " applied twice";
  }
  const float initial = InitialRow(SgdTable("emb", 2), 4)[0];
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {4}, 2)[0], initial + pushes);
}

TEST_F(EmbeddingStoreTest, TheLedgerSurvivesACrashInTheLogsRecords) {
  options_.write_back_interval = absl::Hours(1);
  PushWithOriginsAndDie(options_, 20);
  ExpectEveryRetryIsADuplicate(options_, 20);
}

TEST_F(EmbeddingStoreTest, TheLedgerSurvivesWhenTheSegmentsWithItsPushesGo) {
  // 4 KiB segments and write-backs every few ms: the segments holding the
  // first pushes are deleted before the crash, so only the preamble of a
  // later segment remembers them.
  options_.max_push_log_bytes = 32 << 10;
  options_.write_back_interval = absl::Milliseconds(16);
  options_.num_stripes = 4;
  PushWithOriginsAndDie(options_, 60, /*wait_for_deleted_segments=*/true);
  ExpectEveryRetryIsADuplicate(options_, 60);
}

TEST_F(EmbeddingStoreTest, TheLedgerSurvivesACleanRestartAndASecondCrash) {
  options_.write_back_interval = absl::Hours(1);
  PushWithOriginsAndDie(options_, 5);
  { auto store = OpenStore(options_); }  // replays, starts a new epoch
  { auto store = OpenStore(options_); }  // clean: the epoch's ledger only
  ExpectEveryRetryIsADuplicate(options_, 5);
}

TEST_F(EmbeddingStoreTest, GradientsThatSumToInfinityAreRefusedWhole) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 1)));
  const float big = 3e38f;
  // Key 9 is named twice: each gradient is finite, the sum is not.
  const absl::StatusOr<PushOutcome> refused =
      store->Push("emb", {5, 9, 9}, {1.0f, big, big});
  EXPECT_THAT(refused, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(refused.status().message().find("named more than once, sum to"),
            std::string::npos)
      << refused.status();
  std::vector<float> row;
  bool stored = true;
  ASSERT_OK(store->GetRow("emb", 5, &row, &stored));
  EXPECT_FALSE(stored) << "key 5 of the refused push was stored";
}

TEST_F(EmbeddingStoreTest,
       AnUpdateThatWouldLeaveTheFiniteNumbersChangesNothing) {
  options_.num_stripes = 8;
  auto store = OpenStore(options_);
  TableSpec spec = SgdTable("emb", 1);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  ASSERT_OK(store->DeclareTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 64; ++key) keys.push_back(key);
  // Every key at -3e38, then a step of -3e38 more overflows key 63 only;
  // the other keys of that push (in every stripe) must not move, and the
  // keys it would create must not be stored.
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(64, 3e38f)));
  std::vector<float> gradients(64, 1.0f);
  gradients[63] = 3e38f;
  std::vector<uint64_t> with_new_keys = keys;
  with_new_keys.push_back(1000);
  gradients.push_back(1.0f);
  const std::vector<float> before = PullRows(*store, "emb", keys, 1);
  const absl::StatusOr<PushOutcome> refused =
      store->Push("emb", with_new_keys, gradients);
  EXPECT_THAT(refused, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(refused.status().message().find("key 63"), std::string::npos)
      << refused.status();
  EXPECT_EQ(PullRows(*store, "emb", keys, 1), before);
  std::vector<float> row;
  bool stored = true;
  ASSERT_OK(store->GetRow("emb", 1000, &row, &stored));
  EXPECT_FALSE(stored);
  // Nothing of it reached the log either: a replay gives the same rows.
  store.reset();
  store = OpenStore(options_);
  EXPECT_EQ(PullRows(*store, "emb", keys, 1), before);
}

TEST_F(EmbeddingStoreTest, AFailedLogWriteAppliesNothingOfItsPush) {
  options_.write_back_interval = absl::Hours(1);
  auto child = [&] {
    auto store = OpenStore(options_);
    if (!store->DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit = {64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(2);
    std::vector<uint64_t> keys;
    for (uint64_t key = 0; key < 100; ++key) keys.push_back(key);
    const std::vector<float> gradients(200, -1.0f);
    std::vector<float> before = PullRows(*store, "emb", keys, 2);
    for (int i = 0; i < 1000; ++i) {
      if (!store->Push("emb", keys, gradients).ok()) {
        // The failed push left every row as the last good push did.
        std::_Exit(PullRows(*store, "emb", keys, 2) == before ? 0 : 4);
      }
      before = PullRows(*store, "emb", keys, 2);
    }
    std::_Exit(3);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(EmbeddingStoreTest, ATableHalfCreatedByACrashedProcessIsDropped) {
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(SgdTable("kept", 2)));
    ASSERT_OK(store->Push("kept", {1}, {-1.0f, -1.0f}));
  }
  // The column family of "lost", created without its spec, as a process
  // stopped in the middle of CreateTable() leaves it.
  {
    rocksdb::DBOptions db_options;
    std::vector<std::string> names;
    ASSERT_TRUE(
        rocksdb::DB::ListColumnFamilies(db_options, options_.data_dir, &names)
            .ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(db_options, options_.data_dir, families,
                                  &handles, &db)
                    .ok());
    rocksdb::ColumnFamilyHandle* lost = nullptr;
    ASSERT_TRUE(db->CreateColumnFamily(rocksdb::ColumnFamilyOptions(),
                                       "table.lost", &lost)
                    .ok());
    handles.push_back(lost);
    for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
    delete db;
  }
  auto store = OpenStore(options_);
  ASSERT_NE(store, nullptr);
  const std::vector<TableStats> tables = store->ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].spec.name(), "kept");
  const float initial = InitialRow(SgdTable("kept", 2), 1)[0];
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 2)[0], initial + 1.0f);
  auto created = store->DeclareTable(SgdTable("lost", 2));
  ASSERT_OK(created);
  EXPECT_TRUE(*created);
}

TEST_F(EmbeddingStoreTest, ALearningRateSetLiveAppliesFromTheNextPushOn) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  const TableSpec spec = SgdTable("emb", 2, /*learning_rate=*/1.0f);
  const std::vector<float> initial = InitialRow(spec, 1);
  // A child pushes at the declared rate, then at a rate set live, and exits
  // as if killed: replay must apply each record at its own rate.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->DeclareTable(spec).ok()) std::_Exit(1);
        if (!store->Push("emb", {1}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (!store->SetLearningRate("emb", 0.25f).ok()) std::_Exit(3);
        if (!store->Push("emb", {1}, {1.0f, 1.0f}).ok()) std::_Exit(4);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial[0] - 1.25f);
  const std::vector<TableStats> tables = store->ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_FLOAT_EQ(tables[0].learning_rate, 0.25f);
  // The spec keeps the declared rate: the table's workers still declare it.
  EXPECT_FLOAT_EQ(tables[0].spec.optimizer().learning_rate(), 1.0f);
  auto declared = store->DeclareTable(spec);
  ASSERT_OK(declared);
  EXPECT_FALSE(*declared);
  // The rate survived the restart, and multiplies a push's own scale.
  ASSERT_OK(store->Push("emb", {1}, {1.0f, 1.0f}, PushOrigin(), 2.0f));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial[0] - 1.75f);

  EXPECT_THAT(store->SetLearningRate("emb", 0.0f),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->SetLearningRate("emb", -1.0f),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->SetLearningRate("emb", std::nanf("")),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->SetLearningRate("nope", 0.1f),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(EmbeddingStoreTest, ADroppedTableLeavesNothingAndItsNameStartsAfresh) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  const TableSpec gone = SgdTable("gone", 2);
  const TableSpec kept = SgdTable("kept", 3);
  const TableSpec again = SgdTable("gone", 5, /*learning_rate=*/0.5f);
  // In a child that exits as if killed, so that the push log still names
  // the dropped table's id when the store opens again.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->DeclareTable(gone).ok()) std::_Exit(1);
        if (!store->DeclareTable(kept).ok()) std::_Exit(1);
        if (!store->Push("gone", {1, 2}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->Push("kept", {1}, std::vector<float>(3, 1.0f)).ok())
          std::_Exit(2);
        // Some of its rows on disk too.
        if (!store->Flush().ok()) std::_Exit(3);
        if (!store->Push("gone", {1, 3}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->DropTable("gone").ok()) std::_Exit(4);
        std::vector<float> out(2);
        if (store->Pull("gone", {1}, absl::MakeSpan(out)).code() !=
            absl::StatusCode::kNotFound)
          std::_Exit(5);
        if (store->Push("gone", {1}, {1.0f, 1.0f}).status().code() !=
            absl::StatusCode::kNotFound)
          std::_Exit(6);
        if (store->DropTable("gone").code() != absl::StatusCode::kNotFound)
          std::_Exit(7);
        if (!store->Push("kept", {1}, std::vector<float>(3, 1.0f)).ok())
          std::_Exit(2);
        if (!store->DeclareTable(again).ok()) std::_Exit(8);
        if (!store->Push("gone", {1}, std::vector<float>(5, 1.0f)).ok())
          std::_Exit(9);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    std::vector<std::string> names;
    for (const TableStats& table : store->ListTables())
      names.push_back(table.spec.name() + "/" +
                      std::to_string(table.spec.dim()));
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"gone/5", "kept/3"}));
    EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 3)[0],
                    InitialRow(kept, 1)[0] - 2.0f);
    // The new table holds its one push and none of the old table's rows.
    EXPECT_FLOAT_EQ(PullRows(*store, "gone", {1}, 5)[0],
                    InitialRow(again, 1)[0] - 0.5f);
    for (uint64_t key : {2, 3}) {
      std::vector<float> weights;
      bool stored = true;
      ASSERT_OK(store->GetRow("gone", key, &weights, &stored));
      EXPECT_FALSE(stored) << "key " << key << ", open " << open;
    }
  }
}

TEST_F(EmbeddingStoreTest, ADroppedTablesRowsLeaveTheHotTier) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("gone", 16)));
  ASSERT_OK(store->DeclareTable(SgdTable("kept", 16)));
  std::vector<uint64_t> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  ASSERT_OK(store->Push("kept", {1}, std::vector<float>(16, 1.0f)));
  const uint64_t kept_bytes = store->Stats().hot_tier_bytes;
  ASSERT_OK(store->Push("gone", keys, std::vector<float>(16 * 1000, 1.0f)));
  EXPECT_GT(store->Stats().hot_tier_bytes, kept_bytes + 1000 * 16 * 4);
  ASSERT_OK(store->DropTable("gone"));
  EXPECT_EQ(store->Stats().hot_tier_bytes, kept_bytes);
  // Nothing of it is written back.
  ASSERT_OK(store->Flush());
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 16)[0],
                  InitialRow(SgdTable("kept", 16), 1)[0] - 1.0f);
}

TEST_F(EmbeddingStoreTest, AKeyIsStoredOnlyAtItsAdmitAfterthPush) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.admission_sketch_bytes = 1 << 16;
  TableSpec spec = SgdTable("emb", 2, /*learning_rate=*/1.0f);
  spec.set_admit_after(3);
  const float initial5 = InitialRow(spec, 5)[0];
  const float initial9 = InitialRow(spec, 9)[0];
  auto stored = [](EmbeddingStore& store, uint64_t key) {
    std::vector<float> weights;
    bool stored = false;
    EXPECT_OK(store.GetRow("emb", key, &weights, &stored));
    return stored;
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->DeclareTable(spec).ok()) std::_Exit(1);
        // Two pushes (one naming the key twice, which counts once): held.
        if (!store->Push("emb", {5, 5}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->Push("emb", {5}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (stored(*store, 5)) std::_Exit(3);
        std::vector<float> row(2);
        if (!store->Pull("emb", {5}, absl::MakeSpan(row)).ok() ||
            row[0] != initial5)
          std::_Exit(4);
        // The third stores it with that push's gradient alone.
        if (!store->Push("emb", {5}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (!stored(*store, 5)) std::_Exit(5);
        // A stored key trains; a new one in the same push is held back.
        if (!store->Push("emb", {5, 9}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        const StoreStats stats = store->Stats();
        if (stats.rows_admitted != 1 || stats.keys_held_back != 3)
          std::_Exit(6);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // The push log holds only what was applied.
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 2)[0], initial5 - 2.0f);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {9}, 2)[0], initial9);
  EXPECT_FALSE(stored(*store, 9));

  TableSpec too_many = SgdTable("other", 2);
  too_many.set_admit_after(256);
  EXPECT_THAT(store->DeclareTable(too_many),
              StatusIs(StatusCode::kInvalidArgument));
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
    ASSERT_OK(store->DeclareTable(spec));
    ASSERT_OK(store->DeclareTable(counted));
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
  auto expired = store->Expire("emb");
  ASSERT_OK(expired);
  EXPECT_EQ(expired->rows_on_disk, old_keys.size());
  for (uint64_t key : old_keys) EXPECT_FALSE(stored(*store, "emb", key)) << key;
  for (uint64_t key : fresh_keys)
    EXPECT_TRUE(stored(*store, "emb", key)) << key;
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1000}, 4)[0],
                  InitialRow(spec, 1000)[0] - 1.0f);
  auto counted_expired = store->Expire("counted");
  ASSERT_OK(counted_expired);
  EXPECT_EQ(counted_expired->rows_on_disk, 1u);
  EXPECT_TRUE(stored(*store, "counted", 7));
  EXPECT_FALSE(stored(*store, "counted", 8));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.rows_expired_on_disk, old_keys.size() + 1);
  EXPECT_LE(stats.disk_bytes, disk_before);
  EXPECT_THAT(store->Expire("nope"), StatusIs(StatusCode::kNotFound));
  ASSERT_OK(store->DeclareTable(SgdTable("forever", 4)));
  EXPECT_THAT(store->Expire("forever"),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(EmbeddingStoreTest, ExpiredRowsLeaveTheHotTierByThemselves) {
  options_.durability = Durability::kPeriodic;
  options_.write_back_interval = absl::Milliseconds(200);
  options_.num_stripes = 2;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
  ASSERT_OK(store->DeclareTable(SgdTable("forever", 4)));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 50; ++key) keys.push_back(key);
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(200, 1.0f)));
  ASSERT_OK(store->Push("forever", keys, std::vector<float>(200, 1.0f)));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (store->Stats().rows_expired_in_memory < keys.size() &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(store->Stats().rows_expired_in_memory, keys.size());
  // The table without a ttl keeps its rows.
  EXPECT_FLOAT_EQ(PullRows(*store, "forever", {5}, 4)[0],
                  InitialRow(SgdTable("forever", 4), 5)[0] - 1.0f);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 4)[0], InitialRow(spec, 5)[0]);

  TableSpec bad = SgdTable("bad", 4);
  bad.set_evict_below_count(2);
  EXPECT_THAT(store->DeclareTable(bad), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(EmbeddingStoreTest, ExpireSweepsAWholeLargeStripeAPartAtATime) {
  // No background sweep: Expire() alone must find every expired row of a
  // stripe larger than one part of the sweep.
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 1;
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 40000; ++key) keys.push_back(key);
  ASSERT_OK(
      store->Push("emb", keys, std::vector<float>(keys.size() * 4, 1.0f)));
  ASSERT_OK(store->Flush());  // clean: expirable in memory
  absl::SleepFor(absl::Seconds(2.1));
  absl::StatusOr<ExpireOutcome> outcome = store->Expire("emb");
  ASSERT_OK(outcome);
  EXPECT_EQ(outcome->rows_in_memory, keys.size());
}

TEST_F(EmbeddingStoreTest, AnExpiredRowStillInTheHotTierReadsAsAbsent) {
  // No sweep runs in this test: only a lookup can find the row expired.
  options_.write_back_interval = absl::Hours(1);
  TableSpec spec = SgdTable("emb", 4);
  spec.set_row_ttl_s(1);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
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
        if (!store->DeclareTable(spec).ok()) std::_Exit(1);
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

TEST_F(EmbeddingStoreTest, AdmissionCountsOnlyPushesThatWereApplied) {
  // Key 8 rides along with key 7, whose update overflows to -inf: the push
  // is refused whole, twice (as a worker retries it). Neither refusal
  // counts key 8's push, so its next push is its first.
  TableSpec spec = SgdTable("emb", 1, /*learning_rate=*/4.0f);
  spec.set_admit_after(2);
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(spec));
  ASSERT_OK(store->Push("emb", {7}, {1.0f}));
  ASSERT_OK(store->Push("emb", {7}, {1.0f}));  // 7 is stored
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THAT(store->Push("emb", {7, 8}, {3e38f, 1.0f}),
                StatusIs(StatusCode::kInvalidArgument));
  }
  std::vector<float> weights;
  bool stored = true;
  ASSERT_OK(store->Push("emb", {8}, {1.0f}));
  ASSERT_OK(store->GetRow("emb", 8, &weights, &stored));
  EXPECT_FALSE(stored) << "the refused pushes counted";
  ASSERT_OK(store->Push("emb", {8}, {1.0f}));
  ASSERT_OK(store->GetRow("emb", 8, &weights, &stored));
  EXPECT_TRUE(stored);
  EXPECT_EQ(store->Stats().rows_admitted, 2u);
}

TEST_F(EmbeddingStoreTest, ARetryOfAnAppliedPushIsAnsweredAfterTheLogStopped) {
  options_.durability = Durability::kWal;
  auto store = OpenStore(options_);
  ASSERT_OK(store->DeclareTable(SgdTable("emb", 2)));
  PushOrigin origin;
  origin.worker = 3;
  origin.incarnation = 1;
  origin.sequence = 1;
  auto first = store->Push("emb", {5, 6}, {1, 1, 1, 1}, origin);
  ASSERT_OK(first);
  EXPECT_FALSE(first->duplicate);
  // The log's segment fails for good (EBADF on its next write).
  ASSERT_GT(MakeOpenFilesReadOnly("/push_log/"), 0);
  origin.sequence = 2;
  EXPECT_FALSE(store->Push("emb", {5}, {1, 1}, origin).ok());
  EXPECT_FALSE(store->PushLogHealth().ok());
  EXPECT_FALSE(IsTransient(store->PushLogHealth()));
  // The lost reply's retry gets the first answer, not the log's error.
  origin.sequence = 1;
  auto retried = store->Push("emb", {5, 6}, {1, 1, 1, 1}, origin);
  ASSERT_OK(retried);
  EXPECT_TRUE(retried->duplicate);
  EXPECT_EQ(retried->rows_updated, first->rows_updated);
  // A new push is still refused, and so is the one refused before.
  origin.sequence = 2;
  EXPECT_FALSE(store->Push("emb", {5}, {1, 1}, origin).ok());
}

TEST_F(EmbeddingStoreTest, AdmissionKnowsARowOnDiskIsStored) {
  TableSpec spec = SgdTable("emb", 8);
  spec.set_admit_after(2);
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(spec));
    ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));
    ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));  // stored
  }
  // After a restart the row is on disk only, and the counts are gone: the
  // push applies because the row is stored, not because of a count.
  auto store = OpenStore(options_);
  ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {7}, 8)[0],
                  InitialRow(spec, 7)[0] - 2.0f);
}

// Deletes `key` from RocksDB's default family in `dir` and puts `put_key`
// there: what a process stopped in the middle of a drop leaves.
::testing::AssertionResult ReplaceInRocksDb(const std::string& dir,
                                            const std::string& key,
                                            const std::string& put_key,
                                            const std::string& value) {
  return EditRocksDb(dir, [&](rocksdb::DB* db, const auto&, const auto&) {
    return db->Delete(rocksdb::WriteOptions(), key).ok() &&
           db->Put(rocksdb::WriteOptions(), put_key, value).ok();
  });
}

TEST_F(EmbeddingStoreTest,
       DroppingATableOfAStoreWithoutRecordedIdsKeepsTheOthers) {
  const TableSpec a = SgdTable("a", 2), b = SgdTable("b", 3),
                  c = SgdTable("c", 4);
  {
    auto store = OpenStore(options_);
    for (const TableSpec* spec : {&a, &b, &c}) {
      ASSERT_OK(store->DeclareTable(*spec));
      ASSERT_OK(store->Push(spec->name(), {1},
                            std::vector<float>(spec->dim(), 1.0f)));
    }
  }
  // A store written before ids were recorded: a table's id was its
  // family's place.
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(ReplaceInRocksDb(
        options_.data_dir, std::string("table_id/") + name, "unrelated", ""));
  }
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DropTable("b"));
  }
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->ListTables().size(), 2u);
    EXPECT_FLOAT_EQ(PullRows(*store, "a", {1}, 2)[0], InitialRow(a, 1)[0] - 1);
    EXPECT_FLOAT_EQ(PullRows(*store, "c", {1}, 4)[0], InitialRow(c, 1)[0] - 1);
  }
}

TEST_F(EmbeddingStoreTest, ADropStoppedHalfWayIsFinishedAtTheNextOpen) {
  const TableSpec gone = SgdTable("gone", 2);
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->DeclareTable(gone));
    ASSERT_OK(store->DeclareTable(SgdTable("kept", 2)));
    ASSERT_OK(store->Push("gone", {1}, {1.0f, 1.0f}));
    ASSERT_OK(store->Push("kept", {1}, {1.0f, 1.0f}));
  }
  // The tombstone written, the family not yet dropped. "gone" has id 0.
  ASSERT_TRUE(ReplaceInRocksDb(
      options_.data_dir, "table_spec/gone", "dropped_table/0000000000", [&] {
        TableSpec spec = gone;
        *spec.mutable_optimizer() = Optimizer::WithDefaults(spec.optimizer());
        return spec.SerializeAsString();
      }()));
  auto store = OpenStore(options_);
  ASSERT_NE(store, nullptr);
  const std::vector<TableStats> tables = store->ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].spec.name(), "kept");
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 2)[0],
                  InitialRow(SgdTable("kept", 2), 1)[0] - 1.0f);
  ASSERT_OK(store->DeclareTable(gone));
  EXPECT_FLOAT_EQ(PullRows(*store, "gone", {1}, 2)[0], InitialRow(gone, 1)[0]);
}

TEST_F(EmbeddingStoreTest, ADamagedPushLogIsRefusedUnlessToldToRecover) {
  options_.write_back_interval = absl::Hours(1);
  options_.max_push_log_bytes = 32 << 10;  // 4 KiB segments
  PushAndDie(options_, 30);
  const std::string log_dir = options_.data_dir + "/push_log";
  const std::vector<std::string> files = Files(log_dir);
  ASSERT_GE(files.size(), 3u);
  {
    std::fstream file(log_dir + "/" + files[0],
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('X');
  }
  auto refused = EmbeddingStore::Open(options_);
  EXPECT_THAT(refused.status(), StatusIs(StatusCode::kDataLoss));
  EXPECT_NE(refused.status().message().find(files[0]), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("point_in_time"), std::string::npos)
      << refused.status();
  options_.push_log_recovery = PushLogRecovery::kPointInTime;
  auto store = OpenStore(options_);
  EXPECT_GT(store->Stats().push_log_dropped_bytes, 4000u);
  // What precedes the damage is there: fewer than 30 steps, more than none.
  const float moved =
      PullRows(*store, "emb", {4}, 2)[0] - InitialRow(SgdTable("emb", 2), 4)[0];
  EXPECT_LT(moved, 30.0f);
}

TEST_F(EmbeddingStoreTest, RecordsWrittenWithoutAHeaderStillReplay) {
  TableId table = 0;
  {
    auto store = OpenStore(options_);  // log epoch 1 from here
    ASSERT_OK(store->DeclareTable(SgdTable("emb", 2)));
  }
  // A record as versions before record headers wrote it: one section
  // (table, stripe, count, sequence, keys, gradients) in epoch 1.
  std::string record;
  const uint32_t header[3] = {table, 0, 1};
  const uint64_t sequence = 7, key = 42;
  const float gradient[2] = {-1.0f, -2.0f};
  record.append(reinterpret_cast<const char*>(header), sizeof(header));
  record.append(reinterpret_cast<const char*>(&sequence), sizeof(sequence));
  record.append(reinterpret_cast<const char*>(&key), sizeof(key));
  record.append(reinterpret_cast<const char*>(gradient), sizeof(gradient));
  {
    PushLogOptions log_options;
    log_options.dir = options_.data_dir + "/push_log";
    auto log = PushLog::Open(log_options);
    ASSERT_OK(log);
    (*log)->StartEpoch(1);
    ASSERT_OK((*log)->Append(record));
  }
  auto store = OpenStore(options_);
  const std::vector<float> initial = InitialRow(SgdTable("emb", 2), 42);
  EXPECT_EQ(PullRows(*store, "emb", {42}, 2),
            (std::vector<float>{initial[0] + 1.0f, initial[1] + 2.0f}));
}

}  // namespace
}  // namespace ps::embedding
