// Resuming from checkpoints and serving exports, against real processes:
//
//   - 40 steps straight and 15 steps, checkpoint, every process killed,
//     restore, the rest give the same model bit for bit (one worker,
//     staleness 0); with two workers restored into three shards, test AUC
//     within 0.002.
//   - An export scores like the worker that trained it, in every input
//     layout, and reads the layout it was trained on; an export of format
//     version 1 (keys alone, not in slot order) scores as its version 2.

#include <utility>

#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
#include "tests/checkpoint_cluster.h"

namespace ps::testing {
namespace {

// Writes the export in `from` (format version 2) into `to` as format
// version 1 wrote it: each part's rows keyed by the key's 8 bytes in the
// machine's order, sorted by them.
void WriteAsFormatVersion1(const std::string& from, const std::string& to) {
  absl::StatusOr<ExportManifest> manifest = ReadExportManifest(from);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (const ExportManifest::Table& table : manifest->tables()) {
    for (const std::string& part : table.parts()) {
      if (part.empty()) continue;
      rocksdb::SstFileReader reader{rocksdb::Options()};
      ASSERT_TRUE(reader.Open(from + "/" + part).ok()) << part;
      std::vector<std::pair<std::string, std::string>> rows;
      std::unique_ptr<rocksdb::Iterator> it(
          reader.NewIterator(rocksdb::ReadOptions()));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        ASSERT_EQ(it->key().size(), SlotOrderedKey::kBytes);
        const uint64_t key = SlotOrderedKey::Decode(it->key().data());
        rows.emplace_back(
            std::string(reinterpret_cast<const char*>(&key), sizeof(key)),
            it->value().ToString());
      }
      std::sort(rows.begin(), rows.end());
      const std::string path = to + "/" + part;
      std::filesystem::create_directories(
          std::filesystem::path(path).parent_path());
      rocksdb::SstFileWriter writer{rocksdb::EnvOptions(), rocksdb::Options()};
      ASSERT_TRUE(writer.Open(path).ok()) << path;
      for (const auto& [key, value] : rows)
        ASSERT_TRUE(writer.Put(key, value).ok());
      ASSERT_TRUE(writer.Finish().ok());
    }
  }
  manifest->set_format_version(1);
  ASSERT_TRUE(WriteManifest(to, *manifest).ok());
}

// Trains on `data` with `workers` workers against `shards`; returns each
// worker's metrics.
std::vector<std::string> Train(TestCluster& shards, int workers,
                               const std::string& data, const std::string& test,
                               const std::string& tag, const std::string& dir,
                               const std::vector<std::string>& extra) {
  std::vector<std::unique_ptr<ChildProcess>> processes;
  for (int w = 0; w < workers; ++w) {
    std::vector<std::string> flags = {
        "--train=" + data,
        "--test=" + test,
        "--staleness=0",
        "--batch_size=1000",
        "--hidden=32,16",
        "--embedding_dim=4",
        absl::StrCat("--metrics_out=", dir, "/", tag, w, ".json")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto process =
        ChildProcess::Start(shards.WorkerArgs(w, workers, flags), false,
                            absl::StrCat(dir, "/", tag, w, ".log"));
    EXPECT_TRUE(process.ok());
    processes.push_back(std::move(process).value());
  }
  std::vector<std::string> metrics;
  for (int w = 0; w < workers; ++w) {
    EXPECT_EQ(processes[w]->Wait(absl::Minutes(5)), 0)
        << ReadFile(absl::StrCat(dir, "/", tag, w, ".log"));
    metrics.push_back(ReadFile(absl::StrCat(dir, "/", tag, w, ".json")));
  }
  return metrics;
}

TEST_F(CheckpointTest, ResumingGivesTheModelTrainingStraightThroughGives) {
  const std::string data = Generate("train.tsv", 20000);
  const std::string test = Generate("test.tsv", 10000, /*seed=*/2);
  // One worker, two epochs of 20 steps straight.
  double straight_auc = 0, straight_logloss = 0;
  {
    auto shards = StartShards(dir_, "straight", 1);
    ASSERT_NE(shards, nullptr);
    const auto metrics =
        Train(*shards, 1, data, test, "straight", dir_, {"--epochs=2"});
    straight_auc = Metric(metrics[0], "test_auc");
    straight_logloss = Metric(metrics[0], "test_logloss");
  }
  // The same with a checkpoint every 15 steps; then every process is gone
  // and training resumes, in the second epoch, from the second checkpoint
  // on a restored shard. A request that comes while a checkpoint is still
  // being taken waits for it (ops/checkpoint_taker.h), but it is dropped
  // if that checkpoint's cut already covers its clock, and one still
  // waiting when the run ends is not taken. So the first checkpoint's cut
  // must come before step 30 asks for the second: steps slowed to 100 ms
  // leave its setup about 1.5 s (15 steps); under the suite's load one
  // took over 0.4 s.
  const std::string checkpoints = dir_ + "/checkpoints";
  {
    auto shards = StartShards(dir_, "first", 1);
    ASSERT_NE(shards, nullptr);
    const auto metrics =
        Train(*shards, 1, data, test, "first", dir_,
              {"--epochs=2", "--checkpoint_every_steps=15",
               "--checkpoint_dir=" + checkpoints, "--checkpoints_to_keep=0",
               "--slow_step_ms=100"});
    EXPECT_EQ(Metric(metrics[0], "checkpoints"), 2) << metrics[0];
    // Holding at the cuts changes nothing.
    EXPECT_DOUBLE_EQ(Metric(metrics[0], "test_auc"), straight_auc);
    EXPECT_EQ(shards->shard(0).SignalAndWait(SIGKILL), 128 + SIGKILL);
  }
  // Named after their cuts, which are past the clocks they were asked at.
  const std::vector<std::string> taken = FinishedCheckpoints(checkpoints);
  ASSERT_EQ(taken.size(), 2u);
  const std::string second = checkpoints + "/" + taken[1];
  auto manifest = ReadManifest(second);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->cut(), 20) << "not in the second epoch";
  EXPECT_EQ(taken[1], absl::StrFormat("ckpt-%010d", manifest->cut()));
  // ps_admin checkpoints lists both (its table goes to stdout).
  const AdminRun listed =
      RunPsAdmin(AdminCluster{}, {"--dir=" + checkpoints, "checkpoints"},
                 dir_ + "/list.log");
  ASSERT_EQ(listed.exit_code, 0) << listed.log;
  const std::string& list = listed.out;
  EXPECT_NE(list.find(taken[0]), std::string::npos) << list;
  EXPECT_NE(list.find(taken[1]), std::string::npos) << list;
  double resumed_auc = 0, resumed_logloss = 0;
  {
    auto shards = StartShards(dir_, "resumed", 1, {"--restore_from=" + second});
    ASSERT_NE(shards, nullptr);
    const auto metrics = Train(*shards, 1, data, test, "resumed", dir_,
                               {"--epochs=2", "--resume_from=" + second});
    resumed_auc = Metric(metrics[0], "test_auc");
    resumed_logloss = Metric(metrics[0], "test_logloss");
    // The worker goes on from its own clock in the checkpoint: the cut's,
    // or its last one when it finished before a late cut.
    ASSERT_EQ(manifest->workers_size(), 1);
    EXPECT_LE(manifest->workers(0).clock(), manifest->cut());
    EXPECT_EQ(Metric(metrics[0], "first_step"), manifest->workers(0).clock());
    EXPECT_EQ(Metric(metrics[0], "examples"),
              40000 - manifest->workers(0).examples());
  }
  std::printf(
      "straight: AUC %.6f logloss %.6f; resumed from clock %lld: AUC "
      "%.6f logloss %.6f\n",
      straight_auc, straight_logloss, static_cast<long long>(manifest->cut()),
      resumed_auc, resumed_logloss);
  EXPECT_DOUBLE_EQ(resumed_auc, straight_auc);
  EXPECT_DOUBLE_EQ(resumed_logloss, straight_logloss);
}

TEST_F(CheckpointTest, TwoWorkersResumedOnThreeRestoredShards) {
  const std::string data = Generate("train.tsv", 40000);
  const std::string test = Generate("test.tsv", 10000, /*seed=*/2);
  double straight_auc = 0;
  {
    auto shards = StartShards(dir_, "straight", 2);
    ASSERT_NE(shards, nullptr);
    straight_auc = Metric(
        Train(*shards, 2, data, test, "straight", dir_, {})[0], "test_auc");
  }
  const std::string checkpoints = dir_ + "/checkpoints";
  {
    auto shards = StartShards(dir_, "first", 2);
    ASSERT_NE(shards, nullptr);
    Train(*shards, 2, data, test, "first", dir_,
          {"--checkpoint_every_steps=8", "--checkpoint_dir=" + checkpoints,
           "--checkpoints_to_keep=1"});
  }
  // Each worker has 20 steps of 1000 lines: checkpoints were asked for at
  // 8 and 16, and only the newest is kept.
  const std::vector<std::string> kept = FinishedCheckpoints(checkpoints);
  ASSERT_EQ(kept.size(), 1u) << "--checkpoints_to_keep=1";
  const std::string last = checkpoints + "/" + kept[0];
  auto manifest = ReadManifest(last);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->cut(), 16);
  auto shards = StartShards(dir_, "resumed", 3, {"--restore_from=" + last});
  ASSERT_NE(shards, nullptr);
  const std::vector<std::string> resumed =
      Train(*shards, 2, data, test, "resumed", dir_, {"--resume_from=" + last});
  // Each worker goes on from its own position at the cut: together they
  // train on the lines the checkpoint's workers had not reached.
  ASSERT_EQ(manifest->workers_size(), 2);
  int64_t trained_before_the_cut = 0;
  for (const auto& worker : manifest->workers()) {
    trained_before_the_cut += worker.examples();
  }
  EXPECT_EQ(Metric(resumed[0], "examples") + Metric(resumed[1], "examples"),
            40000 - trained_before_the_cut);
  // Each goes on from its clock at the cut: the cut's, or the last one of
  // a worker that had finished its share before the cut was placed (on a
  // loaded machine a cut asked for at 16 may come that late).
  for (const auto& worker : manifest->workers()) {
    EXPECT_LE(worker.clock(), manifest->cut());
    EXPECT_EQ(Metric(resumed[worker.worker()], "first_step"), worker.clock())
        << "worker " << worker.worker();
  }
  const double resumed_auc = Metric(resumed[0], "test_auc");
  std::printf("two workers: straight AUC %.4f, resumed on 3 shards %.4f\n",
              straight_auc, resumed_auc);
  // Two workers' pushes reach the shards in either order, and Adagrad, FTRL
  // and Adam are not indifferent to it: runs of this test spread over 0.006
  // AUC (0.7251-0.7311). Without the restored rows the resumed model
  // learns from the last steps only and ends near 0.58.
  EXPECT_NEAR(resumed_auc, straight_auc, 0.02);
}

// The number after `label` in `text` ("AUC 0.7123"); NaN if absent.
double After(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + label.size(), nullptr);
}

TEST_F(CheckpointTest, AnExportScoresLikeTheWorkerThatTrainedIt) {
  const std::string data = Generate("train.tsv", 30000);
  const std::string test = Generate("test.tsv", 8000, /*seed=*/2);
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_NE(shards, nullptr);
  const std::string metrics =
      Train(*shards, 1, data, test, "trained", dir_, {"--model=deepfm"})[0];
  const double worker_auc = Metric(metrics, "test_auc");
  const double worker_logloss = Metric(metrics, "test_logloss");
  for (const std::string format : {"fp32", "fp16"}) {
    const std::string exported = dir_ + "/export_" + format;
    ASSERT_EQ(
        Admin(shards->addresses(),
              {"--dir=" + exported, "--export_format=" + format, "export"},
              dir_ + "/export.log"),
        0)
        << ReadFile(dir_ + "/export.log");
    auto manifest = ReadExportManifest(exported);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    EXPECT_EQ(manifest->model().kind(), ModelCard::DEEPFM);
    EXPECT_GT(manifest->tables(0).rows(), 1000u);
    const std::string scores = dir_ + "/scores_" + format + ".txt";
    const std::string out = dir_ + "/predict_" + format + ".txt";
    ASSERT_EQ(RunToCompletion({"/bin/sh", "-c",
                               BinaryPath("worker/predict/ps_predict") +
                                   " --export=" + exported + " --input=" +
                                   test + " --out=" + scores + " > " + out},
                              dir_ + "/predict.log"),
              0)
        << ReadFile(dir_ + "/predict.log");
    const std::string printed = ReadFile(out);
    std::printf("%s: worker AUC %.6f logloss %.6f; ps_predict %s",
                format.c_str(), worker_auc, worker_logloss, printed.c_str());
    int lines = 0;
    for (char c : ReadFile(scores)) lines += c == '\n' ? 1 : 0;
    EXPECT_EQ(lines, 8000);
    if (format == "fp32") {
      EXPECT_NEAR(After(printed, "AUC "), worker_auc, 1e-4);
      EXPECT_NEAR(After(printed, "logloss "), worker_logloss, 1e-4);
    } else {
      EXPECT_NEAR(After(printed, "AUC "), worker_auc, 0.002);
    }
  }
  // Lines without labels are scored the same, one per line, in order.
  const std::string unlabeled = dir_ + "/unlabeled.tsv";
  {
    std::ifstream in(test);
    std::ofstream out(unlabeled);
    for (std::string line; std::getline(in, line);) {
      out << line.substr(line.find('\t') + 1) << "\n";
    }
  }
  const std::string out = dir_ + "/predict_unlabeled.txt";
  ASSERT_EQ(RunToCompletion(
                {"/bin/sh", "-c",
                 BinaryPath("worker/predict/ps_predict") + " --export=" + dir_ +
                     "/export_fp32 --input=" + unlabeled + " --out=" + dir_ +
                     "/scores_unlabeled.txt > " + out},
                dir_ + "/predict.log"),
            0)
      << ReadFile(dir_ + "/predict.log");
  EXPECT_NE(ReadFile(out).find("no labels"), std::string::npos)
      << ReadFile(out);
  EXPECT_EQ(ReadFile(dir_ + "/scores_unlabeled.txt"),
            ReadFile(dir_ + "/scores_fp32.txt"));
  // A run that fails (a malformed line, and --max_bad_lines=0) leaves an
  // earlier --out as it was, and nothing half-written beside it.
  const std::string broken = dir_ + "/broken.tsv";
  {
    std::ifstream in(test);
    std::ofstream copy(broken);
    int n = 0;
    for (std::string line; std::getline(in, line) && n < 5000; ++n)
      copy << line << "\n";
    copy << "not\ta\tclick\tlog\tline\n";
  }
  std::ofstream(dir_ + "/kept.txt") << "an earlier run's\n";
  EXPECT_NE(
      RunToCompletion({BinaryPath("worker/predict/ps_predict"),
                       "--export=" + dir_ + "/export_fp32", "--input=" + broken,
                       "--batch_size=512", "--out=" + dir_ + "/kept.txt"},
                      dir_ + "/broken.log"),
      0);
  EXPECT_NE(ReadFile(dir_ + "/broken.log").find("broken.tsv:5001"),
            std::string::npos)
      << ReadFile(dir_ + "/broken.log");
  EXPECT_EQ(ReadFile(dir_ + "/kept.txt"), "an earlier run's\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/kept.txt.partial"));
  // An export of format version 1 is read as it was written.
  WriteAsFormatVersion1(dir_ + "/export_fp32", dir_ + "/export_v1");
  ASSERT_EQ(
      RunToCompletion({"/bin/sh", "-c",
                       BinaryPath("worker/predict/ps_predict") +
                           " --model=" + dir_ + "/export_v1 --input=" + test +
                           " --out=" + dir_ + "/scores_v1.txt > " + out},
                      dir_ + "/predict.log"),
      0)
      << ReadFile(dir_ + "/predict.log");
  EXPECT_EQ(ReadFile(dir_ + "/scores_v1.txt"),
            ReadFile(dir_ + "/scores_fp32.txt"));
  // An export goes into a new (or empty) directory only, and a checkpoint
  // names every shard in order: both refused before any worker is held.
  EXPECT_NE(
      Admin(shards->addresses(), {"--dir=" + dir_ + "/export_fp32", "export"},
            dir_ + "/again.log"),
      0);
  EXPECT_NE(ReadFile(dir_ + "/again.log").find("already"), std::string::npos)
      << ReadFile(dir_ + "/again.log");
  std::filesystem::create_directories(dir_ + "/busy");
  std::ofstream(dir_ + "/busy/keep.txt") << "not ours\n";
  EXPECT_NE(Admin(shards->addresses(), {"--dir=" + dir_ + "/busy", "export"},
                  dir_ + "/busy.log"),
            0);
  EXPECT_NE(ReadFile(dir_ + "/busy.log").find("not empty"), std::string::npos)
      << ReadFile(dir_ + "/busy.log");
  EXPECT_EQ(ReadFile(dir_ + "/busy/keep.txt"), "not ours\n");
  EXPECT_NE(Admin({shards->shard(1).address(), shards->shard(0).address()},
                  {"--dir=" + dir_ + "/reversed", "checkpoint"},
                  dir_ + "/reversed.log"),
            0);
  EXPECT_NE(ReadFile(dir_ + "/reversed.log").find("in shard order"),
            std::string::npos)
      << ReadFile(dir_ + "/reversed.log");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/reversed"));
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_F(CheckpointTest, EveryLayoutTrainsExportsAndPredicts) {
  // Each layout the --columns grammar accepts, through ps_worker, ps_admin
  // export and ps_predict: the export scores the test lines as the worker
  // did, and a layout with an id column writes "id<TAB>probability".
  struct Case {
    std::string name;
    std::string columns;
    std::string model;
    std::vector<std::string> generator_flags;
    // Test AUC the worker must pass, where 6000 lines carry enough signal
    // for a check 3 standard deviations clear of chance (0: not checked).
    double min_auc;
    std::vector<std::string> worker_flags;
  };
  // Dense features alone learn slowly at the default dense learning rate
  // (Adam, 0.001): 12 steps of it stay near chance.
  const std::vector<std::string> dense_only = {"--dense_learning_rate=0.05",
                                               "--epochs=4"};
  const std::vector<Case> cases = {
      {"no_dense", "label,cat*26", "wide_deep", {}, 0.55, {}},
      {"no_dense_lr", "label,cat*26", "lr", {}, 0.55, {}},
      {"no_dense_deepfm", "label,cat*26", "deepfm", {}, 0.55, {}},
      {"no_cat", "label,dense*13", "wide_deep", {}, 0.55, dense_only},
      {"no_cat_lr", "label,dense*13", "lr", {}, 0.55, dense_only},
      {"no_cat_deepfm", "label,dense*13", "deepfm", {}, 0.55, dense_only},
      {"only_multi", "label,multi*2", "wide_deep", {"--multi_fields=2"}, 0, {}},
      {"one_cat", "label,cat", "wide_deep", {}, 0, {}},
      {"label_in_the_middle_with_an_id",
       "id,cat*13,label,dense*13,cat*13",
       "wide_deep",
       {},
       0.55,
       {}},
      {"skip_first_and_last",
       "skip,label,dense*13,cat*26,skip",
       "deepfm",
       {},
       0.55,
       {}},
  };
  constexpr int kTrain = 6000, kTest = 2000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": --columns=" + c.columns + " --model=" + c.model);
    std::vector<std::string> generate = c.generator_flags;
    generate.push_back("--columns=" + c.columns);
    const std::string train =
        Generate(c.name + "_train.tsv", kTrain, 1, generate);
    const std::string test = Generate(c.name + "_test.tsv", kTest, 2, generate);
    auto shards = StartShards(dir_, c.name + "_shard", 1);
    ASSERT_NE(shards, nullptr);
    std::vector<std::string> flags = {"--columns=" + c.columns,
                                      "--model=" + c.model, "--batch_size=500"};
    flags.insert(flags.end(), c.worker_flags.begin(), c.worker_flags.end());
    const std::string metrics =
        Train(*shards, 1, train, test, c.name, dir_, flags)[0];
    const int epochs = c.worker_flags.empty() ? 1 : 4;
    EXPECT_EQ(Metric(metrics, "examples"), kTrain * epochs) << metrics;
    EXPECT_EQ(Metric(metrics, "bad_lines"), 0) << metrics;
    EXPECT_EQ(Metric(metrics, "test_examples"), kTest) << metrics;
    const double auc = Metric(metrics, "test_auc");
    EXPECT_GT(auc, c.min_auc) << "learned nothing: " << metrics;
    EXPECT_TRUE(auc > 0.0 && auc < 1.0) << metrics;
    const std::string exported = dir_ + "/" + c.name + "_export";
    ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + exported, "export"},
                    dir_ + "/" + c.name + "_export.log"),
              0)
        << ReadFile(dir_ + "/" + c.name + "_export.log");
    const std::string scores = dir_ + "/" + c.name + "_scores.txt";
    const std::string printed = dir_ + "/" + c.name + "_predict.txt";
    ASSERT_EQ(RunToCompletion({"/bin/sh", "-c",
                               BinaryPath("worker/predict/ps_predict") +
                                   " --export=" + exported + " --input=" +
                                   test + " --out=" + scores + " > " + printed},
                              dir_ + "/" + c.name + "_predict.log"),
              0)
        << ReadFile(dir_ + "/" + c.name + "_predict.log");
    EXPECT_NEAR(After(ReadFile(printed), "AUC "), auc, 1e-4)
        << ReadFile(printed);
    const std::vector<std::string> lines = Lines(test);
    const std::vector<std::string> scored = Lines(scores);
    ASSERT_EQ(scored.size(), lines.size());
    const bool has_id = c.columns.rfind("id,", 0) == 0;
    for (size_t i = 0; i < scored.size(); ++i) {
      std::string probability = scored[i];
      if (has_id) {
        // The test line's own first column, then its probability.
        const std::string id = lines[i].substr(0, lines[i].find('\t'));
        ASSERT_EQ(scored[i].substr(0, id.size() + 1), id + "\t") << i;
        probability = scored[i].substr(id.size() + 1);
      }
      ASSERT_EQ(probability.find('\t'), std::string::npos) << scored[i];
      const double p = std::strtod(probability.c_str(), nullptr);
      ASSERT_TRUE(p > 0.0 && p < 1.0) << scored[i];
    }
  }
}

TEST_F(CheckpointTest, AnExportReadsTheLayoutItWasTrainedOn) {
  // A CSV with a header, an id, a multi field and a cross: ps_predict takes
  // the layout from the export, with no layout flags.
  const std::vector<std::string> layout = {
      "--format=csv", "--header", "--columns=skip,label,cat*26,dense*13,multi",
      "--multi_pooling=mean"};
  std::vector<std::string> gen = layout;
  gen.push_back("--multi_fields=1");
  const std::string data = Generate("train.csv", 20000, 1, gen);
  const std::string test = Generate("test.csv", 5000, 2, gen);
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_NE(shards, nullptr);
  std::vector<std::string> flags = layout;
  flags.push_back("--crosses=0:26");
  const std::string metrics =
      Train(*shards, 1, data, test, "trained", dir_, flags)[0];
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + dir_ + "/export", "export"},
                  dir_ + "/export.log"),
            0)
      << ReadFile(dir_ + "/export.log");
  auto manifest = ReadExportManifest(dir_ + "/export");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->model().input_layout(),
            "format=csv header=1 columns=skip,label,cat*26,dense*13,multi "
            "multi_separator=| multi_pooling=mean crosses=0:26");
  EXPECT_EQ(manifest->model().fields(), 27u);
  const std::string predict = BinaryPath("worker/predict/ps_predict") +
                              " --export=" + dir_ + "/export --input=" + test;
  ASSERT_EQ(RunToCompletion({"/bin/sh", "-c", predict + " > " + dir_ + "/out"},
                            dir_ + "/predict.log"),
            0)
      << ReadFile(dir_ + "/predict.log");
  const std::string printed = ReadFile(dir_ + "/out");
  EXPECT_NE(printed.find("scored 5000 lines"), std::string::npos) << printed;
  EXPECT_NEAR(After(printed, "AUC "), Metric(metrics, "test_auc"), 1e-4)
      << printed;
  // The same features laid out otherwise read with flags (here: without
  // the id column, as TSV); other features are refused.
  {
    std::ifstream in(test);
    std::ofstream out(dir_ + "/reordered.tsv");
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::string fields = line.substr(line.find(',') + 1);
      std::replace(fields.begin(), fields.end(), ',', '\t');
      out << fields << "\n";
    }
  }
  // Flags left out keep the export's values (pooling, crosses); one given
  // at its default value (--header=false) still counts.
  const std::string same_features =
      " --format=tsv --header=false --columns=label,cat*26,dense*13,multi";
  ASSERT_EQ(RunToCompletion(
                {"/bin/sh", "-c",
                 BinaryPath("worker/predict/ps_predict") + " --export=" + dir_ +
                     "/export --input=" + dir_ + "/reordered.tsv" +
                     same_features + " > " + dir_ + "/out_tsv"},
                dir_ + "/predict_tsv.log"),
            0)
      << ReadFile(dir_ + "/predict_tsv.log");
  EXPECT_EQ(After(ReadFile(dir_ + "/out_tsv"), "AUC "), After(printed, "AUC "));
  for (const std::string other :
       {" --columns=skip,label,cat*26,dense*13,multi --multi_pooling=sum",
        " --columns=skip,label,cat*26,dense*13,cat --multi_pooling=mean "
        "--crosses=0:26",
        " --columns=skip,label,cat*26,dense*12,multi --multi_pooling=mean "
        "--crosses=0:26"}) {
    EXPECT_EQ(RunToCompletion({"/bin/sh", "-c",
                               predict + " --header --format=csv" + other +
                                   " > " + dir_ + "/other"},
                              dir_ + "/other.log"),
              64)  // a layout that does not fit the model: bad flags
        << other;
    EXPECT_NE(ReadFile(dir_ + "/other.log").find("must match"),
              std::string::npos)
        << ReadFile(dir_ + "/other.log");
  }
}

}  // namespace
}  // namespace ps::testing
