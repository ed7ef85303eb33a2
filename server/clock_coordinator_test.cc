#include "server/clock_coordinator.h"

#include "gtest/gtest.h"

namespace ps::server {
namespace {

class ClockCoordinatorTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1000);
  ClockCoordinator coordinator_{[this] { return now_; }};
  const absl::Duration lease_ = absl::Seconds(5);
};

TEST_F(ClockCoordinatorTest, MinimumIsOverLiveWorkers) {
  EXPECT_EQ(coordinator_.Report(0, 0, false, lease_).min_clock, 0);
  EXPECT_EQ(coordinator_.Report(1, 0, false, lease_).min_clock, 0);
  EXPECT_EQ(coordinator_.Report(0, 3, false, lease_).min_clock, 0);
  const auto view = coordinator_.Report(1, 2, false, lease_);
  EXPECT_EQ(view.min_clock, 2);
  EXPECT_EQ(view.live_workers, 2u);
}

TEST_F(ClockCoordinatorTest, ClocksNeverGoBack) {
  coordinator_.Report(0, 5, false, lease_);
  EXPECT_EQ(coordinator_.Report(0, 2, false, lease_).clock, 5);
}

TEST_F(ClockCoordinatorTest, ExpiredLeaseStopsHoldingOthersBack) {
  coordinator_.Report(0, 1, false, lease_);
  coordinator_.Report(1, 10, false, lease_);
  now_ += absl::Seconds(4);
  EXPECT_EQ(coordinator_.Report(1, 10, false, lease_).min_clock, 1);
  now_ += absl::Seconds(2);  // worker 0 last reported 6 s ago
  const auto view = coordinator_.Report(1, 10, false, lease_);
  EXPECT_EQ(view.min_clock, 10);
  EXPECT_EQ(view.live_workers, 1u);
}

TEST_F(ClockCoordinatorTest, FinishedWorkersDoNotCount) {
  coordinator_.Report(0, 1, false, lease_);
  coordinator_.Report(1, 7, false, lease_);
  const auto finished = coordinator_.Report(0, 1, true, lease_);
  EXPECT_EQ(finished.min_clock, 7);
  EXPECT_EQ(coordinator_.Report(1, 7, false, lease_).live_workers, 1u);
}

TEST_F(ClockCoordinatorTest, LateJoinerStartsAtTheLiveMinimum) {
  coordinator_.Report(0, 0, false, lease_);
  coordinator_.Report(1, 0, false, lease_);
  coordinator_.Report(0, 20, false, lease_);
  coordinator_.Report(1, 15, false, lease_);
  const auto joined = coordinator_.Report(2, 0, false, lease_);
  EXPECT_EQ(joined.clock, 15);
  EXPECT_EQ(joined.min_clock, 15);
  EXPECT_EQ(coordinator_.Snapshot().size(), 3u);
}

}  // namespace
}  // namespace ps::server
