// ps_worker --follow against a real shard: a directory that grows while the
// worker trains, a SIGTERM in the middle of a file and a restart that goes
// on at that file's offset (the coordinator holds it), every example of
// every file trained on once, each file scored before it is trained on;
// and worker 0's periodic deltas bring each followed file to ps_serve
// within a bounded time, across the restart.

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/manifest.h"
#include "base/wait_until.h"
#include "net/metrics_scrape.h"
#include "tests/serve_process.h"
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

  // Waits up to `timeout` until the coordinator holds worker 0 in `file`
  // with at least `examples` of it, setting `*clock` to its clock.
  ::testing::AssertionResult WaitForPosition(const std::string& file,
                                             int64_t examples,
                                             absl::Duration timeout,
                                             int64_t* clock) {
    InputPosition at;
    if (WaitUntil(
            [&] {
              at = PositionHeldFor(shard(0), 0, clock);
              return at.file() == file && at.file_examples() >= examples;
            },
            timeout, absl::Milliseconds(20))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "not at " << examples << " of " << file << " but at "
           << at.file_examples() << " of " << at.file() << "\n"
           << ReadFile(dir_ + "/worker0.log");
  }

  // Waits up to `timeout` until worker 0's log says `text`.
  ::testing::AssertionResult WaitForLog(const std::string& text,
                                        absl::Duration timeout) {
    if (WaitUntil(
            [&] {
              return ReadFile(dir_ + "/worker0.log").find(text) !=
                     std::string::npos;
            },
            timeout, absl::Milliseconds(20))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "worker 0 never said \"" << text << "\"\n"
           << ReadFile(dir_ + "/worker0.log");
  }

  // Starts worker 0 with `argv`, waits until it is a third into part-2 and
  // stops it with SIGTERM: the run, which drained (exit 75) unless the test
  // failed.
  WorkerRun StopInPart2(const std::vector<std::string>& argv) {
    auto worker = ChildProcess::Start(argv, false, dir_ + "/worker0.log");
    EXPECT_TRUE(worker.ok());
    if (!worker.ok()) return WorkerRun();
    int64_t clock = -1;
    EXPECT_TRUE(WaitForPosition("part-2.tsv", kLinesPerFile / 3,
                                absl::Seconds(120), &clock));
    WorkerRun run = Collect(0, (*worker)->SignalAndWait(SIGTERM));
    EXPECT_EQ(run.exit_code, 75) << run.log;
    return run;
  }

  std::vector<std::string> FollowArgs(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = WorkerArgs(0, 1, extra);
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
  const WorkerRun first =
      StopInPart2(FollowArgs({"--slow_step_ms=100", "--staleness=0"}));
  ASSERT_EQ(first.exit_code, 75);
  int64_t clock = -1;
  const InputPosition left = PositionHeldFor(shard(0), 0, &clock);
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
  // for them. Meanwhile its metrics say it waits for input (not stalled).
  auto again =
      ChildProcess::Start(FollowArgs({"--slow_step_ms=5", "--staleness=0",
                                      "--metrics_listen=127.0.0.1:0"}),
                          false, dir_ + "/worker0.log");
  ASSERT_TRUE(again.ok());
  for (int f = 3; f <= kFiles; ++f) {
    const std::string waiting =
        absl::StrCat("nothing new after part-", f - 1, ".tsv; waiting");
    ASSERT_TRUE(WaitForLog(waiting, absl::Seconds(240)));
    if (f == 3) {
      const std::string log = ReadFile(dir_ + "/worker0.log");
      const size_t at = log.find("metrics on ");
      ASSERT_NE(at, std::string::npos) << log;
      const std::string address =
          log.substr(at + 11, log.find('\n', at) - at - 11);
      std::string metrics;
      EXPECT_TRUE(WaitUntil(
          [&] {
            metrics = ScrapeMetrics(address);
            return metrics.find(
                       "ps_worker_waiting_for_input{worker=\"0\"} "
                       "1") != std::string::npos;
          },
          absl::Seconds(60), absl::Milliseconds(100)))
          << metrics;
      // Waiting for more is not finished.
      EXPECT_NE(metrics.find("ps_worker_finished{worker=\"0\"} 0"),
                std::string::npos)
          << metrics;
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
  StopShards();
}

TEST_F(FollowTrainingTest, TwoWorkersEachTrainOnTheirShareOfEveryFile) {
  SplitTrainingLines();
  for (int f = 1; f <= kFiles; ++f) Deliver(f);
  const std::vector<std::string> servers = StartShards(2);
  ASSERT_EQ(servers.size(), 2u);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    // Worker 1 steps slowly, so that worker 0 finishes first and waits for
    // it: meanwhile its metrics say it is done (not stalled).
    std::vector<std::string> argv =
        FollowArgs({"--staleness=async", w == 0 ? "--metrics_listen=127.0.0.1:0"
                                                : "--slow_step_ms=100"});
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
  ASSERT_TRUE(
      WaitForText(dir_ + "/worker0.log", "metrics on ", absl::Seconds(60)));
  const std::string log = ReadFile(dir_ + "/worker0.log");
  const size_t at = log.find("metrics on ");
  const std::string address = log.substr(at + 11, log.find('\n', at) - at - 11);
  std::string metrics;
  EXPECT_TRUE(WaitUntil(
      [&] {
        metrics = ScrapeMetrics(address);
        return metrics.find("ps_worker_finished{worker=\"0\"} 1") !=
               std::string::npos;
      },
      absl::Seconds(120), absl::Milliseconds(50)))
      << metrics;
  int code = 0;
  EXPECT_FALSE(workers[1]->Exited(&code)) << "worker 0 did not finish first";
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
  StopShards();
}

// What ps_serve answers through an independent client (Python's grpcio):
// the model's version and cut, and the first `count` lines' scores.
struct Served {
  std::string version;
  int64_t cut = -1;
  std::vector<float> scores;
};

Served AskPythonClient(const std::string& address, const std::string& lines,
                       int count, const std::string& dir) {
  const std::string out = dir + "/python_client.txt";
  Served served;
  if (RunToCompletion({"/bin/sh", "-c",
                       absl::StrCat("/usr/bin/python3 ",
                                    BinaryPath("tests/serve_client.py"), " ",
                                    address, " ", BinaryPath("proto"), " ",
                                    lines, " ", count, " cut > ", out)},
                      dir + "/python_client.log") != 0) {
    return served;
  }
  std::ifstream in(out);
  in >> served.version >> served.cut;
  for (float score; in >> score;) served.scores.push_back(score);
  return served;
}

TEST_F(FollowTrainingTest,
       FollowedFilesReachServingThroughDeltasInBoundedTime) {
  SplitTrainingLines();
  Deliver(1);
  Deliver(2);
  const std::vector<std::string> servers = StartShards(1);
  ASSERT_EQ(servers.size(), 1u);
  const std::string exports = dir_ + "/exports";
  std::filesystem::create_directories(exports);
  absl::StatusOr<ServeProcess> serve =
      StartServe(exports, dir_ + "/serve.log", {"--scorers=1"});
  ASSERT_TRUE(serve.ok()) << serve.status();
  const std::string& address = serve->address;
  const std::vector<std::string> export_flags = {
      "--staleness=0", "--export_every_s=1", "--export_dir=" + exports,
      "--base_export_every=100"};
  auto args = [&](const std::string& slow_step_ms) {
    std::vector<std::string> extra = export_flags;
    extra.push_back("--slow_step_ms=" + slow_step_ms);
    return FollowArgs(extra);
  };

  // Stopped in the middle of part-2, after some exports.
  ASSERT_EQ(StopInPart2(args("100")).exit_code, 75);
  int64_t clock = -1;

  // The restart goes on; each new file, once trained on, is in what
  // ps_serve answers with within a bounded time.
  auto again = ChildProcess::Start(args("5"), false, dir_ + "/worker0.log");
  ASSERT_TRUE(again.ok());
  const std::string test_lines = *data_ + "/test.tsv";
  for (int f = 3; f <= kFiles; ++f) {
    const std::string waiting =
        absl::StrCat("nothing new after part-", f - 1, ".tsv; waiting");
    ASSERT_TRUE(WaitForLog(waiting, absl::Seconds(240)));
    // part-(f-1) is trained on whole (every step of it acknowledged): its
    // last step's clock.
    ASSERT_TRUE(WaitForPosition(absl::StrCat("part-", f - 1, ".tsv"),
                                kLinesPerFile, absl::Seconds(240), &clock));
    const absl::Time trained = absl::Now();
    Served served;
    auto served_since_clock = [&] {
      served = AskPythonClient(address, test_lines, 200, dir_);
      return served.cut >= clock;
    };
    ASSERT_TRUE(WaitUntil(served_since_clock, absl::Seconds(30),
                          absl::Milliseconds(200)))
        << "part-" << f - 1 << " (clock " << clock
        << ") not served within 30 s; serving " << served.version
        << " at clock " << served.cut << "\n"
        << ReadFile(dir_ + "/serve.log") << ReadFile(dir_ + "/worker0.log");
    std::printf("part-%d.tsv served %.2f s after it was trained on (%s)\n",
                f - 1, absl::ToDoubleSeconds(absl::Now() - trained),
                served.version.c_str());
    Deliver(f);
  }
  const WorkerRun second = Collect(0, (*again)->Wait(absl::Minutes(5)));
  ASSERT_EQ(second.exit_code, 0) << second.log;

  // The last export (written as training ended) is served, a delta read
  // over its base, with ps_predict's scores of that export.
  PositionHeldFor(shard(0), 0, &clock);
  Served served;
  ASSERT_TRUE(WaitUntil(
      [&] {
        served = AskPythonClient(address, test_lines, 200, dir_);
        return served.cut >= clock;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << ReadFile(dir_ + "/serve.log");
  auto manifest = ReadExportManifest(exports + "/" + served.version);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->delta_index(), 0u) << served.version;
  const std::string scores = dir_ + "/predict.txt";
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/predict/ps_predict"),
                             "--export=" + exports + "/" + served.version,
                             "--input=" + test_lines, "--out=" + scores},
                            dir_ + "/predict.log"),
            0)
      << ReadFile(dir_ + "/predict.log");
  std::ifstream in(scores);
  std::vector<float> predicted;
  for (float score; in >> score;) predicted.push_back(score);
  ASSERT_GE(predicted.size(), 200u);
  ASSERT_EQ(served.scores.size(), 200u);
  for (int i = 0; i < 200; ++i)
    ASSERT_NEAR(served.scores[i], predicted[i], 1e-6) << "line " << i;
  StopShards();
}

}  // namespace
}  // namespace ps::testing
