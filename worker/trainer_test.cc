// Trainer against an in-memory cluster (fake_training_client.h): the whole
// pipeline (prefetch, compute, push, heartbeat, reporting) on the CPU
// backend, without processes or sockets.

#include "worker/trainer.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "model/batch_inputs.h"
#include "model/builtin_specs.h"
#include "model/dense_chunks.h"
#include "model/input/input_layout.h"
#include "worker/datagen/clicklog_generator.h"
#include "worker/fake_training_client.h"

namespace ps::worker {
namespace {

constexpr int kLines = 1000;
constexpr int kBatch = 100;

// A click log of `lines` generated lines in Criteo's layout.
std::string WriteClickLog(const std::string& name, int lines) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  GeneratorOptions generator_options;
  generator_options.max_vocabulary = 1000;
  ClickLogGenerator generator(generator_options, /*sample_seed=*/7);
  std::ofstream out(path);
  std::string line;
  double probability = 0;
  for (int i = 0; i < lines; ++i) {
    generator.Next(&line, &probability);
    out << line << "\n";
  }
  return path;
}

OptimizerSpec Spec(OptimizerSpec::Kind kind, float learning_rate) {
  OptimizerSpec spec;
  spec.set_kind(kind);
  spec.set_learning_rate(learning_rate);
  return spec;
}

TrainerOptions SmallWideDeep(
    const std::string& train,
    const model::InputLayout& layout = model::InputLayout::Criteo(),
    bool wide_in_embedding_row = false,
    const std::string& model = "wide_deep") {
  TrainerOptions options;
  options.train.files = train;
  options.train.layout = layout;
  options.train.batch_size = kBatch;
  model::BuiltinOptions builtin;
  builtin.embedding_dim = 4;
  builtin.hidden = {8};
  builtin.embedding_optimizer = Spec(OptimizerSpec::ADAGRAD, 0.05f);
  builtin.wide_optimizer = Spec(OptimizerSpec::FTRL, 0.05f);
  builtin.dense_optimizer = Spec(OptimizerSpec::ADAM, 0.001f);
  builtin.wide_in_embedding_row = wide_in_embedding_row;
  options.model = *model::BuiltinModelSpec(
      model, model::ColumnUses(options.train.layout), builtin);
  options.progress_every = absl::Hours(1);
  options.final_wait_limit = absl::Seconds(1);
  return options;
}

std::vector<int64_t> PushedClocks(const FakeTrainingClient& cluster) {
  std::vector<int64_t> clocks;
  for (const auto& push : cluster.pushes()) clocks.push_back(push.clock);
  return clocks;
}

std::vector<int64_t> Steps(int64_t count) {
  std::vector<int64_t> steps;
  for (int64_t step = 0; step < count; ++step) steps.push_back(step);
  return steps;
}

class TrainerTest : public ::testing::Test {
 protected:
  TrainerTest() : backend_(kernels::NewCpuBackend()) {}

  absl::StatusOr<TrainingSummary> Train(const TrainerOptions& options) {
    trainer_ = std::make_unique<Trainer>(options, 0, &cluster_, backend_.get());
    return trainer_->Run();
  }

  FakeTrainingClient cluster_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Trainer> trainer_;
};

// A click log in `layout` of `lines` lines whose negatives were kept at
// `keep_rate`, each kept one weighted 1 / keep_rate.
std::string WriteDownSampledLog(const std::string& name,
                                const model::InputLayout& layout, int lines,
                                double keep_rate, uint64_t sample_seed) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  GeneratorOptions generator_options;
  generator_options.max_vocabulary = 1000;
  ClickLogGenerator generator(generator_options, sample_seed);
  std::mt19937 keep(sample_seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::ofstream out(path);
  GeneratedExample example;
  std::string line;
  double probability = 0;
  for (int written = 0; written < lines;) {
    generator.Next(&example, &probability);
    if (!example.click) {
      if (uniform(keep) >= keep_rate) continue;
      example.weight = 1.0 / keep_rate;
    }
    FormatLine(example, layout, written++, &line);
    out << line << "\n";
  }
  return path;
}

// Negatives down-sampled to a quarter train, weighted by 4, a model of the
// click rate drawn: on a test file of every line drawn, its logloss is well
// below that of the same lines unweighted, whose model predicts the rate
// of the down-sampled file (about twice as many clicks).
TEST_F(TrainerTest, WeightedDownSampledNegativesTrainTheDrawnClickRate) {
  const model::InputLayout weighted = *model::MakeInputLayout(
      "tsv", false, "label,dense*13,cat*26,weight", "|", "sum", "");
  const std::string train =
      WriteDownSampledLog("downsampled.tsv", weighted, 6000, 0.25, 7);
  const std::string test =
      WriteDownSampledLog("drawn.tsv", weighted, 3000, 1.0, 8);
  TrainerOptions options = SmallWideDeep(train, weighted);
  options.train.epochs = 3;
  options.test_files = test;
  absl::StatusOr<TrainingSummary> by_weight = Train(options);
  ASSERT_OK(by_weight);

  // The same files with the weight column skipped.
  const model::InputLayout unweighted = *model::MakeInputLayout(
      "tsv", false, "label,dense*13,cat*26,skip", "|", "sum", "");
  TrainerOptions plain_options = SmallWideDeep(train, unweighted);
  plain_options.train.epochs = 3;
  plain_options.test_files = test;
  FakeTrainingClient other_cluster;
  Trainer plain_trainer(plain_options, 0, &other_cluster, backend_.get());
  absl::StatusOr<TrainingSummary> plain = plain_trainer.Run();
  ASSERT_OK(plain);
  EXPECT_EQ(by_weight->test_examples, 3000);
  EXPECT_LT(by_weight->test_logloss, plain->test_logloss - 0.05)
      << "weighted " << by_weight->test_logloss << ", unweighted "
      << plain->test_logloss;
}

TEST_F(TrainerTest, PushesEveryStepOnceInOrderThenFinishesAndEvaluates) {
  const std::string log = WriteClickLog("train.tsv", kLines);
  TrainerOptions options = SmallWideDeep(log);
  options.test_files = log;
  absl::StatusOr<TrainingSummary> summary = Train(options);
  ASSERT_OK(summary);
  EXPECT_EQ(summary->steps, kLines / kBatch);
  EXPECT_EQ(summary->examples, kLines);
  EXPECT_FALSE(summary->drained);
  EXPECT_EQ(PushedClocks(cluster_), Steps(kLines / kBatch));
  for (const auto& push : cluster_.pushes()) {
    // The embeddings, the wide weights and every dense tensor.
    EXPECT_GE(push.tables.size(), 3u);
  }
  const auto worker = cluster_.worker(0);
  ASSERT_TRUE(worker.has_value());
  EXPECT_TRUE(worker->finished);
  EXPECT_EQ(worker->clock, kLines / kBatch);
  EXPECT_EQ(worker->examples, kLines);
  EXPECT_TRUE(trainer_->finished());
  EXPECT_FALSE(cluster_.Rows("wide_deep.embedding").empty());
  EXPECT_EQ(summary->test_examples, kLines);
  EXPECT_GT(summary->test_auc, 0.5);
  // Every pull under staleness 0 saw staleness 0.
  EXPECT_EQ(summary->staleness_histogram,
            (std::vector<int64_t>{kLines / kBatch}));
}

// Each table's initializer seed, by table name.
std::map<std::string, uint64_t> InitializerSeeds(
    const FakeTrainingClient& cluster) {
  std::map<std::string, uint64_t> seeds;
  for (const std::string& table : cluster.tables()) {
    const std::optional<TableSpec> spec = cluster.table_spec(table);
    if (spec.has_value() && spec->has_initializer())
      seeds[table] = spec->initializer().seed();
  }
  return seeds;
}

TEST_F(TrainerTest, AnInitSeedDrawsOtherInitialParameters) {
  const std::string log = WriteClickLog("train.tsv", kLines);
  TrainerOptions options = SmallWideDeep(log);
  ASSERT_OK(Train(options));
  const std::map<std::string, uint64_t> default_seeds =
      InitializerSeeds(cluster_);
  // The seeds every release declared: 1 + sparse table, 100 + dense tensor.
  EXPECT_EQ(default_seeds.at("wide_deep.embedding"), 1u);
  EXPECT_EQ(default_seeds.count("wide_deep.wide"), 0u);  // zeros
  int dense_tables = 0;
  for (const std::string& table : cluster_.tables())
    dense_tables += absl::StrContains(table, ".dense.");
  ASSERT_GT(dense_tables, 0);
  for (const auto& [table, seed] : default_seeds) {
    if (!absl::StrContains(table, ".dense.")) continue;
    EXPECT_GE(seed, 100u) << table;
    EXPECT_LT(seed, 100u + dense_tables) << table;
  }
  const auto default_rows = cluster_.Rows("wide_deep.embedding");

  FakeTrainingClient seeded_cluster;
  options.init_seed = 7;
  Trainer seeded(options, 0, &seeded_cluster, backend_.get());
  ASSERT_OK(seeded.Run());
  const std::map<std::string, uint64_t> seeds =
      InitializerSeeds(seeded_cluster);
  ASSERT_EQ(seeds.size(), default_seeds.size());
  std::set<uint64_t> distinct;
  for (const auto& [table, seed] : seeds) {
    EXPECT_NE(seed, default_seeds.at(table)) << table;
    distinct.insert(seed);
  }
  EXPECT_EQ(distinct.size(), seeds.size());
  // The same keys trained from other initial rows.
  const auto rows = seeded_cluster.Rows("wide_deep.embedding");
  ASSERT_EQ(rows.size(), default_rows.size());
  int differing = 0;
  for (const auto& [key, row] : rows) differing += row != default_rows.at(key);
  EXPECT_EQ(differing, static_cast<int>(rows.size()));
}

TEST_F(TrainerTest, AFailedPushEndsTheRunWithItsError) {
  cluster_.set_push_hook([](int64_t clock) {
    return clock == 3 ? absl::DataLossError("disk gone") : absl::OkStatus();
  });
  absl::StatusOr<TrainingSummary> summary =
      Train(SmallWideDeep(WriteClickLog("train.tsv", kLines)));
  EXPECT_THAT(summary.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(PushedClocks(cluster_), Steps(3));
}

TEST_F(TrainerTest, ARequestedStopPushesOnlyWholeStepsAndLeaves) {
  // The stop comes while step 2 is being pushed: it finishes, no later one
  // is pushed.
  cluster_.set_push_hook([this](int64_t clock) {
    if (clock == 2) trainer_->RequestStop();
    return absl::OkStatus();
  });
  absl::StatusOr<TrainingSummary> summary =
      Train(SmallWideDeep(WriteClickLog("train.tsv", kLines)));
  ASSERT_OK(summary);
  EXPECT_TRUE(summary->drained);
  EXPECT_EQ(summary->steps, 3);
  EXPECT_EQ(summary->examples, 3 * kBatch);
  EXPECT_EQ(PushedClocks(cluster_), Steps(3));
  const auto worker = cluster_.worker(0);
  ASSERT_TRUE(worker.has_value());
  EXPECT_TRUE(worker->leaving);
  EXPECT_FALSE(worker->finished);
  EXPECT_EQ(worker->clock, 3);
  EXPECT_FALSE(trainer_->finished());
}

TEST_F(TrainerTest, AStopDropsTheStepsQueuedBehindThePushInFlight) {
  // Asynchronous, without read-my-writes: computing runs ahead of pushing,
  // and steps 3 and 4 are queued while step 2 is pushed.
  TrainerOptions options = SmallWideDeep(WriteClickLog("train.tsv", kLines));
  options.staleness = -1;
  options.read_my_writes = false;
  options.max_pushes_in_flight = 2;
  cluster_.set_push_hook([this](int64_t clock) {
    if (clock == 2) {
      absl::SleepFor(absl::Milliseconds(300));
      trainer_->RequestStop();
    }
    return absl::OkStatus();
  });
  absl::StatusOr<TrainingSummary> summary = Train(options);
  ASSERT_OK(summary);
  EXPECT_TRUE(summary->drained);
  // Steps 3 and 4 were pulled (and computed) before the stop, then dropped.
  EXPECT_GE(cluster_.pulls(), 5);
  EXPECT_EQ(PushedClocks(cluster_), Steps(3));
  EXPECT_EQ(summary->steps, 3);
}

TEST_F(TrainerTest, ARestartedWorkerGoesOnWhereTheDrainedOneStopped) {
  const std::string log = WriteClickLog("train.tsv", kLines);
  TrainerOptions options = SmallWideDeep(log);
  options.assign_incarnation = true;
  options.resume_from_coordinator = true;
  cluster_.set_push_hook([this](int64_t clock) {
    if (clock == 2) trainer_->RequestStop();
    return absl::OkStatus();
  });
  absl::StatusOr<TrainingSummary> drained = Train(options);
  ASSERT_OK(drained);
  ASSERT_TRUE(drained->drained);
  cluster_.set_push_hook(nullptr);
  absl::StatusOr<TrainingSummary> resumed = Train(options);
  ASSERT_OK(resumed);
  EXPECT_FALSE(resumed->drained);
  EXPECT_EQ(resumed->first_step, 3);
  EXPECT_EQ(resumed->examples, kLines - 3 * kBatch);
  // Every step once over both processes.
  EXPECT_EQ(PushedClocks(cluster_), Steps(kLines / kBatch));
  EXPECT_TRUE(cluster_.worker(0)->finished);
}

TEST_F(TrainerTest, ALateJoinerStartsAtTheLiveMinimum) {
  // Worker 1 is at clock 4 when worker 0 starts.
  ClockRequest other;
  other.set_worker(1);
  other.set_clock(4);
  other.set_assign_incarnation(true);
  ASSERT_OK(cluster_.Clock(other, absl::ZeroDuration()));
  TrainerOptions options = SmallWideDeep(WriteClickLog("train.tsv", kLines));
  options.assign_incarnation = true;
  options.staleness = -1;  // worker 1 never moves on
  absl::StatusOr<TrainingSummary> summary = Train(options);
  ASSERT_OK(summary);
  EXPECT_EQ(summary->first_step, 4);
  std::vector<int64_t> expected;
  for (int64_t step = 4; step < 4 + kLines / kBatch; ++step)
    expected.push_back(step);
  EXPECT_EQ(PushedClocks(cluster_), expected);
}

TEST_F(TrainerTest, AClockReportThatFailsFailsTheRun) {
  // Cut off (CANCELLED, as a shard that shuts down answers), whichever
  // thread makes it: the run fails rather than counting its input done.
  std::atomic<bool> failed{false};
  cluster_.set_clock_hook([&](const ClockRequest& request) {
    if (request.clock() == 5 && !request.finished() && !failed.exchange(true))
      return absl::CancelledError("the shard is shutting down");
    return absl::OkStatus();
  });
  TrainerOptions options = SmallWideDeep(WriteClickLog("train.tsv", kLines));
  absl::StatusOr<TrainingSummary> summary = Train(options);
  EXPECT_THAT(summary.status(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_FALSE(cluster_.worker(0)->finished);
  EXPECT_FALSE(trainer_->finished());
}

TEST_F(TrainerTest, AStepAtACutWaitsUntilTheCutEnds) {
  cluster_.set_hold_at(4);
  absl::Notification done;
  std::thread checker([&] {
    WaitUntil([&] { return cluster_.pushes().size() >= 4; }, absl::Seconds(60),
              absl::Milliseconds(5));
    // Held: steps 0..3 are pushed, step 4 is not.
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_EQ(PushedClocks(cluster_), Steps(4));
    cluster_.set_hold_at(0);
  });
  absl::StatusOr<TrainingSummary> summary =
      Train(SmallWideDeep(WriteClickLog("train.tsv", kLines)));
  checker.join();
  ASSERT_OK(summary);
  EXPECT_EQ(PushedClocks(cluster_), Steps(kLines / kBatch));
  // The hold counts from when the pusher reached step 4, which may be after
  // the checker saw four pushes.
  EXPECT_GE(summary->cut_hold_seconds, 0.2);
}

TEST_F(TrainerTest, ALoneWorkerReplayingItsOwnPushesTrainsTheSameBits) {
  const std::string log = WriteClickLog("train.tsv", kLines);
  absl::StatusOr<TrainingSummary> waiting = Train(SmallWideDeep(log));
  ASSERT_OK(waiting);
  EXPECT_EQ(waiting->replayed_steps, 0);
  const auto embeddings = cluster_.Rows("wide_deep.embedding");
  const auto wide = cluster_.Rows("wide_deep.wide");
  const std::vector<std::string> tables = cluster_.tables();
  std::map<std::string, std::map<uint64_t, std::vector<float>>> rows;
  for (const std::string& table : tables) rows[table] = cluster_.Rows(table);
  EXPECT_GT(tables.size(), 2u);

  FakeTrainingClient replaying_cluster;
  TrainerOptions options = SmallWideDeep(log);
  options.staleness = 1;  // pulls overlap the step before; its push replayed
  Trainer replaying(options, 0, &replaying_cluster, backend_.get());
  absl::StatusOr<TrainingSummary> replayed = replaying.Run();
  ASSERT_OK(replayed);
  EXPECT_GT(replayed->replayed_steps, 0);
  EXPECT_EQ(replaying_cluster.Rows("wide_deep.embedding"), embeddings);
  EXPECT_EQ(replaying_cluster.Rows("wide_deep.wide"), wide);
  // The dense tables (the MLP's, under Adam) too.
  ASSERT_EQ(replaying_cluster.tables(), tables);
  for (const std::string& table : tables) {
    EXPECT_EQ(replaying_cluster.Rows(table), rows[table]) << table;
  }
}

// wide_deep's and deepfm's wide weight kept in their embedding rows
// (Table.stored_with): one server table of dim 4 + 1, Adagrad then FTRL,
// whose rows are the two tables' side by side, bit for bit, with and
// without replaying own pushes.
TEST_F(TrainerTest, AWideWeightInTheEmbeddingRowTrainsTheSameBits) {
  const std::string log = WriteClickLog("train.tsv", kLines);
  for (const std::string name : {"wide_deep", "deepfm"}) {
    FakeTrainingClient apart_cluster;
    Trainer apart_trainer(
        SmallWideDeep(log, model::InputLayout::Criteo(), false, name), 0,
        &apart_cluster, backend_.get());
    absl::StatusOr<TrainingSummary> apart = apart_trainer.Run();
    ASSERT_OK(apart);
    const auto embeddings = apart_cluster.Rows(name + ".embedding");
    const auto wide = apart_cluster.Rows(name + ".wide");
    ASSERT_EQ(wide.size(), embeddings.size());
    for (int staleness : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(name, ", staleness ", staleness));
      FakeTrainingClient cluster;
      TrainerOptions options =
          SmallWideDeep(log, model::InputLayout::Criteo(), true, name);
      options.staleness = staleness;
      Trainer trainer(options, 0, &cluster, backend_.get());
      absl::StatusOr<TrainingSummary> together = trainer.Run();
      ASSERT_OK(together);
      EXPECT_EQ(together->replayed_steps > 0, staleness > 0);
      EXPECT_EQ(together->final_train_loss, apart->final_train_loss);
      EXPECT_FALSE(cluster.table_spec(name + ".wide").has_value());
      const std::optional<TableSpec> spec =
          cluster.table_spec(name + ".embedding");
      ASSERT_TRUE(spec.has_value());
      EXPECT_EQ(spec->dim(), 5u);
      ASSERT_EQ(spec->optimizer().later_columns_size(), 1);
      EXPECT_EQ(spec->optimizer().later_columns(0).first_column(), 4u);
      EXPECT_EQ(spec->optimizer().later_columns(0).optimizer().kind(),
                OptimizerSpec::FTRL);
      const auto rows = cluster.Rows(name + ".embedding");
      ASSERT_EQ(rows.size(), embeddings.size());
      int differing = 0;
      for (const auto& [key, row] : rows) {
        std::vector<float> expected = embeddings.at(key);
        expected.push_back(wide.at(key)[0]);
        differing += row != expected;
      }
      EXPECT_EQ(differing, 0);
      // The model's card names the one server table for both.
      EXPECT_EQ(spec->model().kind(), ModelCard::SPEC);
      EXPECT_EQ(std::vector<std::string>(spec->model().sparse_tables().begin(),
                                         spec->model().sparse_tables().end()),
                std::vector<std::string>(2, name + ".embedding"));
    }
  }
}

}  // namespace
}  // namespace ps::worker
