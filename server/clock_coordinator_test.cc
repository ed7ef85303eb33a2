#include "server/clock_coordinator.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using absl::StatusCode;

class ClockCoordinatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClockCoordinator> Open(const std::string& state_path = "",
                                         size_t max_workers = 4096,
                                         bool elected = false) {
    CoordinatorOptions options;
    options.state_path = state_path;
    options.max_workers = max_workers;
    options.elected = elected;
    options.now = [this] { return now_; };
    options.monotonic_now = [this] { return monotonic_; };
    auto coordinator = ClockCoordinator::Open(options);
    EXPECT_OK(coordinator);
    return std::move(coordinator).value();
  }

  // Reports for `worker` (incarnation 1 unless told) and returns the view.
  ClockCoordinator::View Report(uint32_t worker, int64_t clock,
                                bool finished = false,
                                uint64_t incarnation = 1) {
    ClockCoordinator::Report report;
    report.worker = worker;
    report.incarnation = incarnation;
    report.clock = clock;
    report.finished = finished;
    report.lease = lease_;
    auto view = coordinator_->Record(report);
    EXPECT_OK(view);
    return view.ok() ? *view : ClockCoordinator::View();
  }

  // A report of `worker` (incarnation 1) at `clock` that says it is idle.
  ClockCoordinator::Report IdleReport(uint32_t worker, int64_t clock) const {
    ClockCoordinator::Report report;
    report.worker = worker;
    report.incarnation = 1;
    report.clock = clock;
    report.lease = lease_;
    report.idle = true;
    return report;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  // Stays put while the process runs (the gaps between calls are short);
  // a test that stops the process moves it with now_.
  absl::Time monotonic_ = absl::FromUnixSeconds(50);
  const absl::Duration lease_ = absl::Seconds(5);
  std::unique_ptr<ClockCoordinator> coordinator_ = Open();
};

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
// coordinator's, whose epoch etcd keeps.
TEST_F(ClockCoordinatorTest, TakingOverGivesIncarnationsAboveTheEpochGiven) {
  coordinator_ = Open("", 4096, /*elected=*/true);
  const std::vector<ClockCoordinator::ExpectedWorker> none;
  const uint64_t epoch = coordinator_->TakeOver(none, uint64_t{1} << 30,
                                                monotonic_ + absl::Hours(1));
  EXPECT_EQ(epoch, uint64_t{1} << 30);
  ClockCoordinator::Report report;
  report.worker = 3;
  report.assign_incarnation = true;
  report.lease = lease_;
  absl::StatusOr<ClockCoordinator::View> view = coordinator_->Record(report);
  ASSERT_OK(view);
  EXPECT_EQ(view->incarnation >> 32, epoch);
  EXPECT_EQ(coordinator_->NextEpoch(1), epoch + 1);
  EXPECT_EQ(coordinator_->NextEpoch(epoch + 7), epoch + 7);
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
