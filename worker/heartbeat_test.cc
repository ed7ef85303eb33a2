#include "worker/heartbeat.h"

#include <atomic>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

TEST(HeartbeatTest, BeatsEveryPeriodThroughFailuresUntilStopped) {
  std::atomic<int> beats{0};
  std::atomic<int64_t> retry_for_ms{0};
  Heartbeat heartbeat(
      absl::Milliseconds(10),
      [&](absl::Duration retry_for) {
        retry_for_ms = absl::ToInt64Milliseconds(retry_for);
        // Every other beat fails: the beats go on.
        return ++beats % 2 == 0 ? absl::OkStatus()
                                : absl::UnavailableError("coordinator down");
      },
      "[worker 0]");
  EXPECT_TRUE(WaitUntil([&] { return beats.load() >= 4; }, absl::Seconds(30),
                        absl::Milliseconds(5)));
  // Each beat retries only until the next is due.
  EXPECT_EQ(retry_for_ms.load(), 10);
  heartbeat.Stop();
  const int after_stop = beats.load();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(beats.load(), after_stop);
  heartbeat.Stop();  // idempotent
}

TEST(HeartbeatTest, NoBeatBeforeTheFirstPeriod) {
  std::atomic<int> beats{0};
  {
    Heartbeat heartbeat(
        absl::Hours(1),
        [&](absl::Duration) {
          ++beats;
          return absl::OkStatus();
        },
        "[worker 0]");
  }  // the destructor stops it without waiting out the period
  EXPECT_EQ(beats.load(), 0);
}

}  // namespace
}  // namespace ps::worker
