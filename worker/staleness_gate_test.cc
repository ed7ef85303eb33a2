#include "worker/staleness_gate.h"

#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

// A coordinator whose slowest live worker is at `min_clock`.
struct FakeCoordinator {
  std::atomic<int64_t> min_clock{0};
  std::atomic<uint32_t> live_workers{2};
  std::atomic<int> reports{0};

  StalenessGate::Report Report() {
    return [this]() -> absl::StatusOr<ClockResponse> {
      ++reports;
      ClockResponse view;
      view.set_min_clock(min_clock.load());
      view.set_live_workers(live_workers.load());
      return view;
    };
  }
};

const auto kNeverStopped = [] { return false; };

TEST(StalenessGateTest, AStepWaitsUntilTheSlowestWorkerIsWithinTheBound) {
  FakeCoordinator coordinator;
  coordinator.min_clock = 2;
  StepClock own;
  own.Set(5);
  StalenessGateOptions options;
  options.staleness = 1;
  // The slowest worker catches up after the third report.
  StalenessGate gate(options, &own, [&]() -> absl::StatusOr<ClockResponse> {
    absl::StatusOr<ClockResponse> view = coordinator.Report()();
    if (coordinator.reports == 3) coordinator.min_clock = 4;
    return view;
  });
  absl::StatusOr<int64_t> staleness = gate.WaitForStep(5, kNeverStopped);
  ASSERT_OK(staleness);
  EXPECT_EQ(*staleness, 1);
  EXPECT_GT(coordinator.reports.load(), 1);
  EXPECT_EQ(gate.waits(), 1);
  EXPECT_GT(gate.waited_seconds(), 0.0);
  EXPECT_EQ(gate.histogram(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(gate.max_staleness(), 1);
}

TEST(StalenessGateTest, AsynchronousStepsNeverWaitAndRecordWhatTheySaw) {
  FakeCoordinator coordinator;
  StepClock own;
  own.Set(10);
  StalenessGateOptions options;
  options.staleness = -1;
  options.read_my_writes = false;
  StalenessGate gate(options, &own, coordinator.Report());
  absl::StatusOr<int64_t> staleness = gate.WaitForStep(10, kNeverStopped);
  ASSERT_OK(staleness);
  EXPECT_EQ(*staleness, 10);
  EXPECT_EQ(coordinator.reports.load(), 1);
  EXPECT_EQ(gate.waits(), 0);
  EXPECT_EQ(gate.max_staleness(), 10);
}

TEST(StalenessGateTest, ReadMyWritesWaitsForItsOwnPushesBeforeAsking) {
  FakeCoordinator coordinator;
  coordinator.min_clock = 3;
  StepClock own;
  own.Set(2);
  StalenessGateOptions options;
  options.staleness = 4;
  StalenessGate gate(options, &own, [&]() -> absl::StatusOr<ClockResponse> {
    // Asked only once step 2's push is acknowledged.
    EXPECT_GE(own.value(), 3);
    return coordinator.Report()();
  });
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    own.Set(3);
  });
  absl::StatusOr<int64_t> staleness = gate.WaitForStep(3, kNeverStopped);
  pusher.join();
  ASSERT_OK(staleness);
  EXPECT_EQ(*staleness, 0);
  // Waiting for its own pushes is not waiting for others.
  EXPECT_EQ(gate.waits(), 0);
}

TEST(StalenessGateTest, AReplayedOwnPushCountsAsSeenOnlyWhenAlone) {
  FakeCoordinator coordinator;
  coordinator.min_clock = 4;
  StepClock own;
  own.Set(4);  // step 4's push is the one replayed onto step 5's rows
  StalenessGateOptions options;
  options.staleness = 1;
  options.replays_own_pushes = true;
  StalenessGate gate(options, &own, coordinator.Report());
  coordinator.live_workers = 1;
  absl::StatusOr<int64_t> alone = gate.WaitForStep(5, kNeverStopped);
  ASSERT_OK(alone);
  EXPECT_EQ(*alone, 0);
  coordinator.live_workers = 2;
  absl::StatusOr<int64_t> with_others = gate.WaitForStep(5, kNeverStopped);
  ASSERT_OK(with_others);
  EXPECT_EQ(*with_others, 1);
}

TEST(StalenessGateTest, AStopOrAFailedReportEndsTheWait) {
  FakeCoordinator coordinator;
  StepClock own;
  own.Set(9);
  StalenessGateOptions options;
  std::atomic<bool> stop{false};
  StalenessGate gate(options, &own, coordinator.Report());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stop = true;
  });
  EXPECT_THAT(gate.WaitForStep(9, [&] { return stop.load(); }).status(),
              StatusIs(absl::StatusCode::kCancelled));
  stopper.join();
  StalenessGate failing(options, &own, []() -> absl::StatusOr<ClockResponse> {
    return absl::UnavailableError("coordinator gone");
  });
  EXPECT_THAT(failing.WaitForStep(9, kNeverStopped).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace ps::worker
