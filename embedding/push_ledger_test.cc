#include "embedding/push_ledger.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

PushOrigin Origin(uint32_t worker, uint64_t incarnation, uint64_t sequence) {
  PushOrigin origin;
  origin.worker = worker;
  origin.incarnation = incarnation;
  origin.sequence = sequence;
  return origin;
}

// Claims and finishes `origin` as applied; returns whether it was new.
bool Apply(PushLedger& ledger, const PushOrigin& origin, uint32_t rows) {
  absl::StatusOr<PushLedger::Claim> claim = ledger.Begin(origin);
  EXPECT_OK(claim);
  if (!claim.ok() || claim->duplicate) return false;
  ledger.Finish(origin, /*applied=*/true, rows);
  return true;
}

TEST(PushLedgerTest, ARetryIsAnsweredWithTheFirstAnswer) {
  PushLedger ledger;
  EXPECT_TRUE(Apply(ledger, Origin(3, 100, 1), 42));
  absl::StatusOr<PushLedger::Claim> retry = ledger.Begin(Origin(3, 100, 1));
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->rows_updated, 42u);
  // Another sequence, worker or incarnation is a different push.
  EXPECT_TRUE(Apply(ledger, Origin(3, 100, 2), 1));
  EXPECT_TRUE(Apply(ledger, Origin(4, 100, 1), 1));
  EXPECT_TRUE(Apply(ledger, Origin(3, 101, 1), 1));
}

TEST(PushLedgerTest, AppliedAnswersWithoutClaiming) {
  PushLedger ledger;
  EXPECT_EQ(*ledger.Applied(Origin(3, 100, 1)), std::nullopt);
  EXPECT_TRUE(Apply(ledger, Origin(3, 100, 1), 42));
  EXPECT_EQ(*ledger.Applied(Origin(3, 100, 1)), std::optional<uint32_t>(42));
  EXPECT_EQ(*ledger.Applied(Origin(3, 101, 1)), std::nullopt);
  EXPECT_EQ(*ledger.Applied(Origin(4, 100, 1)), std::nullopt);
  ASSERT_OK(ledger.Begin(Origin(3, 100, 2)));
  ledger.Finish(Origin(3, 100, 2), /*applied=*/false, 0);
  EXPECT_EQ(*ledger.Applied(Origin(3, 100, 2)), std::nullopt);
  // Asking claimed nothing: the push is new to Begin().
  EXPECT_EQ(*ledger.Applied(Origin(3, 100, 3)), std::nullopt);
  EXPECT_TRUE(Apply(ledger, Origin(3, 100, 3), 1));
  // A newer incarnation supersedes: the older one's pushes are refused.
  EXPECT_TRUE(Apply(ledger, Origin(3, 200, 1), 1));
  EXPECT_THAT(ledger.Applied(Origin(3, 100, 1)),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST(PushLedgerTest, AppliedCannotTellForSequencesThatLeftTheWindow) {
  PushLedger ledger(/*max_workers=*/4, /*window=*/4);
  // Sequence 1 never arrives: every later one stays above applied_through,
  // and the oldest leave the window as later ones come.
  for (uint64_t sequence = 2; sequence <= 12; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 7, sequence), 1));
  EXPECT_THAT(ledger.Applied(Origin(0, 7, 3)), StatusIs(StatusCode::kAborted));
  EXPECT_EQ(*ledger.Applied(Origin(0, 7, 12)), std::optional<uint32_t>(1));
  EXPECT_EQ(*ledger.Applied(Origin(0, 7, 13)), std::nullopt);
}

TEST(PushLedgerTest, AppliedWaitsForAnAttemptInFlight) {
  PushLedger ledger;
  ASSERT_OK(ledger.Begin(Origin(0, 7, 1)));
  std::optional<uint32_t> answer;
  std::thread asker([&] { answer = *ledger.Applied(Origin(0, 7, 1)); });
  absl::SleepFor(absl::Milliseconds(50));
  ledger.Finish(Origin(0, 7, 1), /*applied=*/true, 9);
  asker.join();
  EXPECT_EQ(answer, std::optional<uint32_t>(9));
}

TEST(PushLedgerTest, SequencesMayArriveOutOfOrder) {
  PushLedger ledger;
  EXPECT_TRUE(Apply(ledger, Origin(0, 7, 3), 1));
  EXPECT_TRUE(Apply(ledger, Origin(0, 7, 1), 1));
  EXPECT_TRUE(Apply(ledger, Origin(0, 7, 2), 1));
  EXPECT_FALSE(Apply(ledger, Origin(0, 7, 1), 1));
}

TEST(PushLedgerTest, AFailedAttemptCanBeRetried) {
  PushLedger ledger;
  ASSERT_OK(ledger.Begin(Origin(0, 7, 1)));
  ledger.Finish(Origin(0, 7, 1), /*applied=*/false, 0);
  EXPECT_TRUE(Apply(ledger, Origin(0, 7, 1), 5));
}

TEST(PushLedgerTest, WhatTheLogHoldsStaysAppliedEvenIfTheAttemptFails) {
  PushLedger ledger;
  ASSERT_OK(ledger.Begin(Origin(0, 7, 1)));
  ledger.MarkWritten(Origin(0, 7, 1), 9);
  ledger.Finish(Origin(0, 7, 1), /*applied=*/false, 0);
  absl::StatusOr<PushLedger::Claim> retry = ledger.Begin(Origin(0, 7, 1));
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->rows_updated, 9u);
}

TEST(PushLedgerTest, ARetryWhileTheFirstAttemptRunsWaitsForIt) {
  PushLedger ledger;
  ASSERT_OK(ledger.Begin(Origin(1, 5, 8)));
  std::atomic<bool> returned{false};
  absl::StatusOr<PushLedger::Claim> retry;
  std::thread retrier([&] {
    retry = ledger.Begin(Origin(1, 5, 8));
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(returned.load()) << "the retry did not wait for the first";
  ledger.Finish(Origin(1, 5, 8), /*applied=*/true, 77);
  retrier.join();
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->rows_updated, 77u);
}

TEST(PushLedgerTest, AnOlderIncarnationIsRefused) {
  PushLedger ledger;
  EXPECT_TRUE(Apply(ledger, Origin(2, 200, 1), 1));
  EXPECT_THAT(ledger.Begin(Origin(2, 100, 2)),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST(PushLedgerTest, TheWindowIsBoundedAndOldSequencesCountAsApplied) {
  PushLedger ledger(/*max_workers=*/8, /*window=*/4);
  for (uint64_t sequence = 1; sequence <= 10; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 1));
  // 1..6 left the window, all applied: duplicates whose answer is
  // forgotten.
  absl::StatusOr<PushLedger::Claim> old = ledger.Begin(Origin(0, 1, 2));
  ASSERT_OK(old);
  EXPECT_TRUE(old->duplicate);
  EXPECT_EQ(old->rows_updated, 0u);
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 9), 1));
  EXPECT_TRUE(Apply(ledger, Origin(0, 1, 11), 1));
}

TEST(PushLedgerTest, AnOldSequenceThatMayNeverHaveBeenAppliedIsRefused) {
  PushLedger ledger(/*max_workers=*/8, /*window=*/4);
  // 1 never arrives (or failed); 2..10 are applied and 2..6 leave the window.
  for (uint64_t sequence = 2; sequence <= 10; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 1));
  EXPECT_THAT(ledger.Begin(Origin(0, 1, 1)), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(ledger.Begin(Origin(0, 1, 4)), StatusIs(StatusCode::kAborted));
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 8), 1));  // still remembered
}

TEST(PushLedgerTest, ARefusedPushIsAppliedWhenItsRetryComesLate) {
  PushLedger ledger(/*max_workers=*/8, /*window=*/4);
  // 1 is refused (busy); 2..20 are applied before its retry comes, far
  // past the window: the retry is applied, not ABORTED.
  ASSERT_OK(ledger.Begin(Origin(0, 1, 1)));
  ledger.Finish(Origin(0, 1, 1), /*applied=*/false, 0);
  for (uint64_t sequence = 2; sequence <= 20; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 1));
  EXPECT_TRUE(Apply(ledger, Origin(0, 1, 1), 1));
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 1), 1));  // now a duplicate
  // Past the bound (16 windows), a refusal whose retry never came is
  // forgotten: memory stays bounded, and a retry that late is ABORTED.
  ASSERT_OK(ledger.Begin(Origin(0, 1, 21)));
  ledger.Finish(Origin(0, 1, 21), /*applied=*/false, 0);
  for (uint64_t sequence = 22; sequence <= 22 + 16 * 4; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 1));
  EXPECT_THAT(ledger.Begin(Origin(0, 1, 21)), StatusIs(StatusCode::kAborted));
}

TEST(PushLedgerTest, APushRefusedBeforeItsClaimIsAppliedWhenItsRetryComes) {
  // The shard was busy: sequence 1 never reached Begin(), the data plane
  // noted its refusal; 2..20 are applied before the retry.
  PushLedger ledger(/*max_workers=*/8, /*window=*/4);
  ledger.NoteRefused(Origin(0, 1, 1));
  for (uint64_t sequence = 2; sequence <= 20; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 1));
  EXPECT_TRUE(Apply(ledger, Origin(0, 1, 1), 1));
  // Noting a sequence already applied changes nothing.
  ledger.NoteRefused(Origin(0, 1, 5));
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 5), 1));
}

TEST(PushLedgerTest, SequenceZeroIsRefused) {
  PushLedger ledger;
  EXPECT_THAT(ledger.Begin(Origin(0, 1, 0)),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(PushLedgerTest, TheWorkerHeardFromLongestAgoIsForgottenPastTheBound) {
  PushLedger ledger(/*max_workers=*/2);
  EXPECT_TRUE(Apply(ledger, Origin(0, 1, 1), 1));
  EXPECT_TRUE(Apply(ledger, Origin(1, 1, 1), 1));
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 1), 1));  // worker 0 used last
  EXPECT_TRUE(Apply(ledger, Origin(2, 1, 1), 1));
  EXPECT_EQ(ledger.workers(), 2u);
  EXPECT_FALSE(Apply(ledger, Origin(0, 1, 1), 1));  // kept
  EXPECT_TRUE(Apply(ledger, Origin(1, 1, 1), 1));   // forgotten
}

TEST(PushLedgerTest, ASnapshotBringsBackWrittenPushesButNotClaimsInFlight) {
  PushLedger ledger(/*max_workers=*/8, /*window=*/4);
  for (uint64_t sequence = 1; sequence <= 6; ++sequence)
    EXPECT_TRUE(Apply(ledger, Origin(0, 1, sequence), 10 + sequence));
  ASSERT_OK(ledger.Begin(Origin(1, 3, 1)));  // in flight, never written
  ASSERT_OK(ledger.Begin(Origin(1, 3, 2)));
  ledger.MarkWritten(Origin(1, 3, 2), 4);  // written, not yet answered

  PushLedger restored(/*max_workers=*/8, /*window=*/4);
  ASSERT_OK(restored.Merge(ledger.Serialize()));
  EXPECT_FALSE(Apply(restored, Origin(0, 1, 1), 0));  // applied through 6
  absl::StatusOr<PushLedger::Claim> kept = restored.Begin(Origin(0, 1, 6));
  ASSERT_OK(kept);
  EXPECT_TRUE(kept->duplicate);
  EXPECT_EQ(kept->rows_updated, 16u);
  EXPECT_TRUE(Apply(restored, Origin(1, 3, 1), 1));
  EXPECT_FALSE(Apply(restored, Origin(1, 3, 2), 1));
  EXPECT_TRUE(Apply(restored, Origin(0, 1, 7), 1));
}

TEST(PushLedgerTest, MergingKeepsTheNewerIncarnation) {
  PushLedger old_run, new_run;
  EXPECT_TRUE(Apply(old_run, Origin(0, 1, 1), 1));
  EXPECT_TRUE(Apply(new_run, Origin(0, 2, 5), 1));
  PushLedger merged;
  ASSERT_OK(merged.Merge(new_run.Serialize()));
  ASSERT_OK(merged.Merge(old_run.Serialize()));
  EXPECT_THAT(merged.Begin(Origin(0, 1, 2)),
              StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_FALSE(Apply(merged, Origin(0, 2, 5), 1));
}

TEST(PushLedgerTest, TheSameLedgerGivesTheSameBytes) {
  // The same pushes from many workers, arriving in opposite orders.
  PushLedger forward(/*max_workers=*/64), backward(/*max_workers=*/64);
  for (uint32_t worker = 0; worker < 40; ++worker) {
    EXPECT_TRUE(Apply(forward, Origin(worker, 1, 1), worker));
    EXPECT_TRUE(Apply(backward, Origin(39 - worker, 1, 1), 39 - worker));
  }
  EXPECT_EQ(forward.Serialize(), backward.Serialize());
  // The workers are in id order (a hash map's order differs from process
  // to process). Each is: u32 id, u64 incarnation, applied through and
  // forgotten below, u32 entries of (u64 sequence, u32 rows).
  const std::string bytes = forward.Serialize();
  size_t at = 0;
  auto read = [&](auto* value) {
    ASSERT_LE(at + sizeof(*value), bytes.size());
    std::memcpy(value, bytes.data() + at, sizeof(*value));
    at += sizeof(*value);
  };
  uint32_t workers = 0;
  read(&workers);
  ASSERT_EQ(workers, 40u);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < workers; ++i) {
    uint32_t id = 0, entries = 0;
    uint64_t skipped = 0;
    read(&id);
    for (int field = 0; field < 3; ++field) read(&skipped);
    read(&entries);
    at += entries * (sizeof(uint64_t) + sizeof(uint32_t));
    ids.push_back(id);
  }
  EXPECT_EQ(at, bytes.size());
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  PushLedger merged(/*max_workers=*/64);
  ASSERT_OK(merged.Merge(backward.Serialize()));
  EXPECT_EQ(merged.Serialize(), forward.Serialize());
}

TEST(PushLedgerTest, GarbageIsDataLoss) {
  PushLedger ledger;
  EXPECT_TRUE(Apply(ledger, Origin(0, 1, 1), 1));
  const std::string bytes = ledger.Serialize();
  PushLedger other;
  EXPECT_THAT(other.Merge(bytes.substr(0, bytes.size() - 1)),
              StatusIs(StatusCode::kDataLoss));
  EXPECT_THAT(other.Merge(bytes + "x"), StatusIs(StatusCode::kDataLoss));
  EXPECT_THAT(other.Merge(""), StatusIs(StatusCode::kDataLoss));
}

}  // namespace
}  // namespace ps::embedding
