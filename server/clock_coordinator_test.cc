#include "server/clock_coordinator_fixture.h"

namespace ps::server {
namespace {

using absl::StatusCode;

TEST_F(ClockCoordinatorTest, MinimumIsOverLiveWorkers) {
  EXPECT_EQ(Report(0, 0).min_clock, 0);
  EXPECT_EQ(Report(1, 0).min_clock, 0);
  EXPECT_EQ(Report(0, 3).min_clock, 0);
  const auto view = Report(1, 2);
  EXPECT_EQ(view.min_clock, 2);
  EXPECT_EQ(view.live_workers, 2u);
}

TEST_F(ClockCoordinatorTest, ClocksNeverGoBack) {
  Report(0, 5);
  EXPECT_EQ(Report(0, 2).clock, 5);
}

TEST_F(ClockCoordinatorTest, ExpiredLeaseStopsHoldingOthersBack) {
  Report(0, 1);
  Report(1, 10);
  now_ += absl::Seconds(4);
  EXPECT_EQ(Report(1, 10).min_clock, 1);
  now_ += absl::Seconds(2);  // worker 0 last reported 6 s ago
  const auto view = Report(1, 10);
  EXPECT_EQ(view.min_clock, 10);
  EXPECT_EQ(view.live_workers, 1u);
}

TEST_F(ClockCoordinatorTest, FinishedWorkersDoNotCountAndStayFinished) {
  Report(0, 1);
  Report(1, 7);
  EXPECT_EQ(Report(0, 1, /*finished=*/true).min_clock, 7);
  EXPECT_EQ(Report(1, 7).live_workers, 1u);
  // A late report of the finished incarnation (a heartbeat in flight) does
  // not bring it back.
  Report(0, 1, /*finished=*/false);
  EXPECT_EQ(Report(1, 7).live_workers, 1u);
}

TEST_F(ClockCoordinatorTest, LateJoinerStartsAtTheLiveMinimum) {
  Report(0, 0);
  Report(1, 0);
  Report(0, 20);
  Report(1, 15);
  const auto joined = Report(2, 0);
  EXPECT_EQ(joined.clock, 15);
  EXPECT_EQ(joined.min_clock, 15);
  EXPECT_EQ(coordinator_->Snapshot().size(), 3u);
}

TEST_F(ClockCoordinatorTest, AWorkerBackAfterItsLeaseLapsedKeepsItsRealClock) {
  Report(0, 0);
  Report(1, 0);
  Report(0, 4);
  Report(1, 4);
  now_ += absl::Seconds(6);  // worker 0 evaluates for 6 s, lease gone
  Report(1, 30);             // worker 1 runs ahead meanwhile
  const auto back = Report(0, 4);
  EXPECT_EQ(back.clock, 4) << "counted ahead of the steps it has done";
  EXPECT_EQ(back.min_clock, 4);
  EXPECT_EQ(Report(1, 30).min_clock, 4);
}

TEST_F(ClockCoordinatorTest, ANewIncarnationJoinsAtTheLiveMinimum) {
  Report(0, 0);
  Report(1, 0);
  Report(0, 9);
  Report(1, 12);
  // Worker 1's process restarts: it has done no step of its own.
  const auto restarted = Report(1, 0, false, /*incarnation=*/2);
  EXPECT_EQ(restarted.clock, 9);
}

TEST_F(ClockCoordinatorTest, ASupersededIncarnationIsRefused) {
  Report(0, 3, false, /*incarnation=*/5);
  ClockCoordinator::Report stale;
  stale.worker = 0;
  stale.incarnation = 4;
  stale.lease = lease_;
  EXPECT_THAT(coordinator_->Record(stale),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(ClockCoordinatorTest, TheTableIsBoundedAndKeepsLiveWorkers) {
  coordinator_ = Open("", /*max_workers=*/2);
  Report(0, 0);
  Report(1, 0);
  ClockCoordinator::Report third;
  third.worker = 2;
  third.incarnation = 1;
  third.lease = lease_;
  EXPECT_THAT(coordinator_->Record(third),
              StatusIs(StatusCode::kResourceExhausted));
  Report(0, 0, /*finished=*/true);
  EXPECT_OK(coordinator_->Record(third));  // worker 0 is forgotten
  EXPECT_EQ(coordinator_->Snapshot().size(), 2u);
}

TEST_F(ClockCoordinatorTest, TheStateSurvivesARestart) {
  const std::string path =
      FreshTestDir("clock_coordinator_state") + "/coordinator.state";
  coordinator_ = Open(path);
  Report(0, 0, false, 7);
  Report(1, 0, false, 8);
  Report(2, 0, false, 9);
  Report(0, 11, false, 7);
  Report(1, 6, false, 8);
  Report(2, 3, /*finished=*/true, 9);
  ASSERT_OK(coordinator_->Save());

  now_ += absl::Minutes(10);  // long after every lease
  coordinator_ = Open(path);
  const std::vector<ClockCoordinator::WorkerClock> clocks =
      coordinator_->Snapshot();
  ASSERT_EQ(clocks.size(), 3u);
  EXPECT_EQ(clocks[0].clock, 11);
  EXPECT_TRUE(clocks[0].live) << "leases start anew after a restart";
  EXPECT_EQ(clocks[1].clock, 6);
  EXPECT_FALSE(clocks[2].live) << "a finished worker stays finished";
  // Worker 1 reports as if nothing happened: the minimum is still its own,
  // and worker 0's old incarnation is still known (so still superseded).
  EXPECT_EQ(Report(1, 6, false, 8).min_clock, 6);
  ClockCoordinator::Report stale;
  stale.worker = 0;
  stale.incarnation = 6;
  stale.lease = lease_;
  EXPECT_THAT(coordinator_->Record(stale),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(ClockCoordinatorTest, AssignedIncarnationsGrowAcrossRestarts) {
  const std::string path =
      FreshTestDir("clock_coordinator_incarnations") + "/coordinator.state";
  now_ = absl::FromUnixSeconds(1764600000);  // 2025-12-01
  coordinator_ = Open(path);
  // A worker of the wall-clock kind (microseconds) was seen before.
  const uint64_t wall_clock = absl::ToUnixMicros(now_);
  Report(1, 3, false, wall_clock);
  ClockCoordinator::Report report;
  report.worker = 1;
  report.assign_incarnation = true;
  report.lease = lease_;
  auto first = coordinator_->Record(report);
  ASSERT_OK(first);
  EXPECT_GT(first->incarnation, wall_clock);
  // The host's clock is a day behind at the next start: still larger.
  now_ -= absl::Hours(24);
  coordinator_ = Open(path);
  report.worker = 2;
  auto second = coordinator_->Record(report);
  ASSERT_OK(second);
  EXPECT_GT(second->incarnation, first->incarnation);
  auto third = coordinator_->Record(report);
  ASSERT_OK(third);
  EXPECT_GT(third->incarnation, second->incarnation);
  // Given to worker 1, the new incarnation supersedes its last.
  report.worker = 1;
  auto fourth = coordinator_->Record(report);
  ASSERT_OK(fourth);
  EXPECT_GT(fourth->incarnation, third->incarnation);
  EXPECT_THAT(coordinator_->Record([&] {
    ClockCoordinator::Report old = report;
    old.assign_incarnation = false;
    old.incarnation = first->incarnation;
    return old;
  }()),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(ClockCoordinatorTest, ARestartedWorkerGoesOnWhereItsLastStopped) {
  Report(1, 9);  // another worker, further on
  ClockCoordinator::Report report;
  report.worker = 0;
  report.incarnation = 1;
  report.clock = 4;
  report.examples = 4000;
  report.leaving = true;  // drained (or its lease lapsed)
  report.lease = lease_;
  ASSERT_OK(coordinator_->Record(report));
  report.leaving = false;
  // Incarnation 2 asks to resume: it takes over clock 4 and 4000 examples,
  // not the live minimum.
  report.incarnation = 2;
  report.clock = 0;
  report.examples = 0;
  report.resume = true;
  auto resumed = coordinator_->Record(report);
  ASSERT_OK(resumed);
  EXPECT_TRUE(resumed->resumed);
  EXPECT_EQ(resumed->clock, 4);
  EXPECT_EQ(resumed->examples, 4000);
  // One that finished is not resumed: its next incarnation starts anew.
  report.incarnation = 2;
  report.clock = 6;
  report.examples = 6000;
  report.resume = false;
  report.finished = true;
  ASSERT_OK(coordinator_->Record(report));
  report.incarnation = 3;
  report.clock = 0;
  report.examples = 0;
  report.finished = false;
  report.resume = true;
  auto anew = coordinator_->Record(report);
  ASSERT_OK(anew);
  EXPECT_FALSE(anew->resumed);
  EXPECT_EQ(anew->examples, 0);
  EXPECT_EQ(anew->clock, 9) << "a newcomer starts at the live minimum";
}

TEST_F(ClockCoordinatorTest, AFollowingWorkersPositionIsKeptSavedAndResumed) {
  const std::string dir = FreshTestDir("clock_coordinator_position");
  coordinator_ = Open(dir + "/coordinator.state");
  ClockCoordinator::Report report;
  report.worker = 0;
  report.incarnation = 1;
  report.clock = 5;
  report.examples = 5000;
  // A name with a space: saved whole.
  report.input_position = {"2026120113 part.tsv.gz", 1000};
  report.leaving = true;
  report.lease = lease_;
  ASSERT_OK(coordinator_->Record(report));
  // An older report that arrives late moves the position back no more than
  // the examples.
  report.examples = 4000;
  report.input_position = {"2026120112.tsv.gz", 4000};
  report.leaving = false;
  ASSERT_OK(coordinator_->Record(report));
  ASSERT_EQ(coordinator_->Snapshot()[0].input_position.file,
            "2026120113 part.tsv.gz");
  ASSERT_OK(coordinator_->Save());
  EXPECT_EQ(
      ReadFile(dir + "/coordinator.state").rfind("ps-coordinator-state 3", 0),
      0u);

  coordinator_ = Open(dir + "/coordinator.state");
  const ClockCoordinator::WorkerClock saved = coordinator_->Snapshot()[0];
  EXPECT_EQ(saved.examples, 5000);
  EXPECT_EQ(saved.input_position.file, "2026120113 part.tsv.gz");
  EXPECT_EQ(saved.input_position.file_examples, 1000);
  // The next incarnation goes on from there, once the lease lapsed.
  now_ += absl::Minutes(1);
  report.incarnation = 2;
  report.clock = 0;
  report.examples = 0;
  report.input_position = {};
  report.resume = true;
  absl::StatusOr<ClockCoordinator::View> resumed = coordinator_->Record(report);
  ASSERT_OK(resumed);
  EXPECT_TRUE(resumed->resumed);
  EXPECT_EQ(resumed->examples, 5000);
  EXPECT_EQ(resumed->input_position.file, "2026120113 part.tsv.gz");
  EXPECT_EQ(resumed->input_position.file_examples, 1000);
}

TEST_F(ClockCoordinatorTest, AStateOfTheReleaseBeforePositionsIsRead) {
  const std::string path =
      FreshTestDir("clock_coordinator_v2") + "/coordinator.state";
  {
    std::ofstream file(path);
    file << "ps-coordinator-state 2\nepoch 3\n0 7 11 4400 0 5000\n";
  }
  coordinator_ = Open(path);
  const std::vector<ClockCoordinator::WorkerClock> clocks =
      coordinator_->Snapshot();
  ASSERT_EQ(clocks.size(), 1u);
  EXPECT_EQ(clocks[0].clock, 11);
  EXPECT_EQ(clocks[0].examples, 4400);
  EXPECT_EQ(clocks[0].input_position.file, "");
  // Without positions it is written as version 2 (a rollback reads it).
  Report(0, 12, false, 7);
  ASSERT_OK(coordinator_->Save());
  EXPECT_EQ(ReadFile(path).rfind("ps-coordinator-state 2\n", 0), 0u)
      << ReadFile(path);
}

TEST_F(ClockCoordinatorTest, ALeavingWorkerStopsHoldingOthersBackAtOnce) {
  Report(0, 1);
  Report(1, 5);
  ClockCoordinator::Report report;
  report.worker = 0;
  report.incarnation = 1;
  report.clock = 2;
  report.leaving = true;
  report.lease = lease_;
  ASSERT_OK(coordinator_->Record(report));
  EXPECT_EQ(Report(1, 5).min_clock, 5);
  const auto clocks = coordinator_->Snapshot();
  EXPECT_FALSE(clocks[0].live);
  EXPECT_FALSE(clocks[0].finished);
  EXPECT_EQ(clocks[0].clock, 2);
}

TEST_F(ClockCoordinatorTest, AfterARestartNoCutUntilEverySavedWorkerReported) {
  const std::string path =
      FreshTestDir("clock_coordinator_unconfirmed") + "/coordinator.state";
  coordinator_ = Open(path);
  Report(0, 3);
  Report(1, 3);
  Report(2, 3, /*finished=*/true);
  ASSERT_OK(coordinator_->Save());
  // Workers went on after the last save (up to 100 ms of steps): the saved
  // clocks may be behind what the shards hold.
  coordinator_ = Open(path);
  EXPECT_THAT(coordinator_->BeginCut(absl::Seconds(30)),
              StatusIs(StatusCode::kUnavailable));
  Report(0, 5);
  EXPECT_THAT(coordinator_->BeginCut(absl::Seconds(30)),
              StatusIs(StatusCode::kUnavailable));
  Report(1, 4);
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  EXPECT_EQ(cut->cut, 6);
  ASSERT_TRUE(coordinator_->EndCut(cut->id));
  // A worker that never reports again stops holding cuts back once its
  // lease (started anew at the restart) lapses.
  ASSERT_OK(coordinator_->Save());
  coordinator_ = Open(path);
  Report(0, 5);
  EXPECT_THAT(coordinator_->BeginCut(absl::Seconds(30)),
              StatusIs(StatusCode::kUnavailable));
  now_ += lease_ + absl::Seconds(1);
  Report(0, 5);
  EXPECT_OK(coordinator_->BeginCut(absl::Seconds(30)));
}

TEST_F(ClockCoordinatorTest, LeasesDoNotLapseWhileTheCoordinatorIsPaused) {
  coordinator_->NoticePause();
  Report(0, 2);
  Report(1, 2);
  Report(2, 2);
  ClockCoordinator::Report leaving;
  leaving.worker = 2;
  leaving.incarnation = 1;
  leaving.clock = 2;
  leaving.leaving = true;
  leaving.lease = lease_;
  ASSERT_OK(coordinator_->Record(leaving));  // out before the pause
  auto cut = coordinator_->BeginCut(absl::Seconds(30));
  ASSERT_OK(cut);
  // The process is stopped for a minute: every lease and the cut's would
  // have run out. The first call after it (here a cut's status, before any
  // tick) extends the ones that ran when it stopped.
  now_ += absl::Minutes(1);
  monotonic_ += absl::Minutes(1);
  const ClockCoordinator::CutStatus status = coordinator_->GetCutStatus();
  EXPECT_EQ(status.cut, cut->cut) << "the cut's lease ran out";
  EXPECT_FALSE(status.ready) << "leases lapsed: the cut looks ready";
  ASSERT_EQ(status.workers.size(), 3u);
  EXPECT_TRUE(status.workers[0].live);
  EXPECT_TRUE(status.workers[1].live);
  EXPECT_FALSE(status.workers[2].live) << "a worker that left came back";
  // Time that passes while it runs (ticking every second) still counts.
  for (int second = 0; second < 7; ++second) {
    now_ += absl::Seconds(1);
    monotonic_ += absl::Seconds(1);
    coordinator_->NoticePause();
  }
  EXPECT_EQ(Report(1, 2).live_workers, 1u);
}

TEST_F(ClockCoordinatorTest, ARestartWaitsForItsLastProcessToLeave) {
  Report(0, 3);  // incarnation 1, live
  ClockCoordinator::Report report;
  report.worker = 0;
  report.incarnation = 2;
  report.resume = true;
  report.lease = lease_;
  EXPECT_THAT(coordinator_->Record(report), StatusIs(StatusCode::kUnavailable));
  now_ += lease_ + absl::Seconds(1);  // the old one's lease lapses
  auto resumed = coordinator_->Record(report);
  ASSERT_OK(resumed);
  EXPECT_FALSE(resumed->resumed) << "no input position recorded";
}

TEST_F(ClockCoordinatorTest, AStateThatDoesNotParseIsSetAside) {
  const std::string path =
      FreshTestDir("clock_coordinator_bad_state") + "/coordinator.state";
  std::ofstream(path) << "ps-coordinator-state 1\n0 1 x 0 5000\n";
  coordinator_ = Open(path);
  EXPECT_TRUE(coordinator_->Snapshot().empty());
  EXPECT_TRUE(std::filesystem::exists(path + ".unreadable"));
  EXPECT_EQ(Report(0, 4).clock, 4);
  // It may not know every live worker yet: no cut until they have
  // reported again.
  EXPECT_THAT(coordinator_->BeginCut(absl::Seconds(30)),
              StatusIs(StatusCode::kUnavailable));
  now_ += absl::Seconds(61);
  EXPECT_OK(coordinator_->BeginCut(absl::Seconds(30)));
}

}  // namespace
}  // namespace ps::server
