// The fault matrix: real shards and workers on loopback, one fault at a
// time, and the same question each time: was any acknowledged update lost
// or applied twice, and did training finish (or stop with a clear error
// where it must)? A counting workload (a PsClient pushing +1 to the same
// keys round after round, exactly once, with its retries) runs through
// every fault; its rows are counted at the end against the rounds
// acknowledged. Each test adds a row to a table printed at the end (and
// written to $FAULT_MATRIX_TABLE, which deploy/chaos.sh reads).
//
// The full-disk test needs a size-capped file system: main() enters a user
// and mount namespace of its own (no privileges needed where the kernel
// allows user namespaces) and mounts a small tmpfs there; the shards it
// starts inherit it. Where that is not possible the test says so and skips.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/fault_matrix_fixture.h"
#include "tests/server_process.h"
#include "tests/test_client.h"
#include "tests/test_cluster.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

// Where main() mounted the size-capped file system, or why it could not.
std::string* g_small_disk = nullptr;
std::string* g_no_small_disk_reason = nullptr;
constexpr int kSmallDiskMb = 24;

class FaultMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // Records the row and checks what every fault must keep.
  void Finish(TableRow row) {
    if (row.counted) {
      EXPECT_EQ(row.lost, 0) << row.fault;
      EXPECT_EQ(row.doubled, 0) << row.fault;
    }
    std::printf("%s: workers saw %s; lost %lld, doubled %lld; %s\n",
                row.fault.c_str(), row.workers_saw.c_str(),
                static_cast<long long>(row.lost),
                static_cast<long long>(row.doubled), row.outcome.c_str());
    Table().push_back(std::move(row));
  }

  // Generated click logs for the training faults.
  std::string TrainingData() {
    const std::string path = dir_ + "/train.tsv";
    EXPECT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                               "--out=" + path, "--lines=60000"},
                              dir_ + "/gen.log"),
              0);
    return path;
  }

  std::unique_ptr<ChildProcess> StartWorker(
      const std::vector<std::string>& servers, int index, int count,
      const std::string& data, const std::vector<std::string>& extra,
      const std::string& tag) {
    std::vector<std::string> argv =
        PsWorkerArgv({"--servers=" + absl::StrJoin(servers, ",")},
                     {absl::StrCat("--worker_index=", index),
                      absl::StrCat("--num_workers=", count), "--train=" + data,
                      "--batch_size=1024", "--hidden=32", "--embedding_dim=4",
                      "--retry_for_s=90",
                      absl::StrCat("--metrics_out=", dir_, "/", tag, ".json")});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto process = ChildProcess::Start(argv, false, dir_ + "/" + tag + ".log");
    EXPECT_TRUE(process.ok());
    return process.ok() ? std::move(process).value() : nullptr;
  }

  // The coordinator's (shard 0's) view of worker `id`: its clock (-1 when
  // it is not known), and whether it lives.
  static std::pair<int64_t, bool> ClockOf(Shards& shards, uint32_t id) {
    auto admin = Admin::NewStub(shards.server(0).channel());
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks);
    for (const auto& worker : clocks.workers())
      if (worker.worker() == id)
        return std::make_pair(worker.clock(), worker.live());
    return std::make_pair(int64_t{-1}, false);
  }

  std::string dir_;
};

TEST_F(FaultMatrixTest, ShardKilledAndRestartedMidStream) {
  Shards shards(dir_, 2, {});
  CountingWorkload workload(shards.addresses(), 120, 400);
  workload.Start();
  ASSERT_TRUE(workload.WaitFor(30));
  shards.Kill(1);
  absl::SleepFor(absl::Milliseconds(300));
  shards.Start(1);
  ASSERT_TRUE(workload.Join().ok());
  TableRow row{"shard kill -9, restarted", workload.Saw()};
  workload.Count(&row);
  row.outcome =
      absl::StrCat("all ", workload.acknowledged(), " rounds acknowledged");
  EXPECT_EQ(workload.acknowledged(), 120);
  Finish(row);
}

TEST_F(FaultMatrixTest, ShardStoppedPastTheDeadlineThenResumed) {
  Shards shards(dir_, 2, {});
  CountingWorkload workload(shards.addresses(), 80, 400,
                            /*call_timeout=*/absl::Milliseconds(500));
  // Paced, so that rounds are still to come when the shard stops (unpaced,
  // the last 60 could all be acknowledged before SIGSTOP lands).
  workload.Start(absl::Milliseconds(20));
  ASSERT_TRUE(workload.WaitFor(20));
  shards.Signal(0, SIGSTOP);
  absl::SleepFor(absl::Seconds(2));  // four deadlines
  shards.Signal(0, SIGCONT);
  ASSERT_TRUE(workload.Join().ok());
  TableRow row{"shard SIGSTOP 2 s (deadline 0.5 s), SIGCONT", workload.Saw()};
  EXPECT_NE(row.workers_saw.find("DEADLINE_EXCEEDED"), std::string::npos);
  workload.Count(&row);
  row.outcome =
      absl::StrCat("all ", workload.acknowledged(), " rounds acknowledged");
  Finish(row);
}

TEST_F(FaultMatrixTest, AShardFiveTimesSlowerThanTheOthers) {
  Shards shards(dir_, 2, {});
  // Enough rounds that the slow run spans many throttle cycles.
  constexpr int kRounds = 200;
  // Fast first, for the pace without the fault.
  CountingWorkload fast(shards.addresses(), kRounds, 400);
  const absl::Time fast_start = absl::Now();
  fast.Start();
  ASSERT_TRUE(fast.Join().ok());
  const absl::Duration fast_time = absl::Now() - fast_start;
  // Shard 1 runs one 10 ms in 50: a fifth of its speed.
  std::atomic<bool> throttling{true};
  std::atomic<int> stops{0};
  std::thread throttle([&] {
    while (throttling) {
      shards.Signal(1, SIGSTOP);
      ++stops;
      absl::SleepFor(absl::Milliseconds(40));
      shards.Signal(1, SIGCONT);
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  CountingWorkload slow(shards.addresses(), kRounds, 400, absl::Seconds(30),
                        "slow_counts");
  // The fault is on before the rounds start.
  // (Not fatal: the throttle thread must be joined below whatever happens.)
  EXPECT_TRUE(WaitUntil([&] { return stops.load() > 0; }, absl::Seconds(10),
                        absl::Milliseconds(1)));
  const int stops_before = stops.load();
  const absl::Time slow_start = absl::Now();
  slow.Start();
  const absl::Status finished = slow.Join();
  const int stops_during = stops.load() - stops_before;
  throttling = false;
  throttle.join();
  shards.Signal(1, SIGCONT);
  ASSERT_TRUE(finished.ok()) << finished;
  // The fault was on while the rounds ran (how much slower they were is
  // reported, not asserted: timings on a shared machine are noise).
  const double slowdown =
      absl::FDivDuration(absl::Now() - slow_start, fast_time);
  EXPECT_GE(stops_during, 1) << "the shard was never stopped meanwhile";
  TableRow row{"one shard 5x slower (SIGSTOP 40 ms of 50)", slow.Saw()};
  slow.Count(&row);
  row.outcome = absl::StrFormat("all %d rounds acknowledged, %.1fx slower",
                                kRounds, slowdown);
  Finish(row);
}

TEST_F(FaultMatrixTest, AWorkerKilledTheOthersGoOnAndItRejoins) {
  Shards shards(dir_, 2, {});
  const std::string data = TrainingData();
  CountingWorkload workload(shards.addresses(), 60, 200);
  workload.Start(absl::Milliseconds(50));
  const std::vector<std::string> flags = {"--staleness=1", "--lease_ms=1000",
                                          "--slow_step_ms=150"};
  auto survivor = StartWorker(shards.addresses(), 0, 2, data, flags, "w0");
  auto victim = StartWorker(shards.addresses(), 1, 2, data, flags, "w1");
  ASSERT_TRUE(survivor != nullptr && victim != nullptr);
  auto clock_of = [&](uint32_t id) { return ClockOf(shards, id); };
  WaitUntil([&] { return clock_of(1).first >= 3; }, absl::Seconds(60),
            absl::Milliseconds(20));
  EXPECT_EQ(victim->SignalAndWait(SIGKILL), 128 + SIGKILL);
  const int64_t victim_clock = clock_of(1).first;
  ASSERT_GE(victim_clock, 3) << ReadFile(dir_ + "/w1.log");
  // Past its lease, worker 0 goes on without it.
  WaitUntil(
      [&] {
        return !clock_of(1).second && clock_of(0).first >= victim_clock + 2;
      },
      absl::Seconds(60), absl::Milliseconds(20));
  EXPECT_FALSE(clock_of(1).second) << "the dead worker's lease never lapsed";
  EXPECT_GE(clock_of(0).first, victim_clock + 2) << "worker 0 did not go on";
  auto rejoined = StartWorker(shards.addresses(), 1, 2, data, flags, "w1b");
  ASSERT_NE(rejoined, nullptr);
  const int survivor_exit = survivor->Wait(absl::Minutes(3));
  const int rejoined_exit = rejoined->Wait(absl::Minutes(3));
  ASSERT_TRUE(workload.Join().ok());
  EXPECT_EQ(survivor_exit, 0) << ReadFile(dir_ + "/w0.log");
  EXPECT_EQ(rejoined_exit, 0) << ReadFile(dir_ + "/w1b.log");
  const std::string rejoined_metrics = ReadFile(dir_ + "/w1b.json");
  // Restarted with the same --worker_index, it goes on from the clock the
  // coordinator holds for it instead of training its share twice.
  EXPECT_EQ(Metric(rejoined_metrics, "first_step"), victim_clock)
      << rejoined_metrics;
  EXPECT_LT(Metric(rejoined_metrics, "examples"),
            Metric(ReadFile(dir_ + "/w0.json"), "examples"))
      << rejoined_metrics;
  TableRow row{
      "worker kill -9 mid-training, restarted",
      absl::StrFormat("survivor waited %.1f s in all (the dead "
                      "worker's lease); counting client: %s",
                      Metric(ReadFile(dir_ + "/w0.json"), "wait_seconds"),
                      workload.Saw())};
  workload.Count(&row);
  row.outcome =
      absl::StrCat("survivor exit ", survivor_exit, ", restarted worker exit ",
                   rejoined_exit, " (went on from its clock)");
  Finish(row);
}

TEST_F(FaultMatrixTest, TheCoordinatorShardRestarted) {
  Shards shards(dir_, 2, {});
  const std::string data = TrainingData();
  CountingWorkload workload(shards.addresses(), 60, 200);
  workload.Start(absl::Milliseconds(50));
  const std::vector<std::string> flags = {"--staleness=1", "--lease_ms=3000",
                                          "--slow_step_ms=100"};
  auto first = StartWorker(shards.addresses(), 0, 2, data, flags, "w0");
  auto second = StartWorker(shards.addresses(), 1, 2, data, flags, "w1");
  ASSERT_TRUE(first != nullptr && second != nullptr);
  // Both workers train: the coordinator holds state to read back.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ClockOf(shards, 0).first >= 2 && ClockOf(shards, 1).first >= 2;
      },
      absl::Seconds(60), absl::Milliseconds(20)))
      << ReadFile(dir_ + "/w0.log");
  shards.Kill(0);  // shard 0 is the coordinator
  absl::SleepFor(absl::Milliseconds(300));
  shards.Start(0);
  const int first_exit = first->Wait(absl::Minutes(3));
  const int second_exit = second->Wait(absl::Minutes(3));
  ASSERT_TRUE(workload.Join().ok());
  EXPECT_EQ(first_exit, 0) << ReadFile(dir_ + "/w0.log");
  EXPECT_EQ(second_exit, 0) << ReadFile(dir_ + "/w1.log");
  for (const char* tag : {"w0", "w1"}) {
    const std::string metrics = ReadFile(dir_ + "/" + tag + ".json");
    EXPECT_LE(Metric(metrics, "max_staleness_seen"), 1)
        << tag << " ran past the bound across the restart: " << metrics;
  }
  EXPECT_NE(ReadFile(shards.log(0)).find("coordinator: 2 workers"),
            std::string::npos)
      << "the restarted coordinator did not read its state back";
  TableRow row{"coordinator shard kill -9, restarted",
               absl::StrFormat("workers retried their clock reports; "
                               "counting client: %s",
                               workload.Saw())};
  workload.Count(&row);
  row.outcome = absl::StrCat("workers exit ", first_exit, " and ", second_exit,
                             ", staleness bound held");
  Finish(row);
}

TEST_F(FaultMatrixTest, AFullDiskRefusesPushesUntilSpaceReturns) {
  if (g_small_disk == nullptr) GTEST_SKIP() << *g_no_small_disk_reason;
  // The shard's data dir on a small tmpfs mostly filled by a ballast file.
  const std::string disk = *g_small_disk + "/full_disk";
  std::filesystem::remove_all(disk);
  std::filesystem::create_directories(disk);
  const std::string ballast = disk + "/ballast";
  {
    std::ofstream file(ballast, std::ios::binary);
    const std::string megabyte(1 << 20, 'b');
    for (int i = 0; i < kSmallDiskMb - 4; ++i) file << megabyte;
  }
  Shards shards(disk, 1, {"--wal_max_log_mb=64"}, dir_);
  // Two pushers at once: the one that finds the disk full and the one whose
  // write is refused after it must both be told to retry.
  CountingWorkload workload(shards.addresses(), 200, 2000);
  CountingWorkload second(shards.addresses(), 200, 500, absl::Seconds(30),
                          "second_counts");
  workload.Start();
  second.Start();
  // Pushes fill what is left; the shard refuses (transiently) and the
  // client retries.
  WaitUntil(
      [&] {
        return workload.Saw().find("RESOURCE_EXHAUSTED") != std::string::npos ||
               workload.stopped();
      },
      absl::Seconds(60), absl::Milliseconds(20));
  const int acknowledged_when_full = workload.acknowledged();
  ASSERT_NE(workload.Saw().find("RESOURCE_EXHAUSTED"), std::string::npos)
      << "the disk never filled up: " << workload.Saw();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_LE(workload.acknowledged(), acknowledged_when_full + 1)
      << "pushes went on with a full disk";
  std::filesystem::remove(ballast);  // space returns
  const absl::Status finished = workload.Join();
  ASSERT_TRUE(finished.ok()) << finished;
  const absl::Status second_finished = second.Join();
  ASSERT_TRUE(second_finished.ok()) << second_finished;
  EXPECT_NE(ReadFile(shards.log(0)).find("No space left on device"),
            std::string::npos);
  TableRow row{"full disk (tmpfs), then space freed; two pushers",
               workload.Saw() + "; " + second.Saw()};
  workload.Count(&row);
  second.Count(&row);
  // No corruption: the shard restarts on what the full disk left.
  shards.Kill(0);
  shards.Start(0);
  TableRow after_restart;
  workload.Count(&after_restart);
  second.Count(&after_restart);
  EXPECT_EQ(after_restart.lost + after_restart.doubled, 0)
      << "after a restart on the same data";
  row.outcome =
      absl::StrCat("refused while full after ", acknowledged_when_full,
                   " rounds; all 200 acknowledged once space "
                   "returned; restarts clean");
  Finish(row);
}

// Pushes, then dies without writing anything back: only the push log holds
// the updates. Returns the data dir's push-log segments, oldest first.
std::vector<std::string> PushThenKill(const std::string& dir, Shards& shards,
                                      int rounds) {
  CountingWorkload workload(shards.addresses(), rounds, 2000);
  workload.Start();
  EXPECT_TRUE(workload.Join().ok());
  shards.Kill(0);
  std::vector<std::string> segments;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir + "/shard0/push_log")) {
    segments.push_back(entry.path().string());
  }
  std::sort(segments.begin(), segments.end());
  return segments;
}

TEST_F(FaultMatrixTest, ACorruptedPushLogSegmentStopsTheShardNamingIt) {
  // 1 MiB segments, write-backs never: the rounds stay in several segments.
  Shards shards(dir_, 1, {"--wal_max_log_mb=8", "--write_back_ms=3600000"});
  const std::vector<std::string> segments = PushThenKill(dir_, shards, 40);
  ASSERT_GE(segments.size(), 3u);
  {
    std::fstream file(segments[0],
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100000);
    file.put('X');
  }
  const std::string log = dir_ + "/refused.log";
  const int code = RunServerToExit(
      {"--data_dir=" + dir_ + "/shard0", "--listen=127.0.0.1:0"}, log,
      absl::Seconds(60));
  EXPECT_NE(code, 0);
  EXPECT_NE(ReadFile(log).find(segments[0]), std::string::npos)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("--push_log_recovery=point_in_time"),
            std::string::npos);
  // Told to, it replays what precedes the damage and reports the rest.
  shards.Start(0, {"--push_log_recovery=point_in_time"});
  EXPECT_NE(ReadFile(shards.log(0)).find("point-in-time recovery"),
            std::string::npos);
  TableRow row{"corrupted push-log segment at start", "nothing (shard down)"};
  row.counted = false;
  row.outcome =
      "refused to start, naming the segment; starts with "
      "--push_log_recovery=point_in_time, dropping what follows";
  Finish(row);
}

TEST_F(FaultMatrixTest, ACorruptedRocksDbFileStopsTheShardNamingIt) {
  Shards shards(dir_, 1, {});
  PushThenKill(dir_, shards, 5);
  std::string manifest;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir_ + "/shard0")) {
    if (entry.path().filename().string().rfind("MANIFEST-", 0) == 0)
      manifest = entry.path().string();
  }
  ASSERT_FALSE(manifest.empty());
  std::filesystem::resize_file(manifest, 20);
  const std::string log = dir_ + "/refused.log";
  const int code = RunServerToExit(
      {"--data_dir=" + dir_ + "/shard0", "--listen=127.0.0.1:0"}, log,
      absl::Seconds(60));
  EXPECT_NE(code, 0);
  EXPECT_NE(ReadFile(log).find(manifest.substr(manifest.rfind('/') + 1)),
            std::string::npos)
      << ReadFile(log);
  TableRow row{"corrupted RocksDB MANIFEST at start", "nothing (shard down)"};
  row.counted = false;
  row.outcome = "refused to start, naming the file";
  Finish(row);
}

// Prints the table, and writes it to $FAULT_MATRIX_TABLE if set.
class TablePrinter : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    std::ostringstream out;
    out << "| fault | what the workers saw (retried) | updates lost | "
           "doubled | outcome |\n| --- | --- | --- | --- | --- |\n";
    for (const TableRow& row : Table()) {
      out << "| " << row.fault << " | " << row.workers_saw << " | "
          << (row.counted ? std::to_string(row.lost) : "-") << " | "
          << (row.counted ? std::to_string(row.doubled) : "-") << " | "
          << row.outcome << " |\n";
    }
    std::printf("\n%s", out.str().c_str());
    if (const char* path = std::getenv("FAULT_MATRIX_TABLE")) {
      std::ofstream(path) << out.str();
    }
  }
};

// Enters a user and mount namespace of this process's own and mounts a
// small tmpfs in it, for the full-disk test; must run while the process has
// one thread. Returns the mount point, or sets `why`.
std::string MountSmallDisk(std::string* why) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    *why = absl::StrCat("cannot enter a user and mount namespace (",
                        std::strerror(errno),
                        "): no size-capped file system for the full-disk test");
    return "";
  }
  std::ofstream("/proc/self/setgroups") << "deny";
  std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
  std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
  mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  const std::string dir = FreshTestDir("small_disk");
  const std::string options = absl::StrCat("size=", kSmallDiskMb, "m");
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    *why = absl::StrCat("cannot mount a tmpfs (", std::strerror(errno), ")");
    return "";
  }
  return dir;
}

}  // namespace
}  // namespace ps::testing

int main(int argc, char** argv) {
  std::string why;
  const std::string disk = ps::testing::MountSmallDisk(&why);
  if (!disk.empty()) {
    ps::testing::g_small_disk = new std::string(disk);
  } else {
    ps::testing::g_no_small_disk_reason = new std::string(why);
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new ps::testing::TablePrinter);
  return RUN_ALL_TESTS();
}
