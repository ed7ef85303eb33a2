#include "client/retry_policy.h"

#include <optional>

#include "absl/random/random.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps::client {
namespace {

TEST(IsRetryableTest, RetriesWhatGoesAwayOnItsOwn) {
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kUnavailable, false));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kDeadlineExceeded, false));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kCancelled, false));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kResourceExhausted, true));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kResourceExhausted, false));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kInvalidArgument, false));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kFailedPrecondition, false));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kPermissionDenied, false));
}

TEST(RetryScheduleTest, BackoffDoublesUpToItsCapWithJitter) {
  RetryOptions options;
  options.retry_for = absl::Hours(1);
  options.initial_backoff = absl::Milliseconds(100);
  options.max_backoff = absl::Milliseconds(700);
  const absl::Time start = absl::UnixEpoch();
  RetrySchedule schedule(options, start);
  absl::BitGen random;
  const absl::Duration expected[] = {
      absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
      absl::Milliseconds(700), absl::Milliseconds(700)};
  for (absl::Duration backoff : expected) {
    const std::optional<absl::Duration> wait = schedule.NextWait(start, random);
    ASSERT_TRUE(wait.has_value());
    EXPECT_GE(*wait, backoff / 2);
    EXPECT_LE(*wait, backoff);
  }
}

TEST(RetryScheduleTest, JitterSpreadsTheWaits) {
  RetryOptions options;
  options.initial_backoff = absl::Seconds(1);
  options.max_backoff = absl::Seconds(1);
  RetrySchedule schedule(options, absl::UnixEpoch());
  absl::BitGen random;
  absl::Duration shortest = absl::InfiniteDuration();
  absl::Duration longest = absl::ZeroDuration();
  for (int i = 0; i < 200; ++i) {
    const absl::Duration wait = *schedule.NextWait(absl::UnixEpoch(), random);
    shortest = std::min(shortest, wait);
    longest = std::max(longest, wait);
  }
  // 200 draws over [0.5 s, 1 s): the spread is far over 100 ms.
  EXPECT_GT(longest - shortest, absl::Milliseconds(300));
}

TEST(RetryScheduleTest, GivesUpWhenTheWaitWouldPassTheDeadline) {
  RetryOptions options;
  options.retry_for = absl::Seconds(1);
  options.initial_backoff = absl::Milliseconds(400);
  options.max_backoff = absl::Seconds(2);
  const absl::Time start = absl::UnixEpoch();
  RetrySchedule schedule(options, start);
  absl::BitGen random;
  EXPECT_TRUE(schedule.NextWait(start, random).has_value());  // 400 ms
  // The next backoff (800 ms) from 300 ms in ends past 1 s.
  EXPECT_FALSE(
      schedule.NextWait(start + absl::Milliseconds(300), random).has_value());
  EXPECT_TRUE(
      schedule.NextWait(start + absl::Milliseconds(200), random).has_value());
}

TEST(RetryScheduleTest, NoRetriesWithoutTime) {
  RetryOptions options;
  options.retry_for = absl::ZeroDuration();
  RetrySchedule schedule(options, absl::UnixEpoch());
  absl::BitGen random;
  EXPECT_FALSE(schedule.NextWait(absl::UnixEpoch(), random).has_value());
}

TEST(RetryCountsTest, CountsByCodeAndLeavesOutCodesNeverSeen) {
  RetryCounts counts;
  EXPECT_TRUE(counts.ByCode().empty());
  counts.Add(absl::StatusCode::kUnavailable);
  counts.Add(absl::StatusCode::kDeadlineExceeded);
  counts.Add(absl::StatusCode::kUnavailable);
  const auto by_code = counts.ByCode();
  ASSERT_EQ(by_code.size(), 2u);
  EXPECT_EQ(by_code[0].first, "DEADLINE_EXCEEDED");
  EXPECT_EQ(by_code[0].second, 1u);
  EXPECT_EQ(by_code[1].first, "UNAVAILABLE");
  EXPECT_EQ(by_code[1].second, 2u);
}

}  // namespace
}  // namespace ps::client
