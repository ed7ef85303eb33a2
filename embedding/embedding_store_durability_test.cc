// EmbeddingStore's durability under --durability=wal: the push log replayed
// after a crash (once, above each stripe's mark, across stripe counts),
// logs that do not belong to the rows, a full disk, a long log, damaged
// records, and records in the format of older data dirs.

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/transient_error.h"
#include "base/wait_until.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/push_log.h"
#include "embedding/row_cache.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

// Pushes SGD steps of -1 to keys 0..9 of a dim-2 table in a child process
// that exits as if killed: only the push log holds the updates.
void PushAndDie(const StoreOptions& options, int pushes) {
  auto child = [&] {
    auto store = OpenStore(options);
    if (!store->tables().DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
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

// The reference a crash test compares against: declares `spec` in a store
// beside options.data_dir (its name with "_reference" appended), runs `push`
// on it, and sets `*expected` to the weights of `keys` the pushes leave; the
// store closes cleanly.
void PushInAReferenceStore(const StoreOptions& options, const TableSpec& spec,
                           const std::function<void(EmbeddingStore&)>& push,
                           const std::vector<uint64_t>& keys,
                           std::vector<float>* expected) {
  StoreOptions reference_options = options;
  reference_options.data_dir += "_reference";
  auto reference = OpenStore(reference_options);
  ASSERT_OK(reference->tables().DeclareTable(spec));
  push(*reference);
  *expected = PullRows(*reference, spec.name(), keys, spec.dim());
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
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
  std::vector<float> expected;
  ASSERT_NO_FATAL_FAILURE(
      PushInAReferenceStore(options_, spec, push_rounds, keys, &expected));
  // A child process pushes under kWal and exits without writing a row back,
  // as if killed: only the push log holds its updates.
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 4;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->tables().DeclareTable(spec).ok()) std::_Exit(1);
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

TEST_F(EmbeddingStoreTest, SegmentsOfAReplayedRunAreNeverReadAgain) {
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
  // As if the replaying process died after recording the new run but
  // before deleting the old segments: they must go unread.
  for (const std::string& file : Files(saved)) {
    std::filesystem::copy_file(saved + "/" + file, log_dir + "/" + file,
                               std::filesystem::copy_options::skip_existing);
  }
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {4}, 2)[0], initial + 3.0f);
  const std::vector<std::string> saved_files = Files(saved);
  for (const std::string& file : Files(log_dir)) {
    EXPECT_EQ(std::count(saved_files.begin(), saved_files.end(), file), 0)
        << file << " survived";
  }
}

TEST_F(EmbeddingStoreTest, ALogNewerThanTheRowsIsRefused) {
  options_.write_back_interval = absl::Hours(1);
  PushAndDie(options_, 1);
  const std::string log_dir = options_.data_dir + "/push_log";
  const std::vector<std::string> files = Files(log_dir);
  ASSERT_EQ(files.size(), 1u);
  // A segment from another store's later run, say.
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
  ASSERT_NO_FATAL_FAILURE(
      PushInAReferenceStore(options_, spec, push_rounds, keys, &expected));
  // A hot tier of ~4 rows per stripe: dirty rows are evicted (and written
  // alone, without a mark) on almost every push; no write-back by the clock.
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.num_stripes = 2;
  options_.cache_bytes = 2 * 4 * RowCache::RowBytes(3 + 3);
  auto child = [&] {
    auto store = OpenStore(options_);
    if (!store->tables().DeclareTable(spec).ok()) std::_Exit(1);
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
    ASSERT_OK(store->tables().DeclareTable(spec));
  }
  // What versions before rows carried their log position stored: the row's
  // floats alone (2 weights; SGD keeps no state).
  const uint64_t key = 42;
  const float row[2] = {1.5f, -2.5f};
  ASSERT_TRUE(PutInRocksDb(
      options_.data_dir, "table.emb",
      absl::string_view(reinterpret_cast<const char*>(&key), sizeof(key)),
      absl::string_view(reinterpret_cast<const char*>(row), sizeof(row))));
  // Such versions also keyed rows by their 8 bytes alone.
  ASSERT_TRUE(StoreRowsUnderOldKeys(options_.data_dir));
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
    if (!store->tables().DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
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
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 8)));
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 500; ++key) keys.push_back(key);
  // 200 pushes log ~200 x 500 x (8 + 32) bytes = 4 MB, 60x the bound.
  for (int push = 0; push < 200; ++push) {
    ASSERT_OK(store->Push("emb", keys, std::vector<float>(500 * 8, 0.01f)));
  }
  // The flusher catches up within moments; one push per stripe over its
  // share is allowed.
  WaitUntil(
      [&] { return store->Stats().push_log_bytes <= (64 << 10) + 500 * 40; },
      absl::Seconds(10));
  EXPECT_LE(store->Stats().push_log_bytes, (64u << 10) + 500 * 40);
  const std::vector<float> row = PullRows(*store, "emb", {7}, 8);
  // 200 SGD steps of 0.01 (rounded once per step).
  EXPECT_NEAR(row[0], InitialRow(SgdTable("emb", 8), 7)[0] - 200 * 0.01f, 1e-4);
}

TEST_F(EmbeddingStoreTest, AFailedLogWriteAppliesNothingOfItsPush) {
  options_.write_back_interval = absl::Hours(1);
  auto child = [&] {
    auto store = OpenStore(options_);
    if (!store->tables().DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
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
    auto store = OpenStore(options_);  // log run 1 from here
    ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 2)));
  }
  // A record as versions before record headers wrote it: one section
  // (table, stripe, count, sequence, keys, gradients) in run 1.
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
    (*log)->StartRun(1);
    ASSERT_OK((*log)->Append(record));
  }
  auto store = OpenStore(options_);
  const std::vector<float> initial = InitialRow(SgdTable("emb", 2), 42);
  EXPECT_EQ(PullRows(*store, "emb", {42}, 2),
            (std::vector<float>{initial[0] + 1.0f, initial[1] + 2.0f}));
}

}  // namespace
}  // namespace ps::embedding
