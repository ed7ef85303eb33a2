// A table stored in another's rows (Table.stored_with), end to end against
// real processes: wide_deep with --wide_in_embedding_row keeps one server
// table whose rows are the embedding then the wide weight, trains to the
// same test AUC to the last digit as the tables kept apart, and its export
// scores byte for byte alike in ps_predict (also after a checkpoint is
// restored into a new shard) and dumps the same tables in ps_export_dump
// (what the TorchScript module is built from).

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/training_cluster.h"

namespace ps::testing {
namespace {

// What one run of wide_deep left: its metrics, the shard's tables as
// ps_admin tables --json lists them, and ps_predict's scores of its export.
struct Outcome {
  WorkerRun run;
  nlohmann::json tables;
  std::string scores;
  // ps_predict's scores of an export taken after a checkpoint of the
  // shard was restored into a new one.
  std::string restored_scores;
  // ps_export_dump's tables: per table of the spec, its name, dim and
  // initializer, and its rows by key.
  std::vector<std::string> dumped_specs;
  std::vector<std::map<uint64_t, std::vector<float>>> dumped_rows;
};

// The rows ps_export_dump wrote of one table: `keys_file` and `rows_file` in
// `dir`, `dim` floats per key.
std::map<uint64_t, std::vector<float>> DumpedRows(const std::string& dir,
                                                  const nlohmann::json& table) {
  std::map<uint64_t, std::vector<float>> rows;
  const std::string keys = ReadFile(dir + "/" + table.value("keys_file", ""));
  const std::string values = ReadFile(dir + "/" + table.value("rows_file", ""));
  const size_t dim = table.value("dim", 0);
  const size_t count = keys.size() / sizeof(uint64_t);
  EXPECT_EQ(values.size(), count * dim * sizeof(float));
  if (values.size() != count * dim * sizeof(float)) return rows;
  for (size_t i = 0; i < count; ++i) {
    uint64_t key;
    std::memcpy(&key, keys.data() + i * sizeof(key), sizeof(key));
    std::vector<float> row(dim);
    std::memcpy(row.data(), values.data() + i * dim * sizeof(float),
                dim * sizeof(float));
    rows[key] = std::move(row);
  }
  return rows;
}

class StoredTablesTest : public TrainingTest {
 protected:
  // Trains with `flags` on a fresh shard, exports and scores; then, if
  // `refused_flags` is not empty, a worker with those is refused by the
  // same shard with a hint naming --wide_in_embedding_row.
  // Exports the cluster's model into DIR/m1 and returns ps_predict's scores
  // of the test lines with it.
  std::string ExportAndScore(const std::string& dir) {
    const AdminRun exported =
        cluster_->Admin({"--dir=" + dir + "/m1", "export"});
    EXPECT_EQ(exported.exit_code, 0) << exported.log;
    const std::string scores = dir + "/scores.txt";
    EXPECT_EQ(
        RunToCompletion(
            {BinaryPath("worker/predict/ps_predict"), "--export=" + dir + "/m1",
             "--input=" + *data_ + "/test.tsv", "--out=" + scores},
            dir + "_predict.log"),
        0)
        << ReadFile(dir + "_predict.log");
    return ReadFile(scores);
  }

  Outcome TrainExportAndScore(const std::string& name,
                              const std::vector<std::string>& flags,
                              const std::vector<std::string>& refused_flags) {
    Outcome outcome;
    if (StartShards(1).empty()) return outcome;
    auto worker = ChildProcess::Start(WorkerArgs(0, 1, flags), false,
                                      dir_ + "/worker0.log");
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return outcome;
    outcome.run = Collect(0, (*worker)->Wait(absl::Minutes(5)));
    EXPECT_EQ(outcome.run.exit_code, 0) << outcome.run.log;
    const AdminRun tables = cluster_->Admin({"tables", "--json"});
    EXPECT_EQ(tables.exit_code, 0) << tables.log;
    outcome.tables = nlohmann::json::parse(tables.out, nullptr, false);
    const std::string export_dir = dir_ + "/" + name + "_export";
    outcome.scores = ExportAndScore(export_dir);
    const std::string dump = dir_ + "/" + name + "_dump";
    EXPECT_EQ(
        RunToCompletion({BinaryPath("worker/predict/ps_export_dump"),
                         "--export=" + export_dir + "/m1", "--out=" + dump},
                        dir_ + "/" + name + "_dump.log"),
        0)
        << ReadFile(dir_ + "/" + name + "_dump.log");
    const nlohmann::json model =
        nlohmann::json::parse(ReadFile(dump + "/model.json"), nullptr, false);
    if (model.is_object() && model.contains("tables")) {
      for (const nlohmann::json& table : model["tables"]) {
        outcome.dumped_specs.push_back(
            absl::StrCat(table.value("name", ""), " ", table.value("dim", 0),
                         " ", table["initializer"].dump()));
        outcome.dumped_rows.push_back(DumpedRows(dump, table));
      }
    }
    if (!refused_flags.empty()) {
      auto refused = ChildProcess::Start(WorkerArgs(0, 1, refused_flags), false,
                                         dir_ + "/" + name + "_refused.log");
      EXPECT_TRUE(refused.ok()) << refused.status();
      if (refused.ok()) {
        const int exit_code = (*refused)->Wait(absl::Minutes(2));
        const std::string log = ReadFile(dir_ + "/" + name + "_refused.log");
        EXPECT_NE(exit_code, 0) << log;
        EXPECT_NE(log.find("--wide_in_embedding_row"), std::string::npos)
            << log;
      }
    }
    // A checkpoint restored into a new shard exports the same model.
    const std::string checkpoint = dir_ + "/" + name + "_checkpoint";
    const AdminRun taken =
        cluster_->Admin({"--dir=" + checkpoint, "checkpoint"});
    EXPECT_EQ(taken.exit_code, 0) << taken.log;
    StopShards();
    if (StartShards(1, {"--durability=periodic", "--cache_mb=64",
                        "--restore_from=" + checkpoint})
            .empty()) {
      return outcome;
    }
    outcome.restored_scores = ExportAndScore(export_dir + "_restored");
    StopShards();
    return outcome;
  }
};

// The sparse tables ps_admin tables lists: name, dim and optimizer.
std::vector<std::string> SparseTables(const nlohmann::json& listed) {
  std::vector<std::string> tables;
  if (!listed.is_object() || !listed.contains("tables")) return tables;
  for (const nlohmann::json& table : listed["tables"]) {
    const std::string name = table.value("name", "");
    if (name.find(".dense.") != std::string::npos) continue;
    tables.push_back(absl::StrCat(name, " ", table.value("dim", 0), " ",
                                  table.value("optimizer", "")));
  }
  return tables;
}

TEST_F(StoredTablesTest, AWideWeightInTheEmbeddingRowTrainsAndScoresAlike) {
  // Replaying its own pushes (--staleness=1) onto the joined rows too.
  const std::vector<std::string> common = {"--model=wide_deep",
                                           "--staleness=1"};
  std::vector<std::string> joined_flags = common;
  joined_flags.push_back("--wide_in_embedding_row");
  // Each shard then refuses a worker that stores the wide weight the other
  // way (a checkpoint resumed with the other setting).
  const Outcome apart = TrainExportAndScore("apart", common, joined_flags);
  const Outcome joined = TrainExportAndScore("joined", joined_flags, common);

  EXPECT_EQ(SparseTables(apart.tables),
            std::vector<std::string>(
                {"wide_deep.embedding 8 adagrad", "wide_deep.wide 1 ftrl"}))
      << apart.tables.dump();
  EXPECT_EQ(SparseTables(joined.tables),
            std::vector<std::string>({"wide_deep.embedding 9 adagrad+ftrl@8"}))
      << joined.tables.dump();
  EXPECT_GT(joined.run.Get("replayed_steps"), 0);
  EXPECT_GT(apart.run.Get("test_auc"), 0.7);
  EXPECT_EQ(joined.run.Get("test_auc"), apart.run.Get("test_auc"));
  EXPECT_EQ(joined.run.Get("test_logloss"), apart.run.Get("test_logloss"));
  ASSERT_FALSE(apart.scores.empty());
  EXPECT_EQ(joined.scores, apart.scores);
  EXPECT_EQ(apart.restored_scores, apart.scores);
  EXPECT_EQ(joined.restored_scores, joined.scores);
  // Each table of the spec dumped alone, as it would be kept apart.
  ASSERT_EQ(apart.dumped_specs.size(), 2u);
  EXPECT_EQ(joined.dumped_specs, apart.dumped_specs);
  ASSERT_EQ(joined.dumped_rows.size(), 2u);
  EXPECT_GT(apart.dumped_rows[1].size(), 1000u);
  EXPECT_TRUE(joined.dumped_rows == apart.dumped_rows);
}

}  // namespace
}  // namespace ps::testing
