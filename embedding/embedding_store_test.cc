// EmbeddingStore's basics: declaring tables, pulls and pushes and what they
// refuse, the hot tier over RocksDB, reopening, learning rates set live,
// and dropping tables.

#include "embedding/embedding_store.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/optimizer.h"
#include "base/status_matchers.h"
#include "embedding/chunk_arena.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/row_cache.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "rocksdb/db.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

// Resident set size of this process, from /proc.
size_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

TEST_F(EmbeddingStoreTest, DeclareIsIdempotentAndRejectsConflicts) {
  auto store = OpenStore(options_);
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("emb", 8)), IsOk());
  auto again = store->tables().DeclareTable(SgdTable("emb", 8));
  ASSERT_OK(again);
  EXPECT_FALSE(*again);
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("emb", 16)),
              StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("emb", 8, 0.5f)),
              StatusIs(StatusCode::kAlreadyExists));
  // The refusal names what differs: for a model spec, its first line that
  // does.
  TableSpec with_spec = SgdTable("m.t", 8);
  with_spec.mutable_model()->set_kind(ModelCard::SPEC);
  with_spec.mutable_model()->set_model_spec(
      "name: \"m\"\ntable { name: \"t\" dim: 8 }\noutput: \"a\"\n");
  ASSERT_OK(store->tables().DeclareTable(with_spec));
  TableSpec other = with_spec;
  other.mutable_model()->set_model_spec(
      "name: \"m\"\ntable { name: \"t\" dim: 8 }\noutput: \"b\"\n");
  other.set_dim(16);
  const absl::StatusOr<bool> refused = store->tables().DeclareTable(other);
  ASSERT_THAT(refused, StatusIs(StatusCode::kAlreadyExists));
  EXPECT_NE(refused.status().message().find("dim"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find(
                "the model spec from line 3: have \"output: \"a\"\", "
                "asked for \"output: \"b\"\""),
            std::string::npos)
      << refused.status();
}

// A card from before cards recorded a seq column's value limit matches the
// same card with it (the stored spec is kept); two recorded limits must
// agree.
TEST_F(EmbeddingStoreTest, DeclareMatchesACardThatDoesNotRecordTheLimit) {
  auto store = OpenStore(options_);
  TableSpec unrecorded = SgdTable("s.t", 8);
  unrecorded.mutable_model()->set_input_layout(
      "format=tsv header=0 columns=label,cat,seq:0 multi_separator=| "
      "multi_pooling=sum crosses=");
  ASSERT_OK(store->tables().DeclareTable(unrecorded));
  TableSpec limited = unrecorded;
  limited.mutable_model()->set_max_values_per_field(10);
  const absl::StatusOr<bool> matched = store->tables().DeclareTable(limited);
  ASSERT_OK(matched);
  EXPECT_FALSE(*matched);
  TableSpec other_layout = limited;
  other_layout.mutable_model()->set_input_layout("criteo");
  EXPECT_THAT(store->tables().DeclareTable(other_layout),
              StatusIs(StatusCode::kAlreadyExists));

  TableSpec limited_u = limited;
  limited_u.set_name("s.u");
  ASSERT_OK(store->tables().DeclareTable(limited_u));
  TableSpec other_limit = limited_u;
  other_limit.mutable_model()->set_max_values_per_field(20);
  const absl::StatusOr<bool> refused =
      store->tables().DeclareTable(other_limit);
  EXPECT_THAT(refused, StatusIs(StatusCode::kAlreadyExists));
  EXPECT_NE(refused.status().message().find(
                "reads the 10 most recent values of a history, asked for 20: "
                "resume with --max_values_per_field=10"),
            std::string::npos)
      << refused.status();
}

TEST_F(EmbeddingStoreTest, DeclareValidatesTheSpec) {
  options_.max_dim = 64;
  auto store = OpenStore(options_);
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("", 8)),
              StatusIs(StatusCode::kInvalidArgument));
  // A table names files of exports and checkpoints: never a path.
  for (const char* name : {"a/b", "..", ".", ".hidden", "-rf", "a..b"}) {
    EXPECT_THAT(store->tables().DeclareTable(SgdTable(name, 8)),
                StatusIs(StatusCode::kInvalidArgument))
        << name;
  }
  EXPECT_THAT(
      store->tables().DeclareTable(SgdTable("wide_deep.dense.mlp-0", 8)),
      IsOk());
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("zero", 0)),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("huge", 65)),
              StatusIs(StatusCode::kResourceExhausted));
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("negative_rate", 8, -1.0f)),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->tables().GetTableSpec("huge"),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(EmbeddingStoreTest, MaxTablesIsEnforced) {
  options_.max_tables = 2;
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("a", 4)));
  ASSERT_OK(store->tables().DeclareTable(SgdTable("b", 4)));
  EXPECT_THAT(store->tables().DeclareTable(SgdTable("c", 4)),
              StatusIs(StatusCode::kResourceExhausted));
}

TEST_F(EmbeddingStoreTest, NeverPushedKeysReturnInitialValuesAndAreNotStored) {
  auto store = OpenStore(options_);
  const TableSpec spec = SgdTable("emb", 4);
  ASSERT_OK(store->tables().DeclareTable(spec));
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
  EXPECT_EQ(store->tables().ListTables()[0].estimated_rows, 0u);
}

TEST_F(EmbeddingStoreTest, PullChecksTableAndOutputSize) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 4)));
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
  ASSERT_OK(store->tables().DeclareTable(spec));
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

TEST_F(EmbeddingStoreTest, RowsLieOnHugePageRegionsUnlessToldNot) {
  // Dim 33 SGD: a chunk size no other test in this binary allocates.
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> gradients(keys.size() * 33, 0.5f);
  const uint64_t before = ChunkArena::Global().mapped_bytes();
  {
    StoreOptions plain = options_;
    plain.hot_tier_huge_pages = false;
    auto store = OpenStore(plain);
    ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 33, 0.1f)));
    ASSERT_OK(store->Push("emb", keys, gradients));
    EXPECT_EQ(store->Stats().hot_tier_mapped_bytes, before);
  }
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 33, 0.1f)));
  ASSERT_OK(store->Push("emb", keys, gradients));
  // The three keys' stripes took a chunk each, of one region at least.
  EXPECT_GE(store->Stats().hot_tier_mapped_bytes,
            before + ChunkArena::kRegionBytes);
}

TEST_F(EmbeddingStoreTest, APushsLearningRateScaleScalesItsStep) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 2, 0.5f)));
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
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 2)));
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
  ASSERT_OK(store->tables().DeclareTable(spec));
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
  ASSERT_OK(store->tables().DeclareTable(spec));
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
  EXPECT_GT(store->tables().ListTables()[0].estimated_rows, kRows / 2);
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
  ASSERT_OK(store->tables().DeclareTable(SgdTable("a", 16)));
  ASSERT_OK(store->tables().DeclareTable(SgdTable("b", 16)));
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
      ASSERT_OK(store->tables().DeclareTable(spec));
      ASSERT_OK(store->Push("emb", {1, 2}, {1, 2, 3, 4, 5, 6}));
      expected = PullRows(*store, "emb", {1, 2}, 3);
    }
    auto store = OpenStore(options_);
    auto reopened = store->tables().GetTableSpec("emb");
    ASSERT_OK(reopened);
    EXPECT_EQ(reopened->dim(), 3u);
    EXPECT_EQ(PullRows(*store, "emb", {1, 2}, 3), expected);
    // Declaring the same table again after a restart is not a conflict.
    auto again = store->tables().DeclareTable(spec);
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
    ASSERT_OK(store->tables().DeclareTable(spec));
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
  ASSERT_OK(store->tables().DeclareTable(spec));
  ASSERT_OK(store->Push("emb", keys, std::vector<float>(500 * 4, -1.0f)));
  const std::vector<float> rows = PullRows(*store, "emb", keys, 4);
  EXPECT_GT(store->Stats().disk_lookups, 0u);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FLOAT_EQ(rows[4 * i], InitialRow(spec, keys[i])[0] + 1.0f)
        << "key " << i;
  }
}

TEST_F(EmbeddingStoreTest, ConcurrentPushesLoseNoUpdate) {
  options_.cache_bytes = 256 * RowCache::RowBytes(1);  // force eviction too
  options_.num_stripes = 8;
  auto store = OpenStore(options_);
  TableSpec spec = SgdTable("counter", 1);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  ASSERT_OK(store->tables().DeclareTable(spec));
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

TEST_F(EmbeddingStoreTest, GradientsThatSumToInfinityAreRefusedWhole) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 1)));
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
  ASSERT_OK(store->tables().DeclareTable(spec));
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

}  // namespace
}  // namespace ps::embedding
