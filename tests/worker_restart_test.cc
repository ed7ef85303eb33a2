// A worker stopped and started again, against real processes: SIGTERM
// drains it (every step whole on both shards) and a restart goes on from
// the clock the coordinator holds, bit for bit the model of a run straight
// through; a drain that cannot finish, or a second signal, exits 70 at
// once; --restart_from_start reads its share again; a shard killed and
// restarted under it costs nothing.

#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "tests/training_cluster.h"

namespace ps::testing {
namespace {

struct HeldClock {
  int64_t clock = -1;
  int64_t examples = 0;
  bool live = false;
  bool finished = false;
};
HeldClock ClockHeldFor(ServerProcess& coordinator, uint32_t worker) {
  auto admin = Admin::NewStub(coordinator.channel());
  grpc::ClientContext context;
  WorkerClocksResponse clocks;
  HeldClock held;
  if (!admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks).ok())
    return held;
  for (const auto& w : clocks.workers()) {
    if (w.worker() != worker) continue;
    held = {w.clock(), w.examples(), w.live(), w.finished()};
  }
  return held;
}

TEST_F(TrainingTest, SigtermDrainsAndARestartGoesOnWithoutTrainingTwice) {
  // A lone worker under bulk-synchronous training is deterministic: stopped
  // by SIGTERM mid-training and restarted (same --worker_index, no
  // --resume_from), it must end with the model of a run straight through,
  // bit for bit: every step whole on both shards, none trained twice or
  // skipped.
  const std::vector<std::string> common = {"--staleness=0",
                                           "--drain_seconds=20"};
  const WorkerRun straight = Train(2, 1, common)[0];
  ASSERT_EQ(straight.exit_code, 0);

  const std::vector<std::string> servers = StartShards(2);
  ASSERT_EQ(servers.size(), 2u);
  std::vector<std::string> slow = common;
  slow.push_back("--slow_step_ms=40");
  // Stops worker 0 once the coordinator holds a clock of at least `at`;
  // returns the drained run and how long the drain took.
  auto drain = [&](const std::vector<std::string>& flags, int64_t at) {
    auto worker = ChildProcess::Start(WorkerArgs(0, 1, flags), false,
                                      dir_ + "/worker0.log");
    EXPECT_TRUE(worker.ok());
    EXPECT_TRUE(WaitUntil([&] { return ClockHeldFor(shard(0), 0).clock >= at; },
                          absl::Seconds(60), absl::Milliseconds(20)));
    const absl::Time signalled = absl::Now();
    const int code = (*worker)->SignalAndWait(SIGTERM);
    return std::make_pair(Collect(0, code), absl::Now() - signalled);
  };
  const auto [first, first_drain] = drain(slow, 10);
  ASSERT_EQ(first.exit_code, 75) << first.log;
  EXPECT_LT(first_drain, absl::Seconds(5)) << "the drain took too long";
  EXPECT_NE(first.metrics.find("\"drained\": true"), std::string::npos)
      << first.metrics;
  const HeldClock left = ClockHeldFor(shard(0), 0);
  EXPECT_FALSE(left.live) << "the lease was not given back";
  EXPECT_FALSE(left.finished);
  EXPECT_GE(left.clock, 10);
  EXPECT_LT(left.examples, kTrainLines);
  EXPECT_EQ(left.examples, first.Get("examples"))
      << "what the coordinator holds is not what was pushed";

  // The restart goes on from there.
  const WorkerRun second =
      Collect(0, RunToCompletion(WorkerArgs(0, 1, common),
                                 dir_ + "/worker0.log", absl::Minutes(5)));
  ASSERT_EQ(second.exit_code, 0) << second.log;
  EXPECT_EQ(second.Get("first_step"), left.clock);
  EXPECT_EQ(first.Get("examples") + second.Get("examples"), kTrainLines);
  EXPECT_DOUBLE_EQ(second.Get("test_auc"), straight.Get("test_auc"));
  EXPECT_DOUBLE_EQ(second.Get("test_logloss"), straight.Get("test_logloss"));
  StopShards();
}

// Waits until every thread of `pid` is stopped: kill(SIGSTOP) returns
// before they are.
void WaitUntilStopped(pid_t pid) {
  auto all_stopped = [pid] {
    for (const auto& task : std::filesystem::directory_iterator(
             absl::StrCat("/proc/", pid, "/task"))) {
      const std::string stat = ReadFile((task.path() / "stat").string());
      // "PID (NAME) STATE ...": the state follows the last ')'.
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() ||
          stat[paren + 2] != 'T') {
        return false;
      }
    }
    return true;
  };
  EXPECT_TRUE(WaitUntil(all_stopped, absl::Seconds(10), absl::Milliseconds(1)))
      << "process " << pid << " did not stop";
}

TEST_F(TrainingTest, ADrainPastDrainSecondsOrASecondSignalExitsAt70) {
  // The shard is stopped (SIGSTOP) before the signal: the step being pushed,
  // or the leaving report, cannot end, so the drain cannot either.
  struct Case {
    std::string drain_seconds;
    bool second_signal;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"--drain_seconds=1", false, "the drain took longer than"},
      {"--drain_seconds=60", true, "a second signal"}};
  for (const Case& c : cases) {
    const std::vector<std::string> servers = StartShards(1);
    ASSERT_EQ(servers.size(), 1u);
    const std::string log_path = dir_ + "/worker0.log";
    std::filesystem::remove(log_path);  // the case before's
    auto worker = ChildProcess::Start(
        WorkerArgs(0, 1, {c.drain_seconds, "--slow_step_ms=40"}), false,
        log_path);
    ASSERT_TRUE(worker.ok());
    ASSERT_TRUE(WaitUntil([&] { return ClockHeldFor(shard(0), 0).clock >= 3; },
                          absl::Seconds(60), absl::Milliseconds(20)))
        << ReadFile(log_path);
    ASSERT_EQ(kill(shard(0).pid(), SIGSTOP), 0);
    WaitUntilStopped(shard(0).pid());
    const absl::Time signalled = absl::Now();
    ASSERT_EQ(kill((*worker)->pid(), SIGTERM), 0);
    if (c.second_signal) {
      // Once the first is taken (two pending SIGTERMs would be one).
      EXPECT_TRUE(WaitUntil(
          [&] {
            return ReadFile(log_path).find("SIGTERM: stopping") !=
                   std::string::npos;
          },
          absl::Seconds(60), absl::Milliseconds(5)));
      ASSERT_EQ(kill((*worker)->pid(), SIGTERM), 0);
    }
    const int code = (*worker)->Wait(absl::Seconds(30));
    const absl::Duration took = absl::Now() - signalled;
    kill(shard(0).pid(), SIGCONT);
    const std::string log = ReadFile(log_path);
    EXPECT_EQ(code, 70) << log;
    EXPECT_LT(took, absl::Seconds(3)) << "it waited for the shard";
    EXPECT_NE(log.find(c.why), std::string::npos) << log;
    EXPECT_NE(log.find("may be on some shards only"), std::string::npos) << log;
    StopShards();
  }
}

TEST_F(TrainingTest, RestartFromStartIgnoresWhatTheCoordinatorHolds) {
  const std::vector<std::string> servers = StartShards(1);
  ASSERT_EQ(servers.size(), 1u);
  auto worker = ChildProcess::Start(
      WorkerArgs(0, 1, {"--staleness=0", "--slow_step_ms=40"}), false,
      dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok());
  EXPECT_TRUE(WaitUntil([&] { return ClockHeldFor(shard(0), 0).clock >= 5; },
                        absl::Seconds(60), absl::Milliseconds(20)));
  // SIGINT drains like SIGTERM.
  ASSERT_EQ((*worker)->SignalAndWait(SIGINT), 75);
  const WorkerRun again = Collect(
      0, RunToCompletion(
             WorkerArgs(0, 1, {"--staleness=0", "--restart_from_start"}),
             dir_ + "/worker0.log", absl::Minutes(5)));
  ASSERT_EQ(again.exit_code, 0) << again.log;
  EXPECT_EQ(again.Get("examples"), kTrainLines);
  StopShards();
}

TEST_F(TrainingTest, TrainingSurvivesAShardThatRestarts) {
  // One shard under --durability=wal, killed with SIGKILL mid-training and
  // restarted on the same port and directory: the worker retries, reconnects
  // and finishes every example.
  ASSERT_EQ(StartShards(1, {"--durability=wal"}).size(), 1u);
  auto worker = ChildProcess::Start(
      WorkerArgs(0, 1, {"--slow_step_ms=40", "--retry_for_s=60"}), false,
      dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(WaitForProgress(0)) << ReadFile(dir_ + "/worker0.log");
  EXPECT_EQ(cluster_->StopShard(0, SIGKILL), 128 + SIGKILL);
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_OK(cluster_->RestartShard(0));  // on its port again
  const WorkerRun run = Collect(0, (*worker)->Wait(absl::Minutes(3)));
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_EQ(run.Get("examples"), kTrainLines);
  EXPECT_GT(run.Get("test_auc"), 0.70);
  EXPECT_NE(run.log.find("retrying"), std::string::npos)
      << "the worker saw the shard go";
}

}  // namespace
}  // namespace ps::testing
