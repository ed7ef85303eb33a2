// ps_serve against real processes: a model trained on a shard and exported
// into a model directory is served over gRPC with ps_predict's scores; a
// newer export swapped in is used within a bounded time; bad requests get
// clear errors.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/wait_until.h"
#include "grpcpp/create_channel.h"
#include "model/input/features.h"
#include "proto/health.grpc.pb.h"
#include "proto/serving.grpc.pb.h"
#include "tests/serve_process.h"
#include "tests/training_cluster.h"

namespace ps::testing {
namespace {

std::vector<std::string> FirstLines(const std::string& path, int count) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line;
       lines.size() < static_cast<size_t>(count) && std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

std::vector<float> Scores(const std::string& path) {
  std::vector<float> scores;
  std::ifstream in(path);
  for (float score; in >> score;) scores.push_back(score);
  return scores;
}

class ServeTest : public TrainingTest {
 protected:
  // Exports the shards' model into model_/`name` and scores the test lines
  // (`input`; empty: the suite's) with ps_predict: the probabilities.
  std::vector<float> ExportAndPredict(const std::string& name,
                                      const std::string& input = "") {
    const AdminRun exported =
        cluster_->Admin({"--dir=" + model_ + "/" + name, "export"});
    EXPECT_EQ(exported.exit_code, 0) << exported.log;
    return Predict(name, input.empty() ? *data_ + "/test.tsv" : input);
  }

  // ps_predict's probabilities for `input` with export model_/`name` and
  // `extra` flags.
  std::vector<float> Predict(const std::string& name, const std::string& input,
                             const std::vector<std::string>& extra = {}) {
    const std::string scores = dir_ + "/" + name + ".scores";
    std::vector<std::string> argv = {BinaryPath("worker/predict/ps_predict"),
                                     "--export=" + model_ + "/" + name,
                                     "--input=" + input, "--out=" + scores};
    argv.insert(argv.end(), extra.begin(), extra.end());
    EXPECT_EQ(RunToCompletion(argv, dir_ + "/predict.log"), 0)
        << ReadFile(dir_ + "/predict.log");
    return Scores(scores);
  }

  // Starts ps_serve on model_ (`extra` flags after the defaults): its
  // address, or empty (the test has failed) if it did not start.
  std::string StartServe(const std::vector<std::string>& extra = {}) {
    absl::StatusOr<ServeProcess> serve =
        testing::StartServe(model_, dir_ + "/serve.log", extra);
    EXPECT_TRUE(serve.ok()) << serve.status();
    if (!serve.ok()) return "";
    serve_ = std::move(serve->process);
    return serve->address;
  }

  // Starts ps_serve on model_ into serve_stub_ and scores `lines` once it
  // has loaded the export (up to 30 s): the answer, or its error.
  grpc::Status StartServeAndPredict(const std::vector<std::string>& lines,
                                    PredictResponse* response) {
    const std::string address = StartServe();
    if (address.empty()) return grpc::Status(grpc::StatusCode::UNKNOWN, "");
    serve_stub_ = Serving::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    PredictRequest request;
    for (const std::string& line : lines) request.add_lines(line);
    grpc::Status status;
    WaitUntil(  // until the export is loaded
        [&] {
          grpc::ClientContext context;
          status = serve_stub_->Predict(&context, request, response);
          return status.ok();
        },
        absl::Seconds(30), absl::Milliseconds(50));
    return status;
  }

  std::string model_;
  std::unique_ptr<ChildProcess> serve_;
  std::unique_ptr<Serving::Stub> serve_stub_;
};

TEST_F(ServeTest, ServesTheNewestExportWithPsPredictsScores) {
  model_ = dir_ + "/models";
  std::filesystem::create_directories(model_);
  const std::vector<std::string> servers = StartShards(1);
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(RunToCompletion(WorkerArgs(0, 1, {"--staleness=0"}),
                            dir_ + "/worker0.log", absl::Minutes(5)),
            0)
      << ReadFile(dir_ + "/worker0.log");

  // Started on a directory with no export yet: not serving.
  const std::string address =
      StartServe({"--scorers=2", "--rocksdb_block_cache_mb=16",
                  "--metrics_listen=127.0.0.1:0"});
  ASSERT_FALSE(address.empty());
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = Serving::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto serving_status = [&](const std::string& service = "") {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse answer;
    const grpc::Status status = health->Check(&context, request, &answer);
    return status.ok() ? answer.status()
                       : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  };
  EXPECT_EQ(serving_status(),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  // Alive all the same (deploy/k8s's liveness probe asks "liveness").
  EXPECT_EQ(serving_status("liveness"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  {
    PredictRequest early;
    early.add_lines("1\t2");
    PredictResponse unanswered;
    grpc::ClientContext context;
    EXPECT_EQ(stub->Predict(&context, early, &unanswered).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }

  // The first export arrives: served within a few polls, Ready.
  const std::vector<float> first = ExportAndPredict("export-1");
  ASSERT_EQ(first.size(), static_cast<size_t>(kTestLines));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return serving_status() ==
               grpc::health::v1::HealthCheckResponse::SERVING;
      },
      absl::Seconds(30), absl::Milliseconds(50)))
      << ReadFile(dir_ + "/serve.log");

  const std::vector<std::string> lines = FirstLines(*data_ + "/test.tsv", 2000);
  auto predict = [&](const std::vector<std::string>& request_lines,
                     PredictResponse* response) {
    PredictRequest request;
    for (const std::string& line : request_lines) request.add_lines(line);
    grpc::ClientContext context;
    return stub->Predict(&context, request, response);
  };
  PredictResponse response;
  ASSERT_TRUE(predict(lines, &response).ok());
  EXPECT_EQ(response.model_version(), "export-1");
  EXPECT_GT(response.model_cut(), 0);
  ASSERT_EQ(response.probabilities_size(), 2000);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_NEAR(response.probabilities(i), first[i], 1e-6) << "line " << i;
  }

  // The same examples given as features: parsed by the client (Criteo's
  // layout: label, 13 dense, 26 categorical).
  PredictRequest parsed;
  for (int i = 0; i < 100; ++i) {
    std::vector<std::string> columns = absl::StrSplit(lines[i], '\t');
    ASSERT_EQ(columns.size(), 40u);
    Features* features = parsed.add_examples();
    for (int d = 1; d <= 13; ++d) {
      double value = 0;
      if (!columns[d].empty()) {
        ASSERT_TRUE(absl::SimpleAtod(columns[d], &value));
      }
      features->add_dense(value);
    }
    for (int f = 0; f < 26; ++f)
      features->add_fields()->add_keys(model::FeatureKey(f, columns[14 + f]));
  }
  {
    grpc::ClientContext context;
    PredictResponse from_features;
    ASSERT_TRUE(stub->Predict(&context, parsed, &from_features).ok());
    ASSERT_EQ(from_features.probabilities_size(), 100);
    for (int i = 0; i < 100; ++i) {
      ASSERT_NEAR(from_features.probabilities(i), first[i], 1e-6) << i;
    }
  }
  // Another count of dense values than the model's: a clear error.
  parsed.mutable_examples(3)->mutable_dense()->RemoveLast();
  {
    grpc::ClientContext context;
    PredictResponse refused;
    const grpc::Status wrong = stub->Predict(&context, parsed, &refused);
    EXPECT_EQ(wrong.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(wrong.error_message().find("example 3: 12 dense values"),
              std::string::npos)
        << wrong.error_message();
  }

  // The same through an independent client: Python's grpcio.
  const std::string python_out = dir_ + "/python_client.txt";
  ASSERT_EQ(
      RunToCompletion({"/bin/sh", "-c",
                       absl::StrCat("/usr/bin/python3 ",
                                    BinaryPath("tests/serve_client.py"), " ",
                                    address, " ", BinaryPath("proto"), " ",
                                    *data_, "/test.tsv 500 > ", python_out)},
                      dir_ + "/python_client.log"),
      0)
      << ReadFile(dir_ + "/python_client.log");
  {
    std::ifstream in(python_out);
    std::string version;
    std::getline(in, version);
    EXPECT_EQ(version, "export-1");
    std::vector<float> scored;
    for (float score; in >> score;) scored.push_back(score);
    ASSERT_EQ(scored.size(), 500u) << ReadFile(python_out);
    for (int i = 0; i < 500; ++i) {
      ASSERT_NEAR(scored[i], first[i], 1e-6) << "line " << i;
    }
  }

  // Bad requests: a line the layout does not read, a table the model lacks.
  std::vector<std::string> bad = {lines[0], lines[1], "not a click log"};
  grpc::Status status = predict(bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("line 2"), std::string::npos)
      << status.error_message();
  LookupRequest lookup;
  lookup.set_table("no_such_table");
  lookup.add_keys(1);
  LookupResponse rows;
  {
    grpc::ClientContext context;
    status = stub->Lookup(&context, lookup, &rows);
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("wide_deep.wide"), std::string::npos)
      << status.error_message();
  // The wide weight of a value the training lines hold is in the model; a
  // key never pushed is not, and gets its initial row.
  const std::string first_line = FirstLines(*data_ + "/train.tsv", 1)[0];
  std::vector<std::string> columns = absl::StrSplit(first_line, '\t');
  ASSERT_EQ(columns.size(), 40u);
  lookup.set_table("wide_deep.wide");
  lookup.clear_keys();
  lookup.add_keys(model::FeatureKey(0, columns[14]));
  lookup.add_keys(12345);
  {
    grpc::ClientContext context;
    status = stub->Lookup(&context, lookup, &rows);
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(rows.dim(), 1u);
  ASSERT_EQ(rows.found_size(), 2);
  EXPECT_TRUE(rows.found(0));
  EXPECT_FALSE(rows.found(1));
  EXPECT_EQ(rows.values_size(), 2);
  EXPECT_EQ(rows.model_version(), "export-1");

  // More training, a newer export: served within a few polls, with its
  // own scores.
  ASSERT_EQ(RunToCompletion(WorkerArgs(0, 1, {"--staleness=0"}),
                            dir_ + "/worker0.log", absl::Minutes(5)),
            0)
      << ReadFile(dir_ + "/worker0.log");
  const std::vector<float> second = ExportAndPredict("export-2");
  // Every answer meanwhile is one export's, whole.
  bool answered = true;
  int mixed_line = -1;
  float got = 0, wanted = 0;
  auto answers_export_2 = [&] {
    answered = predict(lines, &response).ok();
    if (!answered) return true;  // stop: the check below fails
    const std::vector<float>& expected =
        response.model_version() == "export-2" ? second : first;
    for (int i = 0; i < 2000; ++i) {
      // (Written so that a NaN is a mismatch too.)
      if (!(std::abs(response.probabilities(i) - expected[i]) <= 1e-6)) {
        mixed_line = i;
        got = response.probabilities(i);
        wanted = expected[i];
        return true;  // stop: the check below fails
      }
    }
    return response.model_version() == "export-2";
  };
  WaitUntil(answers_export_2, absl::Seconds(30), absl::Milliseconds(20));
  ASSERT_TRUE(answered);
  ASSERT_EQ(mixed_line, -1) << response.model_version() << " line "
                            << mixed_line << ": " << got << ", not " << wanted;
  ASSERT_EQ(response.model_version(), "export-2")
      << ReadFile(dir_ + "/serve.log");
  // The metrics say what was served: calls by method and code, the
  // model's cut, the block cache in use.
  const std::string serve_log = ReadFile(dir_ + "/serve.log");
  const size_t metrics_at = serve_log.find("metrics on http://");
  ASSERT_NE(metrics_at, std::string::npos) << serve_log;
  const std::string metrics_url = serve_log.substr(
      metrics_at + 11, serve_log.find('\n', metrics_at) - metrics_at - 11);
  // Scraped until the gauges show the model served and the block cache in
  // use: they refresh once a second.
  const std::string cut_line =
      "ps_serve_model_cut " + std::to_string(response.model_cut());
  auto refreshed = [&] {
    if (RunToCompletion(
            {"/bin/sh", "-c",
             absl::StrCat("/usr/bin/python3 -c 'import sys, urllib.request; "
                          "sys.stdout.write(urllib.request.urlopen(sys.argv[1],"
                          " timeout=10).read().decode())' ",
                          metrics_url, " > ", dir_, "/metrics.txt")},
            dir_ + "/scrape.log") != 0) {
      return false;
    }
    const std::string text = ReadFile(dir_ + "/metrics.txt");
    const size_t cache_at = text.find("\nps_serve_cache_bytes ");
    return text.find(cut_line) != std::string::npos &&
           cache_at != std::string::npos &&
           std::strtod(text.c_str() + cache_at + 22, nullptr) > 0.0;
  };
  EXPECT_TRUE(WaitUntil(refreshed, absl::Seconds(30), absl::Milliseconds(200)))
      << ReadFile(dir_ + "/scrape.log");
  const std::string metrics = ReadFile(dir_ + "/metrics.txt");
  // Under the labels ps_server's calls have too, and the process's figures.
  EXPECT_NE(metrics.find("grpc_server_handled_total{grpc_code=\"INVALID_"
                         "ARGUMENT\",grpc_method=\"Predict\",grpc_service="
                         "\"ps.Serving\",grpc_type=\"unary\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("grpc_server_handling_seconds_count{grpc_method="
                         "\"Predict\",grpc_service=\"ps.Serving\",grpc_"
                         "type=\"unary\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("\nprocess_resident_memory_bytes "), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("ps_serve_model_cut " +
                         std::to_string(response.model_cut())),
            std::string::npos)
      << metrics;
  const size_t cache_at = metrics.find("\nps_serve_cache_bytes ");
  ASSERT_NE(cache_at, std::string::npos) << metrics;
  EXPECT_GT(std::stod(metrics.substr(cache_at + 22)), 0.0) << metrics;
  bool differs = false;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_NEAR(response.probabilities(i), second[i], 1e-6) << "line " << i;
    differs = differs || std::abs(second[i] - first[i]) > 1e-4;
  }
  EXPECT_TRUE(differs) << "the second export scores as the first";
  EXPECT_EQ(serve_->SignalAndWait(SIGTERM), 0);
  StopShards();
}

// Models from specs (here the dcn_v2 and dlrm built-ins, whose exports
// carry their spec) are served with ps_predict's scores.
TEST_F(ServeTest, ServesSpecModelsWithPsPredictsScores) {
  const std::vector<std::string> lines = FirstLines(*data_ + "/test.tsv", 500);
  for (const std::string name : {"dcn_v2", "dlrm"}) {
    SCOPED_TRACE(name);
    model_ = dir_ + "/models-" + name;
    std::filesystem::create_directories(model_);
    const std::vector<std::string> servers = StartShards(1);
    ASSERT_EQ(servers.size(), 1u);
    ASSERT_EQ(
        RunToCompletion(WorkerArgs(0, 1, {"--model=" + name, "--hidden=16"}),
                        dir_ + "/worker0.log", absl::Minutes(5)),
        0)
        << ReadFile(dir_ + "/worker0.log");
    const std::vector<float> predicted = ExportAndPredict("export-1");
    ASSERT_EQ(predicted.size(), static_cast<size_t>(kTestLines));
    PredictResponse response;
    const grpc::Status status = StartServeAndPredict(lines, &response);
    ASSERT_TRUE(status.ok())
        << status.error_message() << ReadFile(dir_ + "/serve.log");
    ASSERT_EQ(response.probabilities_size(), 500);
    for (int i = 0; i < 500; ++i) {
      ASSERT_NEAR(response.probabilities(i), predicted[i], 1e-6)
          << "line " << i;
    }
    // Not a constant: the model learned something of the lines.
    EXPECT_NE(response.probabilities(0), response.probabilities(1));
    serve_.reset();
  }
}

// A line of clicklog_gen --sequence_length's layout (label, 13 dense, 26
// categorical, a history) as features, its history's most recent `keep`
// items only, their keys seeded by field `key_field`.
Features HistoryFeatures(const std::string& line, size_t keep,
                         uint32_t key_field) {
  const std::vector<std::string> columns = absl::StrSplit(line, '\t');
  Features features;
  for (int d = 1; d <= 13; ++d) {
    double value = 0;
    if (!columns[d].empty()) {
      EXPECT_TRUE(absl::SimpleAtod(columns[d], &value));
    }
    features.add_dense(value);
  }
  for (int f = 0; f < 26; ++f)
    features.add_fields()->add_keys(model::FeatureKey(f, columns[14 + f]));
  std::vector<std::string> items =
      absl::StrSplit(columns[40], '|', absl::SkipEmpty());
  if (items.size() > keep) items.erase(items.begin(), items.end() - keep);
  FieldKeys* history = features.add_fields();
  for (const std::string& item : items)
    history->add_keys(model::FeatureKey(key_field, item));
  return features;
}

// A model that reads a history (DIN over a seq column: seq:0, whose items
// are field 0's keys, and a plain seq, keys of its own) trained with
// --max_values_per_field=4 is scored on each history's 4 most recent items
// by ps_predict and by ps_serve, from lines and from features alike: the
// export records the limit.
TEST_F(ServeTest, ScoresHistoriesWithTheTrainedLimit) {
  const std::string gen = BinaryPath("worker/datagen/clicklog_gen");
  const std::string train = dir_ + "/seq_train.tsv";
  const std::string test = dir_ + "/seq_test.tsv";
  for (const auto& [path, seed] : {std::pair{train, 1}, std::pair{test, 2}}) {
    ASSERT_EQ(RunToCompletion({gen, "--out=" + path, "--lines=10000",
                               absl::StrCat("--sample_seed=", seed),
                               "--sequence_length=12"},
                              dir_ + "/gen.log"),
              0)
        << ReadFile(dir_ + "/gen.log");
  }
  const std::vector<std::string> lines = FirstLines(test, 300);
  for (const auto& [column, key_field] :
       {std::pair<std::string, uint32_t>{"seq:0", 0}, {"seq", 26}}) {
    SCOPED_TRACE(column);
    model_ = absl::StrCat(dir_, "/models-", key_field);
    std::filesystem::create_directories(model_);
    ASSERT_EQ(StartShards(1).size(), 1u);
    ASSERT_EQ(
        RunToCompletion(WorkerArgs(0, 1,
                                   {"--train=" + train, "--test=" + test,
                                    "--model=din", "--hidden=16",
                                    "--columns=label,dense*13,cat*26," + column,
                                    "--max_values_per_field=4"}),
                        dir_ + "/worker0.log", absl::Minutes(5)),
        0)
        << ReadFile(dir_ + "/worker0.log");
    const std::vector<float> predicted = ExportAndPredict("export-1", test);
    ASSERT_EQ(predicted.size(), 10000u);
    // Scored on whole histories instead, some lines score otherwise: the
    // limit matters to these lines.
    const std::vector<float> whole =
        Predict("export-1", test, {"--max_values_per_field=1000"});
    ASSERT_EQ(whole.size(), predicted.size());
    int long_histories = 0, changed = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string history = lines[i].substr(lines[i].rfind('\t') + 1);
      if (std::count(history.begin(), history.end(), '|') >= 4) {
        ++long_histories;
        if (std::fabs(whole[i] - predicted[i]) > 1e-4) ++changed;
      }
    }
    EXPECT_GT(long_histories, 50);
    EXPECT_GT(changed, long_histories / 2);
    if (key_field == 0) {
      // A bad line in the middle of the input, batches of 10: ps_predict
      // stops with an error naming it and leaves no scores behind.
      const std::string bad = dir_ + "/bad.tsv";
      {
        std::ofstream out(bad);
        const std::vector<std::string> first = FirstLines(test, 1000);
        for (size_t i = 0; i < first.size(); ++i)
          out << (i == 500 ? "not a line" : first[i]) << "\n";
      }
      const std::string scores = dir_ + "/bad.scores";
      EXPECT_NE(
          RunToCompletion({BinaryPath("worker/predict/ps_predict"),
                           "--export=" + model_ + "/export-1", "--input=" + bad,
                           "--out=" + scores, "--batch_size=10"},
                          dir_ + "/bad.log"),
          0);
      EXPECT_NE(ReadFile(dir_ + "/bad.log").find("bad.tsv:501"),
                std::string::npos)
          << ReadFile(dir_ + "/bad.log");
      EXPECT_FALSE(std::filesystem::exists(scores));
      EXPECT_FALSE(std::filesystem::exists(scores + ".partial"));
    }

    PredictResponse from_lines;
    const grpc::Status status = StartServeAndPredict(lines, &from_lines);
    ASSERT_TRUE(status.ok())
        << status.error_message() << ReadFile(dir_ + "/serve.log");
    ASSERT_EQ(from_lines.probabilities_size(), 300);
    // Features with whole histories (ps_serve keeps their 4 most recent
    // items, as a line's) and with the client's cut (empty histories too).
    PredictRequest whole_histories, cut_histories;
    for (const std::string& line : lines) {
      *whole_histories.add_examples() = HistoryFeatures(line, 1000, key_field);
      *cut_histories.add_examples() = HistoryFeatures(line, 4, key_field);
    }
    for (const PredictRequest* given : {&whole_histories, &cut_histories}) {
      grpc::ClientContext context;
      PredictResponse response;
      const grpc::Status answered =
          serve_stub_->Predict(&context, *given, &response);
      ASSERT_TRUE(answered.ok()) << answered.error_message();
      ASSERT_EQ(response.probabilities_size(), 300);
      for (int i = 0; i < 300; ++i) {
        ASSERT_NEAR(from_lines.probabilities(i), predicted[i], 1e-6) << i;
        ASSERT_NEAR(response.probabilities(i), predicted[i], 1e-6)
            << "line " << i << ": " << lines[i];
      }
    }
    serve_.reset();
  }
}

}  // namespace
}  // namespace ps::testing
