// Delta exports against real processes (ps_admin export --base):
//
//   - A chain of a full export and two deltas, each taken after more
//     training, scores every line exactly as a full export of the same cut
//     does (ps_predict), and holds fewer rows than it.
//   - A delta is refused, clearly, where it cannot be right: beside no
//     export, after a shard restarted, after slots moved; a delta whose
//     base is gone does not read.
//   - Rows that expired since the base are deleted by the delta.
//
// Each with wide_deep's tables apart and with its wide weight in the
// embedding row (--wide_in_embedding_row: one table of rows of two
// column groups, which a delta holds and deletes whole).

#include "tests/checkpoint_cluster.h"

namespace ps::testing {
namespace {

// Trains one worker on `data` against `shards` (from its start, whatever
// the coordinator holds for it) with `extra` flags, and fails the test if
// it fails.
void TrainOn(TestCluster& shards, const std::string& data,
             const std::string& tag, const std::string& dir,
             const std::vector<std::string>& extra = {}) {
  const std::string log = dir + "/" + tag + ".log";
  std::vector<std::string> flags = {
      "--train=" + data, "--staleness=0",     "--batch_size=1000",
      "--hidden=16",     "--embedding_dim=4", "--restart_from_start"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  EXPECT_EQ(RunToCompletion(shards.WorkerArgs(0, 1, flags), log), 0)
      << ReadFile(log);
}

// ps_admin export into `dir` (a delta of `base` unless it is empty);
// returns ps_admin's exit code, its output in *output.
int Export(TestCluster& shards, const std::string& dir, const std::string& base,
           std::string* output) {
  std::vector<std::string> args = {"--dir=" + dir, "export"};
  if (!base.empty()) args.insert(args.begin(), "--base=" + base);
  const std::string log = dir + ".log";
  const int code = Admin(shards.addresses(), args, log);
  *output = ReadFile(log);
  return code;
}

// ps_predict's scores of `test` with the export in `model`, its tables
// read into memory or (`in_memory` false) looked up in each export of the
// chain; fails the test if it fails.
std::string Scores(const std::string& model, const std::string& test,
                   bool in_memory = true) {
  const std::string scores = model + ".scores";
  const std::string log = model + ".predict.log";
  EXPECT_EQ(RunToCompletion(
                {BinaryPath("worker/predict/ps_predict"), "--export=" + model,
                 "--input=" + test, "--out=" + scores,
                 in_memory ? "--max_memory_mb=1024" : "--max_memory_mb=0"},
                log),
            0)
      << ReadFile(log);
  return ReadFile(scores);
}

uint64_t Rows(const ExportManifest& manifest) {
  uint64_t rows = 0;
  for (const auto& table : manifest.tables()) rows += table.rows();
  return rows;
}

// The parameter: whether the worker keeps the wide weight in the
// embedding row.
class DeltaExportTest : public CheckpointTest,
                        public ::testing::WithParamInterface<bool> {
 protected:
  // The worker's flags for the parameter, and `extra`.
  static std::vector<std::string> Layout(std::vector<std::string> extra = {}) {
    if (GetParam()) extra.push_back("--wide_in_embedding_row");
    return extra;
  }
  // Fails the test unless `manifest` holds the wide weights as the
  // parameter says: a table of its own, or none.
  static void ExpectWideTable(const ExportManifest& manifest) {
    bool wide_apart = false;
    for (const auto& table : manifest.tables()) {
      const std::string& name = table.spec().name();  // "wide_deep.wide"
      wide_apart |= name.substr(name.rfind('.') + 1) == "wide";
    }
    EXPECT_EQ(wide_apart, !GetParam());
  }
};

TEST_P(DeltaExportTest, ADeltaChainScoresLikeAFullExportOfTheSameCut) {
  const std::string first = Generate("first.tsv", 20000, /*seed=*/1);
  const std::string second = Generate("second.tsv", 6000, /*seed=*/3);
  const std::string third = Generate("third.tsv", 6000, /*seed=*/4);
  const std::string test = Generate("test.tsv", 4000, /*seed=*/2);
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_NE(shards, nullptr);
  const std::string exports = dir_ + "/exports";
  std::string output;

  // A shard's rows updated in the second it exports are in the delta after
  // it too (update times are whole seconds): the pauses keep the first
  // file's rows out of the delta.
  TrainOn(*shards, first, "first", dir_, Layout());
  absl::SleepFor(absl::Seconds(1.1));
  ASSERT_EQ(Export(*shards, exports + "/base", "", &output), 0) << output;
  absl::SleepFor(absl::Seconds(1.1));
  TrainOn(*shards, second, "second", dir_, Layout());
  ASSERT_EQ(Export(*shards, exports + "/delta1", exports + "/base", &output), 0)
      << output;
  ASSERT_EQ(Export(*shards, exports + "/full1", "", &output), 0) << output;
  TrainOn(*shards, third, "third", dir_, Layout());
  ASSERT_EQ(Export(*shards, exports + "/delta2", exports + "/delta1", &output),
            0)
      << output;
  ASSERT_EQ(Export(*shards, exports + "/full2", "", &output), 0) << output;

  auto base = ReadExportManifest(exports + "/base");
  auto delta1 = ReadExportManifest(exports + "/delta1");
  auto delta2 = ReadExportManifest(exports + "/delta2");
  auto full1 = ReadExportManifest(exports + "/full1");
  ASSERT_TRUE(base.ok() && delta1.ok() && delta2.ok() && full1.ok());
  EXPECT_EQ(delta1->format_version(), 3u);
  EXPECT_EQ(delta1->base(), "base");
  EXPECT_EQ(delta1->predecessor(), "base");
  EXPECT_EQ(delta2->base(), "base");
  EXPECT_EQ(delta2->predecessor(), "delta1");
  EXPECT_EQ(delta2->delta_index(), 2u);
  EXPECT_EQ(base->shard_exported_at_s_size(), 2);
  ExpectWideTable(*base);
  ExpectWideTable(*delta1);
  // Only what the second file changed.
  EXPECT_LT(Rows(*delta1), Rows(*full1));
  EXPECT_GT(Rows(*delta1), 0u);

  // Read over their chains, in memory or seeking in each export, the
  // deltas score as the full exports of their cuts, every line to the last
  // digit.
  const std::string full1_scores = Scores(exports + "/full1", test);
  EXPECT_EQ(Scores(exports + "/full1", test, /*in_memory=*/false),
            full1_scores);
  EXPECT_EQ(Scores(exports + "/delta1", test), full1_scores);
  EXPECT_EQ(Scores(exports + "/delta1", test, /*in_memory=*/false),
            full1_scores);
  const std::string full2_scores = Scores(exports + "/full2", test);
  EXPECT_EQ(Scores(exports + "/delta2", test), full2_scores);
  EXPECT_EQ(Scores(exports + "/delta2", test, /*in_memory=*/false),
            full2_scores);
  EXPECT_NE(full1_scores, full2_scores);
  EXPECT_NE(Scores(exports + "/base", test), full1_scores);

  // Refused: a delta beside no export of it.
  EXPECT_NE(Export(*shards, dir_ + "/elsewhere", exports + "/delta2", &output),
            0);
  EXPECT_NE(output.find("beside"), std::string::npos) << output;
  // After a shard restarted, a delta since before is refused (what it
  // dropped before is not known), and a full export, then a delta, go on.
  shards.reset();
  shards = StartShards(dir_, "shard", 2);
  ASSERT_NE(shards, nullptr);
  EXPECT_NE(Export(*shards, exports + "/delta3", exports + "/delta2", &output),
            0);
  EXPECT_NE(output.find("full export (without --base)"), std::string::npos)
      << output;
  EXPECT_FALSE(std::filesystem::exists(exports + "/delta3/MANIFEST.json"));
  ASSERT_EQ(Export(*shards, exports + "/base2", "", &output), 0) << output;
  ASSERT_EQ(Export(*shards, exports + "/delta4", exports + "/base2", &output),
            0)
      << output;
  EXPECT_EQ(Scores(exports + "/delta4", test), full2_scores);
  // Slots moved since: a delta is refused (moved rows keep the update time
  // of the shard they left, which recorded their drops in its part).
  ASSERT_EQ(Admin(shards->addresses(), {"--slots=0-99", "--to=1", "move-slots"},
                  dir_ + "/move.log"),
            0)
      << ReadFile(dir_ + "/move.log");
  EXPECT_NE(Export(*shards, exports + "/delta5", exports + "/delta4", &output),
            0);
  EXPECT_NE(output.find("slots moved"), std::string::npos) << output;
  // The moved rows (both column groups of a joined row) score as before.
  ASSERT_EQ(Export(*shards, exports + "/moved", "", &output), 0) << output;
  EXPECT_EQ(Scores(exports + "/moved", test), full2_scores);
  // A chain with a link gone does not read, and says which.
  std::filesystem::remove_all(exports + "/delta1");
  const std::string log = dir_ + "/broken_chain.log";
  EXPECT_NE(RunToCompletion({BinaryPath("worker/predict/ps_predict"),
                             "--export=" + exports + "/delta2",
                             "--input=" + test, "--out=" + dir_ + "/x.txt"},
                            log),
            0);
  EXPECT_NE(ReadFile(log).find("delta1"), std::string::npos) << ReadFile(log);
}

// Rows that expired since the base are deleted by the delta: read over its
// chain (in memory and not), it scores as a full export of the same cut,
// which holds no expired row.
TEST_P(DeltaExportTest, ADeltaDeletesTheRowsThatExpiredSinceItsBase) {
  const std::string first = Generate("first.tsv", 12000, /*seed=*/1);
  const std::string second = Generate("second.tsv", 3000, /*seed=*/5);
  const std::string test = Generate("test.tsv", 4000, /*seed=*/2);
  auto shards = StartShards(dir_, "shard", 1, {"--write_back_ms=200"});
  ASSERT_NE(shards, nullptr);
  const std::string exports = dir_ + "/exports";
  const std::vector<std::string> ttl = Layout({"--row_ttl_s=3"});
  std::string output;
  TrainOn(*shards, first, "first", dir_, ttl);
  ASSERT_EQ(Export(*shards, exports + "/base", "", &output), 0) << output;
  // The first file's rows expire (3 s after their last update, whole
  // seconds); the second file's, trained on after, do not before the
  // exports below.
  absl::SleepFor(absl::Seconds(4.5));
  TrainOn(*shards, second, "second", dir_, ttl);
  ASSERT_EQ(Export(*shards, exports + "/delta", exports + "/base", &output), 0)
      << output;
  ASSERT_EQ(Export(*shards, exports + "/full", "", &output), 0) << output;
  auto delta = ReadExportManifest(exports + "/delta");
  auto base = ReadExportManifest(exports + "/base");
  auto full = ReadExportManifest(exports + "/full");
  ASSERT_TRUE(delta.ok() && base.ok() && full.ok());
  uint64_t deleted = 0;
  for (const auto& table : delta->tables()) deleted += table.deleted_rows();
  EXPECT_GT(deleted, 1000u);
  ExpectWideTable(*delta);
  EXPECT_LT(Rows(*full), Rows(*base));
  const std::string full_scores = Scores(exports + "/full", test);
  EXPECT_EQ(Scores(exports + "/delta", test), full_scores);
  EXPECT_EQ(Scores(exports + "/delta", test, /*in_memory=*/false), full_scores);
  // Without its deletions the delta would score as the base's rows allow.
  EXPECT_NE(Scores(exports + "/base", test), full_scores);
}

INSTANTIATE_TEST_SUITE_P(WideWeight, DeltaExportTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "InTheEmbeddingRow"
                                             : "InATableApart";
                         });

}  // namespace
}  // namespace ps::testing
