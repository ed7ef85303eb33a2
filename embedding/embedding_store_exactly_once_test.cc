// EmbeddingStore's exactly-once pushes: a push that names its origin is
// applied once however often it arrives, across crashes, restarts and
// deleted log segments, and after the push log stopped.

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/test_faults.h"
#include "base/transient_error.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/push_ledger.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

PushOrigin Origin(uint64_t sequence, uint64_t incarnation = 1000) {
  PushOrigin origin;
  origin.worker = 3;
  origin.incarnation = incarnation;
  origin.sequence = sequence;
  return origin;
}

// Pushes -1 to keys 0..9 of dim-2 table "emb" with origins 1..pushes, in a
// child that then dies without writing anything back.
void PushWithOriginsAndDie(const StoreOptions& options, int pushes,
                           bool wait_for_deleted_segments = false) {
  auto child = [&] {
    auto store = OpenStore(options);
    if (!store->tables().DeclareTable(SgdTable("emb", 2)).ok()) std::_Exit(1);
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

TEST_F(EmbeddingStoreTest, ARetriedPushIsAppliedOnce) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 2)));
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
  { auto store = OpenStore(options_); }  // replays, starts a new run
  { auto store = OpenStore(options_); }  // clean: the run's ledger only
  ExpectEveryRetryIsADuplicate(options_, 5);
}

TEST_F(EmbeddingStoreTest, ARetryOfAnAppliedPushIsAnsweredAfterTheLogStopped) {
  options_.durability = Durability::kWal;
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("emb", 2)));
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

}  // namespace
}  // namespace ps::embedding
