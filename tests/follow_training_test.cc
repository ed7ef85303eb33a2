// ps_worker --follow against a real shard: a directory that grows while the
// worker trains, a SIGTERM in the middle of a file and a restart that goes
// on at that file's offset (the coordinator holds it), every example of
// every file trained on once, each file scored before it is trained on.

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/training_cluster.h"

namespace ps::testing {
namespace {

constexpr int kFiles = 4;
constexpr int kLinesPerFile = kTrainLines / kFiles;

InputPosition PositionHeldFor(ServerProcess& coordinator, uint32_t worker,
                              int64_t* clock) {
  auto admin = Admin::NewStub(coordinator.channel());
  grpc::ClientContext context;
  WorkerClocksResponse clocks;
  *clock = -1;
  if (!admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks).ok())
    return {};
  for (const auto& w : clocks.workers()) {
    if (w.worker() != worker) continue;
    *clock = w.clock();
    return w.input_position();
  }
  return {};
}

class FollowTrainingTest : public TrainingTest {
 protected:
  // Splits the training lines into part-1.tsv .. part-4.tsv under
  // dir_/parts (not yet in the followed directory).
  void SplitTrainingLines() {
    std::filesystem::create_directories(dir_ + "/parts");
    std::filesystem::create_directories(dir_ + "/incoming");
    std::ifstream in(*data_ + "/train.tsv");
    std::string line;
    for (int f = 1; f <= kFiles; ++f) {
      std::ofstream out(absl::StrCat(dir_, "/parts/part-", f, ".tsv"));
      for (int i = 0; i < kLinesPerFile && std::getline(in, line); ++i)
        out << line << "\n";
    }
  }

  // Moves part-`f` into the followed directory, then marks it complete.
  void Deliver(int f) {
    const std::string name = absl::StrCat("part-", f, ".tsv");
    std::filesystem::rename(dir_ + "/parts/" + name,
                            dir_ + "/incoming/" + name);
    std::ofstream(dir_ + "/incoming/" + name + ".done");
  }

  std::vector<std::string> FollowArgs(const std::vector<std::string>& servers,
                                      const std::vector<std::string>& extra) {
    std::vector<std::string> argv = WorkerArgs(servers, 0, 1, extra);
    for (std::string& arg : argv) {
      if (arg.rfind("--train=", 0) == 0) arg = "--follow=" + dir_ + "/incoming";
    }
    argv.push_back(absl::StrCat("--follow_until=part-", kFiles, ".tsv"));
    argv.push_back("--follow_poll_ms=50");
    argv.push_back("--drain_seconds=20");
    return argv;
  }
};

TEST_F(FollowTrainingTest, AGrowingDirectoryIsTrainedOnOnceAcrossARestart) {
  SplitTrainingLines();
  Deliver(1);
  Deliver(2);
  const std::vector<std::string> servers = StartShards(1);
  ASSERT_EQ(servers.size(), 1u);

  // Stopped in the middle of part-2 (a file is about 20 steps).
  auto worker = ChildProcess::Start(
      FollowArgs(servers, {"--slow_step_ms=100", "--staleness=0"}), false,
      dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  int64_t clock = -1;
  while (PositionHeldFor(*shards_[0], 0, &clock).file() != "part-2.tsv" ||
         PositionHeldFor(*shards_[0], 0, &clock).file_examples() <
             kLinesPerFile / 3) {
    ASSERT_LT(absl::Now(), deadline) << ReadFile(dir_ + "/worker0.log");
    absl::SleepFor(absl::Milliseconds(20));
  }
  const WorkerRun first = Collect(0, (*worker)->SignalAndWait(SIGTERM));
  ASSERT_EQ(first.exit_code, 75) << first.log;
  const InputPosition left = PositionHeldFor(*shards_[0], 0, &clock);
  EXPECT_EQ(left.file(), "part-2.tsv");
  EXPECT_GT(left.file_examples(), 0);
  EXPECT_LT(left.file_examples(), kLinesPerFile);
  EXPECT_EQ(first.Get("examples"), kLinesPerFile + left.file_examples());
  // part-1 was scored before it was trained on; part-2, not trained on to
  // its end, is not reported by this run.
  EXPECT_NE(first.log.find("part-1.tsv: progressive validation"),
            std::string::npos)
      << first.log;
  EXPECT_EQ(first.log.find("part-2.tsv: progressive validation"),
            std::string::npos)
      << first.log;

  // The restart goes on in part-2; part-3 and part-4 arrive once it waits
  // for them.
  auto again = ChildProcess::Start(
      FollowArgs(servers, {"--slow_step_ms=5", "--staleness=0"}), false,
      dir_ + "/worker0.log");
  ASSERT_TRUE(again.ok());
  for (int f = 3; f <= kFiles; ++f) {
    const std::string waiting =
        absl::StrCat("nothing new after part-", f - 1, ".tsv; waiting");
    while (ReadFile(dir_ + "/worker0.log").find(waiting) == std::string::npos) {
      ASSERT_LT(absl::Now(), deadline + absl::Seconds(120))
          << ReadFile(dir_ + "/worker0.log");
      absl::SleepFor(absl::Milliseconds(20));
    }
    Deliver(f);
  }
  const WorkerRun second = Collect(0, (*again)->Wait(absl::Minutes(5)));
  ASSERT_EQ(second.exit_code, 0) << second.log;
  EXPECT_NE(second.log.find(absl::StrCat("going on in part-2.tsv after ",
                                         left.file_examples(), " examples")),
            std::string::npos)
      << second.log;
  // Every line of every file once: what the first run did not, the second
  // did.
  EXPECT_EQ(first.Get("examples") + second.Get("examples"), kTrainLines);
  EXPECT_EQ(second.Get("late_files"), 0);
  for (int f = 2; f <= kFiles; ++f) {
    EXPECT_NE(
        second.metrics.find(absl::StrCat("\"file\": \"part-", f, ".tsv\"")),
        std::string::npos)
        << second.metrics;
  }
  // Scored before training on them, the last files show what the model
  // learnt from the first ones.
  EXPECT_GT(second.Get("last_file_progressive_auc"), 0.6) << second.metrics;
  EXPECT_GT(second.Get("test_auc"), 0.6);
  shards_.clear();
}

TEST_F(FollowTrainingTest, TwoWorkersEachTrainOnTheirShareOfEveryFile) {
  SplitTrainingLines();
  for (int f = 1; f <= kFiles; ++f) Deliver(f);
  const std::vector<std::string> servers = StartShards(2);
  ASSERT_EQ(servers.size(), 2u);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> argv = FollowArgs(servers, {"--staleness=async"});
    for (std::string& arg : argv) {
      if (arg == "--worker_index=0") arg = absl::StrCat("--worker_index=", w);
      if (arg == "--num_workers=1") arg = "--num_workers=2";
      if (arg == "--metrics_out=" + dir_ + "/worker0.json")
        arg = absl::StrCat("--metrics_out=", dir_, "/worker", w, ".json");
    }
    auto worker = ChildProcess::Start(argv, false,
                                      absl::StrCat(dir_, "/worker", w, ".log"));
    ASSERT_TRUE(worker.ok());
    workers.push_back(*std::move(worker));
  }
  int64_t examples = 0;
  for (int w = 0; w < 2; ++w) {
    const WorkerRun run = Collect(w, workers[w]->Wait(absl::Minutes(5)));
    ASSERT_EQ(run.exit_code, 0) << run.log;
    EXPECT_GT(run.Get("examples"), kTrainLines / 4) << "an uneven share";
    examples += static_cast<int64_t>(run.Get("examples"));
    for (int f = 1; f <= kFiles; ++f) {
      EXPECT_NE(
          run.metrics.find(absl::StrCat("\"file\": \"part-", f, ".tsv\"")),
          std::string::npos)
          << "worker " << w << " has no share of part-" << f << "\n"
          << run.metrics;
    }
  }
  EXPECT_EQ(examples, kTrainLines);
  shards_.clear();
}

}  // namespace
}  // namespace ps::testing
