// File: tests/training_cluster.h
//
// What the end-to-end training tests share: click logs generated once per
// test binary (with a known ground truth), shards started as real
// processes (tests/test_cluster.h), ps_worker command lines, and the
// metrics each worker wrote.

#ifndef PS_TESTS_TRAINING_CLUSTER_H_
#define PS_TESTS_TRAINING_CLUSTER_H_

#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/server_process.h"
#include "tests/test_cluster.h"
#include "tests/test_files.h"

namespace ps::testing {

inline constexpr int kTrainLines = 80000;
inline constexpr int kTestLines = 20000;

struct WorkerRun {
  int exit_code = -1;
  std::string metrics;
  std::string log;
  double Get(const std::string& key) const { return Metric(metrics, key); }
};

class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(FreshTestDir("training_data"));
    const std::string gen = BinaryPath("worker/datagen/clicklog_gen");
    const std::string log = *data_ + "/gen.log";
    ASSERT_EQ(RunToCompletion(
                  {gen, "--out=" + *data_ + "/train.tsv",
                   absl::StrCat("--lines=", kTrainLines), "--sample_seed=1"},
                  log),
              0);
    ASSERT_EQ(RunToCompletion(
                  {gen, "--out=" + *data_ + "/train.tsv.gz",
                   absl::StrCat("--lines=", kTrainLines), "--sample_seed=1"},
                  log),
              0);
    ASSERT_EQ(RunToCompletion(
                  {gen, "--out=" + *data_ + "/test.tsv",
                   absl::StrCat("--lines=", kTestLines), "--sample_seed=2",
                   "--summary_out=" + *data_ + "/test_truth.json"},
                  log),
              0);
  }

  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  void SetUp() override {
    dir_ = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // Starts `count` shards on fresh data directories (a new cluster, the
  // last one stopped) with `server_flags` (instead of the defaults), and
  // returns their addresses: none, with a test failure, if one did not
  // start. Callers check the count before using shard() or WorkerArgs().
  std::vector<std::string> StartShards(
      int count, const std::vector<std::string>& server_flags = {
                     "--durability=periodic", "--cache_mb=64"}) {
    cluster_.reset();
    TestClusterOptions options;
    options.shards = count;
    options.server_flags = server_flags;
    absl::StatusOr<std::unique_ptr<TestCluster>> cluster = TestCluster::Start(
        absl::StrCat(dir_, "/cluster", ++clusters_), options);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return {};
    cluster_ = *std::move(cluster);
    return cluster_->addresses();
  }

  // Shard i of the cluster StartShards() started last.
  ServerProcess& shard(int i) { return cluster_->shard(i); }
  void StopShards() { cluster_.reset(); }

  // Worker `index` of `count` of that cluster, training on the test data
  // with the tests' model, then `extra` flags.
  std::vector<std::string> WorkerArgs(int index, int count,
                                      const std::vector<std::string>& extra) {
    std::vector<std::string> flags = {
        "--train=" + *data_ + "/train.tsv",
        "--test=" + *data_ + "/test.tsv",
        "--batch_size=1024",
        // The tests compare AUCs exactly across runs, which only the CPU's
        // deterministic sums allow (a GPU's atomics reorder them).
        "--device=cpu",
        "--hidden=64,32",
        "--embedding_dim=8",
        "--progress_every_s=1",
        absl::StrCat("--metrics_out=", dir_, "/worker", index, ".json"),
    };
    flags.insert(flags.end(), extra.begin(), extra.end());
    return cluster_->WorkerArgs(index, count, flags);
  }

  // Whether worker `index` logs a progress line (--progress_every_s=1)
  // within `timeout`: it has trained.
  bool WaitForProgress(int index, absl::Duration timeout = absl::Seconds(60)) {
    return WaitForText(absl::StrCat(dir_, "/worker", index, ".log"),
                       " examples | ", timeout);
  }

  WorkerRun Collect(int index, int exit_code) {
    WorkerRun run;
    run.exit_code = exit_code;
    run.metrics = ReadFile(absl::StrCat(dir_, "/worker", index, ".json"));
    run.log = ReadFile(absl::StrCat(dir_, "/worker", index, ".log"));
    return run;
  }

  // Trains `workers` workers against `num_shards` new shards, all at once;
  // per-worker extra flags from `extra[i]` (if present) and `common`.
  std::vector<WorkerRun> Train(
      int num_shards, int workers, const std::vector<std::string>& common,
      const std::vector<std::vector<std::string>>& extra = {}) {
    if (StartShards(num_shards).empty()) {
      return std::vector<WorkerRun>(workers);  // each exit_code -1
    }
    std::vector<std::unique_ptr<ChildProcess>> processes;
    for (int w = 0; w < workers; ++w) {
      std::vector<std::string> flags = common;
      if (w < static_cast<int>(extra.size())) {
        flags.insert(flags.end(), extra[w].begin(), extra[w].end());
      }
      auto process =
          ChildProcess::Start(WorkerArgs(w, workers, flags), false,
                              absl::StrCat(dir_, "/worker", w, ".log"));
      EXPECT_TRUE(process.ok());
      processes.push_back(std::move(process).value());
    }
    std::vector<WorkerRun> runs;
    for (int w = 0; w < workers; ++w) {
      runs.push_back(Collect(w, processes[w]->Wait(absl::Minutes(5))));
      EXPECT_EQ(runs.back().exit_code, 0) << runs.back().log;
    }
    StopShards();
    return runs;
  }

  double TruthAuc() const {
    return Metric(ReadFile(*data_ + "/test_truth.json"), "truth_auc");
  }

  inline static std::string* data_ = nullptr;
  std::string dir_;
  int clusters_ = 0;
  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TRAINING_CLUSTER_H_
