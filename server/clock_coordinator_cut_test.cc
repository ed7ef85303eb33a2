// ClockCoordinator's cuts (where a checkpoint or export is taken, and how
// workers are held for it) and an elected coordinator taking over.

#include "server/clock_coordinator_fixture.h"

namespace ps::server {
namespace {

using absl::StatusCode;

TEST_F(ClockCoordinatorTest, ACutIsPastTheFurthestUnfinishedWorker) {
  Report(0, 3);
  Report(1, 9, /*finished=*/true);
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 4);
  EXPECT_EQ(Report(0, 3).hold_at, 4);
  EXPECT_FALSE(coordinator_->GetCutStatus().ready);
  // Only one cut at a time: another waits for it to end.
  EXPECT_THAT(coordinator_->BeginCut(absl::Seconds(30)),
              StatusIs(StatusCode::kUnavailable));
  Report(0, 4);
  EXPECT_TRUE(coordinator_->GetCutStatus().ready);
  // Only the client that began it ends it.
  EXPECT_FALSE(coordinator_->EndCut(cut->id + 1));
  EXPECT_EQ(Report(0, 4).hold_at, 4);
  EXPECT_TRUE(coordinator_->EndCut(cut->id));
  EXPECT_EQ(Report(0, 4).hold_at, 0);
  EXPECT_FALSE(coordinator_->EndCut(0));
}

TEST_F(ClockCoordinatorTest, OnceReadyAWorkerBehindTheCutHoldsWhereItIs) {
  Report(0, 3);
  Report(1, 2);
  now_ += absl::Seconds(4);
  Report(0, 3);
  now_ += absl::Seconds(2);  // worker 1's lease lapsed at clock 2
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 4);
  // Before every live worker is there, a worker behind goes on to the cut.
  EXPECT_EQ(Report(1, 2).hold_at, 4);
  now_ += absl::Seconds(6);  // and lapses again
  Report(0, 4);
  ASSERT_TRUE(coordinator_->GetCutStatus().ready);
  // The shards are writing: worker 1 must push nothing more, nor a worker
  // that has done no step.
  EXPECT_EQ(Report(1, 2).hold_at, 2);
  EXPECT_EQ(Report(0, 4).hold_at, 4);
  // A newcomer joins at the live minimum (worker 1's 2) and holds there.
  EXPECT_EQ(Report(2, 0, false, 7).hold_at, 2);
  now_ += absl::Seconds(6);  // everyone lapses
  EXPECT_EQ(Report(3, 0).hold_at, -1);
  ASSERT_TRUE(coordinator_->EndCut(cut->id));
  EXPECT_EQ(Report(1, 2).hold_at, 0);
}

TEST_F(ClockCoordinatorTest, AnIdleWorkerIsHeldWhereItIsForTheCut) {
  Report(0, 3);
  Report(1, 5);
  ClockCoordinator::Report idle = IdleReport(0, 3);
  // Idle with no cut: nothing changes.
  auto view = coordinator_->Record(idle);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, 0);
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 6);
  EXPECT_EQ(Report(0, 3).hold_at, 6);
  EXPECT_FALSE(coordinator_->GetCutStatus().ready);
  // Idle during the cut: held at its clock, for every idle report after.
  view = coordinator_->Record(idle);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, 3);
  view = coordinator_->Record(idle);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, 3);
  EXPECT_FALSE(coordinator_->GetCutStatus().ready);  // worker 1 is at 5
  Report(1, 6);
  const auto status = coordinator_->GetCutStatus();
  EXPECT_TRUE(status.ready);
  bool found = false;
  for (const auto& worker : status.workers) {
    if (worker.worker != 0) continue;
    found = true;
    EXPECT_EQ(worker.clock, 3);
  }
  EXPECT_TRUE(found);
  ASSERT_TRUE(coordinator_->EndCut(cut->id));
  EXPECT_EQ(Report(0, 3).hold_at, 0);
  // The next cut is another: held only once idle in it.
  auto next = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(next);
  EXPECT_EQ(Report(0, 3).hold_at, next->cut);
  EXPECT_FALSE(coordinator_->GetCutStatus().ready);
  ASSERT_TRUE(coordinator_->EndCut(next->id));
  // A worker at clock 0 is held with no step at all.
  ClockCoordinator::Report first = idle;
  first.worker = 9;
  first.incarnation = 9;
  first.clock = 0;
  first.idle = false;
  ASSERT_OK(coordinator_->Record(first));  // joins at the live minimum
  auto third = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(third);
  ClockCoordinator::Report fresh = idle;
  fresh.worker = 10;
  fresh.incarnation = 10;
  fresh.clock = 0;
  ASSERT_OK(coordinator_->Record(fresh));
  Report(1, 6);
  // Workers 0 and 9 reported at 3, 10 at 3 (the live minimum): all behind.
  view = coordinator_->Record(fresh);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, view->clock > 0 ? view->clock : -1);
  EXPECT_LT(view->hold_at, third->cut);
}

// Idle while another worker at a bounded staleness waits for its steps:
// input that comes before the cut is ready lets it go on to the cut.
TEST_F(ClockCoordinatorTest, AnIdleWorkerWhoseInputCameGoesOnToTheCut) {
  Report(0, 3);
  Report(1, 4);
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 5);
  ClockCoordinator::Report idle = IdleReport(0, 3);
  auto view = coordinator_->Record(idle);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, 3);
  // Its input came: not idle, and the cut is not ready (worker 1 is at 4).
  EXPECT_FALSE(coordinator_->GetCutStatus().ready);
  EXPECT_EQ(Report(0, 3).hold_at, 5);
  Report(0, 5);
  Report(1, 5);
  EXPECT_TRUE(coordinator_->GetCutStatus().ready);
  // Once ready, idle or not, a worker behind is held where it is.
  ASSERT_TRUE(coordinator_->EndCut(cut->id));
  auto next = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(next);
  idle.clock = 5;
  view = coordinator_->Record(idle);
  ASSERT_OK(view);
  EXPECT_EQ(view->hold_at, 5);
  Report(1, 6);
  EXPECT_TRUE(coordinator_->GetCutStatus().ready);
  EXPECT_EQ(Report(0, 5).hold_at, 5);
}

TEST_F(ClockCoordinatorTest, OnceEveryWorkerFinishedACutIsPastThemAll) {
  Report(0, 12, /*finished=*/true);
  Report(1, 10, /*finished=*/true);
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 13);
  EXPECT_TRUE(coordinator_->GetCutStatus().ready);
  // Every cut after is at the same clock, but is another cut.
  ASSERT_TRUE(coordinator_->EndCut(cut->id));
  auto next = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(next);
  EXPECT_EQ(next->cut, 13);
  EXPECT_NE(next->id, cut->id);
  EXPECT_FALSE(coordinator_->EndCut(cut->id));
  EXPECT_EQ(coordinator_->GetCutStatus().id, next->id);
}

TEST_F(ClockCoordinatorTest, ACutWhoseLeaseRunsOutEnds) {
  Report(0, 2);
  ASSERT_OK(coordinator_->BeginCut(absl::Seconds(3)));
  now_ += absl::Seconds(2);
  EXPECT_EQ(coordinator_->GetCutStatus().cut, 3);  // renews the lease
  now_ += absl::Seconds(2);
  EXPECT_EQ(Report(0, 2).hold_at, 3);
  now_ += absl::Seconds(2);
  EXPECT_EQ(Report(0, 2).hold_at, 0);
  EXPECT_OK(coordinator_->BeginCut(absl::Seconds(3)));
}

// A worker that finished before another came is counted as started, so
// that the latecomer does not wait for it.
TEST_F(ClockCoordinatorTest, FinishedWorkersAreCountedApart) {
  Report(1, 20, /*finished=*/true);
  const ClockCoordinator::View view = Report(0, 20);
  EXPECT_EQ(view.live_workers, 1u);
  EXPECT_EQ(view.finished_workers, 1u);
}

// An elected coordinator (under --etcd) answers only while it leads.
TEST_F(ClockCoordinatorTest, AnElectedCoordinatorAnswersOnlyWhileItLeads) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  ClockCoordinator::Report report;
  report.worker = 0;
  report.incarnation = 1;
  report.lease = lease_;
  EXPECT_EQ(coordinator_->Record(report).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(coordinator_->BeginCut(absl::Seconds(10)).status().code(),
            StatusCode::kUnavailable);

  const std::vector<ClockCoordinator::ExpectedWorker> none;
  coordinator_->TakeOver(none, 1, monotonic_ + absl::Seconds(3));
  EXPECT_OK(coordinator_->Serving());
  EXPECT_EQ(Report(0, 4).clock, 4);

  // Its lease not renewed in time (paused, cut off from etcd): it stops
  // answering before etcd lets another shard lead.
  monotonic_ += absl::Seconds(3);
  EXPECT_EQ(coordinator_->Record(report).status().code(),
            StatusCode::kUnavailable);
  coordinator_->ExtendLeadership(monotonic_ + absl::Seconds(3));
  EXPECT_OK(coordinator_->Record(report));

  coordinator_->StepDown();
  EXPECT_EQ(coordinator_->Serving().code(), StatusCode::kUnavailable);
  EXPECT_EQ(coordinator_->Record(report).status().code(),
            StatusCode::kUnavailable);
}

// A coordinator that takes over knows nothing of the workers' clocks: each
// registered worker holds the others (at clock 0) and every cut back until
// it has reported.
TEST_F(ClockCoordinatorTest, TakingOverWaitsForEveryRegisteredWorker) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> registered = {
      {0, lease_}, {1, lease_}};
  coordinator_->TakeOver(registered, 1, monotonic_ + absl::Hours(1));

  const ClockCoordinator::View first = Report(0, 40);
  EXPECT_EQ(first.clock, 40);
  EXPECT_EQ(first.min_clock, 0);  // worker 1 has not said where it is
  EXPECT_EQ(first.live_workers, 2u);
  EXPECT_EQ(coordinator_->BeginCut(absl::Seconds(10)).status().code(),
            StatusCode::kUnavailable);

  // Its real clock, not a newcomer's start at the minimum.
  EXPECT_EQ(Report(1, 37).clock, 37);
  EXPECT_EQ(Report(0, 41).min_clock, 37);
  absl::StatusOr<ClockCoordinator::BegunCut> cut =
      coordinator_->BeginCut(absl::Seconds(10));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 42);
}

// A registered worker that died holds nothing back past its lease.
TEST_F(ClockCoordinatorTest, ARegisteredWorkerThatNeverReportsLapses) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> registered = {
      {0, lease_}, {1, lease_}};
  coordinator_->TakeOver(registered, 1, monotonic_ + absl::Hours(1));
  EXPECT_EQ(Report(0, 40).min_clock, 0);
  now_ += lease_ + absl::Seconds(1);
  EXPECT_EQ(Report(0, 41).min_clock, 41);
  EXPECT_OK(coordinator_->BeginCut(absl::Seconds(10)));
}

// Workers the coordinator kept (its state from when it led before) are
// unconfirmed again: their clocks there may be far behind.
TEST_F(ClockCoordinatorTest, TakingOverDoesNotTrustTheClocksItKept) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> none;
  coordinator_->TakeOver(none, 1, monotonic_ + absl::Hours(1));
  Report(0, 5);
  Report(1, 5);
  coordinator_->StepDown();
  const std::vector<ClockCoordinator::ExpectedWorker> both = {{0, lease_},
                                                              {1, lease_}};
  coordinator_->TakeOver(both, 1, monotonic_ + absl::Hours(1));
  EXPECT_EQ(coordinator_->BeginCut(absl::Seconds(10)).status().code(),
            StatusCode::kUnavailable);
  Report(0, 90);
  Report(1, 88);
  ASSERT_OK(coordinator_->BeginCut(absl::Seconds(10)));
}

// Incarnations given after a takeover are above every earlier
// coordinator's, whose term etcd keeps.
TEST_F(ClockCoordinatorTest, TakingOverGivesIncarnationsAboveTheTermGiven) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> none;
  const uint64_t term = coordinator_->TakeOver(none, uint64_t{1} << 30,
                                               monotonic_ + absl::Hours(1));
  EXPECT_EQ(term, uint64_t{1} << 30);
  ClockCoordinator::Report report;
  report.worker = 3;
  report.assign_incarnation = true;
  report.lease = lease_;
  absl::StatusOr<ClockCoordinator::View> view = coordinator_->Record(report);
  ASSERT_OK(view);
  EXPECT_EQ(view->incarnation >> 32, term);
  EXPECT_EQ(coordinator_->NextTerm(1), term + 1);
  EXPECT_EQ(coordinator_->NextTerm(term + 7), term + 7);
}

// A worker that joins while the coordinator waits for the registered ones
// starts at the clocks of those that reported, not at a placeholder's 0.
TEST_F(ClockCoordinatorTest,
       ANewcomerAfterATakeoverStartsAtTheConfirmedClocks) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> registered = {
      {0, lease_}, {1, lease_}};
  coordinator_->TakeOver(registered, 1, monotonic_ + absl::Hours(1));
  Report(0, 40);
  EXPECT_EQ(Report(2, 0).clock, 40);
}

// Kept workers with no registered process count as lapsed at a takeover.
TEST_F(ClockCoordinatorTest, TakingOverForgetsKeptWorkersThatAreNotRegistered) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> none;
  coordinator_->TakeOver(none, 1, monotonic_ + absl::Hours(1));
  Report(0, 5);
  Report(1, 5);
  coordinator_->StepDown();
  const std::vector<ClockCoordinator::ExpectedWorker> only_zero = {{0, lease_}};
  coordinator_->TakeOver(only_zero, 1, monotonic_ + absl::Hours(1));
  const ClockCoordinator::View view = Report(0, 9);
  EXPECT_EQ(view.live_workers, 1u);
  EXPECT_EQ(view.min_clock, 9);
  EXPECT_OK(coordinator_->BeginCut(absl::Seconds(10)));
}

}  // namespace
}  // namespace ps::server
