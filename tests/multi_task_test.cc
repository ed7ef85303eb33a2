// Tasks and sequences end to end, against real processes: a click log of
// two labels (clicklog_gen --tasks=2) trains a spec of two tasks on a shard;
// each task is evaluated on its own; the export scores one column per task
// in ps_predict and one probability per task in ps_serve, read by C++ and by
// Python's grpcio; a built-in, which has one output, refuses the layout; din
// trains on lines with recent items, and its export scores alike in
// ps_predict and ps_serve.

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "nlohmann/json.hpp"
#include "proto/serving.grpc.pb.h"
#include "tests/serve_process.h"
#include "tests/training_cluster.h"

namespace ps::testing {
namespace {

constexpr char kColumns[] =
    "--columns=label:click,label:convert,dense*13,cat*26";

// Two towers over a shared layer, each task with a wide part of its own; the
// conversion's loss weighs twice.
std::string TwoTaskSpec() {
  std::string spec =
      "name: \"two_tasks\"\n"
      "table { name: \"emb\" dim: 8 init_scale: 0.05 optimizer { kind: "
      "ADAGRAD learning_rate: 0.05 initial_accumulator: 0.1 } }\n"
      "table { name: \"wide_ctr\" dim: 1 optimizer { kind: FTRL "
      "learning_rate: 0.05 } }\n"
      "table { name: \"wide_cvr\" dim: 1 optimizer { kind: FTRL "
      "learning_rate: 0.05 } }\n";
  std::string inputs;
  for (int f = 0; f < 26; ++f) {
    absl::StrAppend(&spec, "field { name: \"c", f, "\" column: ", 15 + f,
                    " }\n");
    absl::StrAppend(&inputs, " inputs: \"c", f, "\"");
  }
  absl::StrAppend(&spec, "dense { name: \"d\"");
  for (int c = 2; c < 15; ++c) absl::StrAppend(&spec, " columns: ", c);
  absl::StrAppend(
      &spec, " }\n", "layer { name: \"e\"", inputs,
      " embedding { table: \"emb\" } }\n",
      "layer { name: \"x\" inputs: \"e\" inputs: \"d\" concat {} }\n"
      "layer { name: \"shared\" inputs: \"x\" mlp { units: 32 "
      "last_activation: RELU } }\n"
      "layer { name: \"ctr_tower\" inputs: \"shared\" mlp { units: 16 units: "
      "1 } }\n"
      "layer { name: \"cvr_tower\" inputs: \"shared\" mlp { units: 16 units: "
      "1 } }\n"
      "layer { name: \"ctr_wide\"",
      inputs, " wide { table: \"wide_ctr\" } }\n", "layer { name: \"cvr_wide\"",
      inputs, " wide { table: \"wide_cvr\" } }\n",
      "layer { name: \"ctr\" inputs: \"ctr_tower\" inputs: \"ctr_wide\" "
      "add {} }\n"
      "layer { name: \"cvr\" inputs: \"cvr_tower\" inputs: \"cvr_wide\" "
      "add {} }\n"
      "task { name: \"ctr\" label: \"click\" output: \"ctr\" }\n"
      "task { name: \"cvr\" label: \"convert\" output: \"cvr\" "
      "loss_weight: 2 }\n");
  return spec;
}

// ps_predict's --out: the header, then one row of probabilities per line.
struct Scores {
  std::vector<std::string> header;
  std::vector<std::vector<float>> rows;
};

Scores ReadScores(const std::string& path) {
  Scores scores;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line)) scores.header = absl::StrSplit(line, '\t');
  while (std::getline(in, line)) {
    std::vector<float> row;
    for (absl::string_view cell : absl::StrSplit(line, '\t')) {
      float value = -1;
      EXPECT_TRUE(absl::SimpleAtof(cell, &value)) << line;
      row.push_back(value);
    }
    scores.rows.push_back(std::move(row));
  }
  return scores;
}

class MultiTaskTest : public TrainingTest {
 protected:
  void SetUp() override {
    TrainingTest::SetUp();
    const std::string gen = BinaryPath("worker/datagen/clicklog_gen");
    for (const auto& [name, lines, seed] : {std::make_tuple("train", 30000, 1),
                                            std::make_tuple("test", 4000, 2)}) {
      ASSERT_EQ(
          RunToCompletion(
              {gen, absl::StrCat("--out=", dir_, "/", name, ".tsv"),
               absl::StrCat("--lines=", lines), "--tasks=2",
               absl::StrCat("--sample_seed=", seed),
               absl::StrCat("--summary_out=", dir_, "/", name, "_truth.json")},
              dir_ + "/gen.log"),
          0)
          << ReadFile(dir_ + "/gen.log");
    }
    // Conversions unknown (empty) on every fifth training line and every
    // fourth test line: masked out of the cvr task's loss and evaluation.
    for (const auto& [name, every] :
         {std::make_pair("train", 5), std::make_pair("test", 4)}) {
      ASSERT_EQ(
          RunToCompletion(
              {"/bin/sh", "-c",
               absl::StrCat("awk -F'\\t' 'BEGIN { OFS = \"\\t\" } NR % ", every,
                            " == 0 { $2 = \"\" } { print }' ", dir_, "/", name,
                            ".tsv > ", dir_, "/", name, ".masked && mv ", dir_,
                            "/", name, ".masked ", dir_, "/", name, ".tsv")},
              dir_ + "/mask.log"),
          0)
          << ReadFile(dir_ + "/mask.log");
    }
    std::ofstream(dir_ + "/two_tasks.spec") << TwoTaskSpec();
  }

  // The worker's flags after WorkerArgs()'s: this test's data and spec.
  std::vector<std::string> TwoTaskFlags() const {
    return {"--train=" + dir_ + "/train.tsv",
            "--test=" + dir_ + "/test.tsv",
            kColumns,
            "--model_spec=" + dir_ + "/two_tasks.spec",
            "--eval_every=15000",
            "--eval_lines=2000",
            "--interval_metrics_out=" + dir_ + "/intervals.jsonl"};
  }
};

TEST_F(MultiTaskTest, TrainsEvaluatesPredictsAndServesEachTask) {
  const nlohmann::json truth =
      nlohmann::json::parse(ReadFile(dir_ + "/test_truth.json"));
  ASSERT_EQ(truth["columns"], "label:click,label:convert,dense*13,cat*26");
  ASSERT_EQ(truth["tasks"].size(), 2u);
  const double truth_cvr = truth["tasks"][1]["truth_auc"];
  ASSERT_GT(truth_cvr, 0.6);

  ASSERT_EQ(StartShards(1).size(), 1u);
  auto worker = ChildProcess::Start(WorkerArgs(0, 1, TwoTaskFlags()), false,
                                    dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const WorkerRun run = Collect(0, (*worker)->Wait(absl::Minutes(5)));
  ASSERT_EQ(run.exit_code, 0) << run.log;

  // Each task evaluated on the examples it has labels for; the first task's
  // figures where a model of one task has its own.
  const nlohmann::json metrics = nlohmann::json::parse(run.metrics);
  ASSERT_EQ(metrics["tasks"].size(), 2u) << run.metrics;
  EXPECT_EQ(metrics["tasks"][0]["task"], "ctr");
  EXPECT_EQ(metrics["tasks"][1]["task"], "cvr");
  EXPECT_EQ(metrics["tasks"][0]["test_auc"], metrics["test_auc"]);
  EXPECT_EQ(metrics["tasks"][0]["test_examples"], 4000);
  EXPECT_EQ(metrics["tasks"][1]["test_examples"], 3000);
  const double ctr_auc = metrics["tasks"][0]["test_auc"];
  const double cvr_auc = metrics["tasks"][1]["test_auc"];
  std::cout << "test AUC ctr " << ctr_auc << " (truth " << truth["truth_auc"]
            << "), cvr " << cvr_auc << " (truth " << truth_cvr << ")\n";
  EXPECT_GT(ctr_auc, 0.65) << run.metrics;
  EXPECT_LT(ctr_auc, static_cast<double>(truth["truth_auc"]) + 0.01);
  EXPECT_GT(cvr_auc, 0.58) << run.metrics;
  EXPECT_LT(cvr_auc, truth_cvr + 0.01);
  EXPECT_NE(metrics["tasks"][0]["test_logloss"],
            metrics["tasks"][1]["test_logloss"]);
  // The progress line and the interval metrics name the tasks.
  EXPECT_NE(run.log.find("recent AUC ctr "), std::string::npos) << run.log;
  EXPECT_NE(run.log.find("task cvr: test AUC"), std::string::npos) << run.log;
  const std::string intervals = ReadFile(dir_ + "/intervals.jsonl");
  EXPECT_NE(intervals.find("\"test_logloss\""), std::string::npos) << intervals;

  // Export and score with ps_predict: one column per task under a header.
  const AdminRun exported =
      cluster_->Admin({"--dir=" + dir_ + "/model/m1", "export"});
  ASSERT_EQ(exported.exit_code, 0) << exported.log;
  const std::string scores_path = dir_ + "/scores.tsv";
  const std::string predict_log = dir_ + "/predict.log";
  ASSERT_EQ(
      RunToCompletion(
          {"/bin/sh", "-c",
           absl::StrCat(BinaryPath("worker/predict/ps_predict"),
                        " --export=", dir_, "/model/m1 --input=", dir_,
                        "/test.tsv --out=", scores_path, " > ", predict_log)},
          dir_ + "/predict.stderr"),
      0)
      << ReadFile(dir_ + "/predict.stderr");
  const Scores scores = ReadScores(scores_path);
  EXPECT_EQ(scores.header, (std::vector<std::string>{"ctr", "cvr"}));
  ASSERT_EQ(scores.rows.size(), 4000u);
  for (const auto& row : scores.rows) {
    ASSERT_EQ(row.size(), 2u);
    ASSERT_GT(row[0], 0.0f);
    ASSERT_LT(row[1], 1.0f);
  }
  // The report: the first task's AUC first, then the other's.
  const std::string report = ReadFile(predict_log);
  EXPECT_NE(report.find("(task ctr); task cvr: AUC 0."), std::string::npos)
      << report;
  EXPECT_NE(report.find("over the 3000 labeled lines"), std::string::npos)
      << report;

  // ps_serve answers each task's probabilities, named, ps_predict's.
  absl::StatusOr<ServeProcess> serve =
      StartServe(dir_ + "/model", dir_ + "/serve.log");
  ASSERT_TRUE(serve.ok()) << serve.status();
  const std::string& address = serve->address;
  std::vector<std::string> lines;
  {
    std::ifstream in(dir_ + "/test.tsv");
    for (std::string line; lines.size() < 300 && std::getline(in, line);)
      lines.push_back(line);
  }
  auto stub = Serving::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  PredictRequest request;
  for (const std::string& line : lines) request.add_lines(line);
  PredictResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->Predict(&context, request, &response).ok());
  ASSERT_EQ(response.tasks_size(), 2);
  EXPECT_EQ(response.tasks(1).task(), "cvr");
  ASSERT_EQ(response.probabilities_size(), 300);
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(response.tasks(t).probabilities_size(), 300);
    for (int i = 0; i < 300; ++i) {
      ASSERT_NEAR(response.tasks(t).probabilities(i), scores.rows[i][t], 1e-6)
          << "task " << t << " line " << i;
    }
  }
  for (int i = 0; i < 300; ++i)
    ASSERT_EQ(response.probabilities(i), response.tasks(0).probabilities(i));

  // The same through Python's grpcio.
  const std::string python_out = dir_ + "/python_client.txt";
  ASSERT_EQ(RunToCompletion(
                {"/bin/sh", "-c",
                 absl::StrCat("/usr/bin/python3 ",
                              BinaryPath("tests/serve_client.py"), " ", address,
                              " ", BinaryPath("proto"), " ", dir_,
                              "/test.tsv 300 tasks > ", python_out)},
                dir_ + "/python_client.log"),
            0)
      << ReadFile(dir_ + "/python_client.log");
  const Scores python = ReadScores(python_out);
  EXPECT_EQ(python.header, (std::vector<std::string>{"ctr", "cvr"}));
  ASSERT_EQ(python.rows.size(), 300u) << ReadFile(python_out);
  for (int i = 0; i < 300; ++i) {
    for (int t = 0; t < 2; ++t)
      ASSERT_NEAR(python.rows[i][t], scores.rows[i][t], 1e-6) << i;
  }

  // And through Node.js's own http2, gRPC and protobuf written by hand:
  // the version, the tasks' names, each task's probabilities.
  const std::string node_out = dir_ + "/node_client.txt";
  ASSERT_EQ(
      RunToCompletion(
          {"/bin/sh", "-c",
           absl::StrCat("node ", BinaryPath("tests/serve_client.js"), " ",
                        address, " ", dir_, "/test.tsv 300 > ", node_out)},
          dir_ + "/node_client.log"),
      0)
      << ReadFile(dir_ + "/node_client.log");
  std::ifstream node_in(node_out);
  std::string version;
  std::getline(node_in, version);
  EXPECT_EQ(version, "m1");
  const std::string rest((std::istreambuf_iterator<char>(node_in)),
                         std::istreambuf_iterator<char>());
  std::ofstream(node_out + ".scores") << rest;
  const Scores node = ReadScores(node_out + ".scores");
  EXPECT_EQ(node.header, (std::vector<std::string>{"ctr", "cvr"}));
  ASSERT_EQ(node.rows.size(), 300u) << ReadFile(node_out);
  for (int i = 0; i < 300; ++i) {
    for (int t = 0; t < 2; ++t)
      ASSERT_NEAR(node.rows[i][t], scores.rows[i][t], 1e-6) << i;
  }
}

// --follow scores each file's examples before training on them, per task.
TEST_F(MultiTaskTest, FollowingValidatesEachTaskProgressively) {
  const std::string follow = dir_ + "/follow";
  ASSERT_EQ(RunToCompletion(
                {"/bin/sh", "-c",
                 absl::StrCat("mkdir -p ", follow, " && cp ", dir_,
                              "/train.tsv ", follow, "/day1.tsv && touch ",
                              follow, "/day1.tsv.done")},
                dir_ + "/copy.log"),
            0);
  ASSERT_EQ(StartShards(1).size(), 1u);
  const std::string metrics_path = dir_ + "/follow.json";
  auto worker = ChildProcess::Start(
      cluster_->WorkerArgs(
          0, 1,
          {"--follow=" + follow, "--follow_until=day1.tsv", kColumns,
           "--model_spec=" + dir_ + "/two_tasks.spec", "--batch_size=1024",
           "--device=cpu", "--metrics_out=" + metrics_path}),
      false, dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_EQ((*worker)->Wait(absl::Minutes(5)), 0)
      << ReadFile(dir_ + "/worker0.log");
  const std::string text = ReadFile(metrics_path);
  const nlohmann::json metrics = nlohmann::json::parse(text);
  ASSERT_EQ(metrics["followed_files"].size(), 1u) << text;
  const nlohmann::json& file = metrics["followed_files"][0];
  ASSERT_EQ(file["tasks"].size(), 2u) << text;
  EXPECT_EQ(file["tasks"][1]["task"], "cvr");
  EXPECT_EQ(file["tasks"][0]["progressive_examples"], 30000);
  EXPECT_EQ(file["tasks"][1]["progressive_examples"], 24000);  // 1 in 5 unknown
  EXPECT_EQ(file["tasks"][0]["progressive_auc"], file["progressive_auc"]);
  EXPECT_GT(file["tasks"][1]["progressive_auc"], 0.55) << text;
  EXPECT_NE(ReadFile(dir_ + "/worker0.log")
                .find("progressive validation (each example scored before "
                      "training on it) of task cvr AUC"),
            std::string::npos);
}

// din on lines with recent items (seq:0): trains, exports, and scores the
// same in ps_predict and ps_serve (the sequence's mask built from each line
// on both).
TEST_F(MultiTaskTest, DinTrainsExportsAndServesSequences) {
  const std::string gen = BinaryPath("worker/datagen/clicklog_gen");
  for (const auto& [name, lines, seed] :
       {std::make_tuple("seq_train", 20000, 1),
        std::make_tuple("seq_test", 2000, 2)}) {
    ASSERT_EQ(
        RunToCompletion({gen, absl::StrCat("--out=", dir_, "/", name, ".tsv"),
                         absl::StrCat("--lines=", lines), "--sequence_length=8",
                         absl::StrCat("--sample_seed=", seed)},
                        dir_ + "/gen.log"),
        0)
        << ReadFile(dir_ + "/gen.log");
  }
  // The generator says how to read what it wrote.
  ASSERT_NE(
      ReadFile(dir_ + "/gen.log").find("--columns=label,dense*13,cat*26,seq:0"),
      std::string::npos)
      << ReadFile(dir_ + "/gen.log");
  ASSERT_EQ(StartShards(1).size(), 1u);
  auto worker = ChildProcess::Start(
      WorkerArgs(0, 1,
                 {"--train=" + dir_ + "/seq_train.tsv",
                  "--test=" + dir_ + "/seq_test.tsv",
                  "--columns=label,dense*13,cat*26,seq:0", "--model=din"}),
      false, dir_ + "/worker0.log");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const WorkerRun run = Collect(0, (*worker)->Wait(absl::Minutes(5)));
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_GT(Metric(run.metrics, "test_auc"), 0.7) << run.metrics;
  const AdminRun exported =
      cluster_->Admin({"--dir=" + dir_ + "/din/m1", "export"});
  ASSERT_EQ(exported.exit_code, 0) << exported.log;
  const std::string scores_path = dir_ + "/din_scores.txt";
  ASSERT_EQ(RunToCompletion(
                {BinaryPath("worker/predict/ps_predict"),
                 "--export=" + dir_ + "/din/m1",
                 "--input=" + dir_ + "/seq_test.tsv", "--out=" + scores_path},
                dir_ + "/predict.log"),
            0)
      << ReadFile(dir_ + "/predict.log");
  std::vector<float> scores;
  {
    std::ifstream in(scores_path);
    for (float score; in >> score;) scores.push_back(score);
  }
  ASSERT_EQ(scores.size(), 2000u);
  absl::StatusOr<ServeProcess> serve =
      StartServe(dir_ + "/din", dir_ + "/serve.log");
  ASSERT_TRUE(serve.ok()) << serve.status();
  auto stub = Serving::NewStub(
      grpc::CreateChannel(serve->address, grpc::InsecureChannelCredentials()));
  PredictRequest request;
  {
    std::ifstream in(dir_ + "/seq_test.tsv");
    std::string line;
    for (int i = 0; i < 200 && std::getline(in, line); ++i)
      request.add_lines(line);
  }
  PredictResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->Predict(&context, request, &response).ok());
  ASSERT_EQ(response.probabilities_size(), 200);
  bool any_differs = false;
  for (int i = 0; i < 200; ++i) {
    ASSERT_NEAR(response.probabilities(i), scores[i], 1e-6) << "line " << i;
    any_differs = any_differs || scores[i] != scores[0];
  }
  EXPECT_TRUE(any_differs);
}

TEST_F(MultiTaskTest, ABuiltinOfOneOutputRefusesSeveralLabels) {
  ASSERT_EQ(StartShards(1).size(), 1u);
  std::vector<std::string> flags = {"--train=" + dir_ + "/train.tsv", kColumns,
                                    "--model=wide_deep"};
  const int exit_code =
      RunToCompletion(WorkerArgs(0, 1, flags), dir_ + "/worker0.log");
  EXPECT_EQ(exit_code, 64);
  const std::string log = ReadFile(dir_ + "/worker0.log");
  EXPECT_NE(log.find("2 labels (click, convert)"), std::string::npos) << log;
}

}  // namespace
}  // namespace ps::testing
