#include "worker/trainer_flags.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/usable_cores.h"
#include "gtest/gtest.h"
#include "model/batch_inputs.h"
#include "model/model_plan.h"

ABSL_DECLARE_FLAG(std::string, train);
ABSL_DECLARE_FLAG(std::string, follow);
ABSL_DECLARE_FLAG(std::string, follow_until);
ABSL_DECLARE_FLAG(int32_t, epochs);
ABSL_DECLARE_FLAG(std::string, resume_from);
ABSL_DECLARE_FLAG(std::string, staleness);
ABSL_DECLARE_FLAG(std::string, overlay_own_pushes);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, hidden);
ABSL_DECLARE_FLAG(bool, wide_in_embedding_row);
ABSL_DECLARE_FLAG(std::string, crosses);
ABSL_DECLARE_FLAG(int32_t, worker_index);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every_steps);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(std::string, wire_format);
ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(int32_t, drain_seconds);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(bool, bf16);
ABSL_DECLARE_FLAG(std::string, cpu_threads);
ABSL_DECLARE_FLAG(std::string, columns);
ABSL_DECLARE_FLAG(std::string, multi_pooling);

namespace ps::worker {
namespace {

class TrainerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override { absl::SetFlag(&FLAGS_train, "train.tsv"); }
  // Every flag back to its default after each test.
  absl::FlagSaver saver_;
};

TEST_F(TrainerFlagsTest, FollowTakesTheDirectoryInsteadOfTrain) {
  absl::SetFlag(&FLAGS_train, "");
  absl::SetFlag(&FLAGS_follow, "/logs/hourly");
  absl::SetFlag(&FLAGS_follow_until, "2026120123.tsv.gz");
  absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->follow_dir, "/logs/hourly");
  EXPECT_EQ(options->follow_until, "2026120123.tsv.gz");
  absl::SetFlag(&FLAGS_train, "train.tsv");
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(),
                           "--train or --follow, not both"));
  absl::SetFlag(&FLAGS_train, "");
  absl::SetFlag(&FLAGS_epochs, 2);
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(), "--epochs"));
  absl::SetFlag(&FLAGS_epochs, 1);
  absl::SetFlag(&FLAGS_follow, "");
  absl::SetFlag(&FLAGS_train, "train.tsv");
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(),
                           "--follow_until needs --follow"));
}

TEST_F(TrainerFlagsTest, ResumeFromReadsTheWorkersPositionInTheCheckpoint) {
  const std::string dir = FreshTestDir("resume_position");
  CheckpointManifest manifest;
  manifest.set_format_version(2);
  manifest.set_routing_version(kRoutingVersion);
  manifest.set_num_shards(1);
  manifest.add_shards()->set_index(0);
  *manifest.mutable_slot_map() = SlotMap::Initial(1).ToSpec();
  CheckpointManifest::Worker* worker = manifest.add_workers();
  worker->set_worker(1);
  worker->set_clock(12);
  worker->set_examples(4096 * 12);
  worker->mutable_input_position()->set_file("2026120113.tsv.gz");
  worker->mutable_input_position()->set_file_examples(8192);
  ASSERT_OK(WriteManifest(dir, manifest));
  absl::SetFlag(&FLAGS_train, "");
  absl::SetFlag(&FLAGS_follow, "/logs/hourly");
  absl::SetFlag(&FLAGS_resume_from, dir);
  absl::SetFlag(&FLAGS_worker_index, 1);
  absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->resume_clock, 12);
  EXPECT_EQ(options->resume_examples, 4096 * 12);
  EXPECT_EQ(options->resume_position.file, "2026120113.tsv.gz");
  EXPECT_EQ(options->resume_position.file_examples, 8192);
}

TEST_F(TrainerFlagsTest, TheDefaultsTrainTheCriteoLayoutBulkSynchronously) {
  absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->train.files, "train.tsv");
  EXPECT_EQ(options->staleness, 0);
  EXPECT_EQ(options->model.name(), "wide_deep");
  ASSERT_TRUE(options->legacy_card.has_value());
  EXPECT_EQ(options->legacy_card->kind(), ModelCard::WIDE_DEEP);
  EXPECT_EQ(options->legacy_card->hidden_size(), 2);
  ASSERT_EQ(options->model.table_size(), 2);
  EXPECT_EQ(options->model.table(0).optimizer().kind(), OptimizerSpec::ADAGRAD);
  EXPECT_EQ(options->model.table(1).optimizer().kind(), OptimizerSpec::FTRL);
  EXPECT_EQ(options->model.dense_optimizer().kind(), OptimizerSpec::ADAM);
  EXPECT_TRUE(options->assign_incarnation);
  EXPECT_TRUE(options->resume_from_coordinator);
}

TEST_F(TrainerFlagsTest, EachChoiceLandsInItsOption) {
  absl::SetFlag(&FLAGS_staleness, "async");
  absl::SetFlag(&FLAGS_overlay_own_pushes, "never");
  absl::SetFlag(&FLAGS_model, "deepfm");
  absl::SetFlag(&FLAGS_hidden, "64, 8");
  absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->staleness, -1);
  EXPECT_EQ(options->overlay_own_pushes,
            TrainerOptions::OwnPushOverlay::kNever);
  EXPECT_EQ(options->model.name(), "deepfm");
  EXPECT_EQ(options->legacy_card->kind(), ModelCard::DEEPFM);
  EXPECT_EQ(options->legacy_card->hidden(0), 64);
  EXPECT_EQ(options->legacy_card->hidden(1), 8);
}

// --wide_in_embedding_row stores wide_deep's and deepfm's wide weight in
// the embedding row, and their card then carries the spec (the legacy
// card has no place for it); lr, and wide_deep with crosses, stay apart
// with their legacy cards.
TEST_F(TrainerFlagsTest, TheWideWeightInTheEmbeddingRowTakesASpecCard) {
  absl::SetFlag(&FLAGS_wide_in_embedding_row, true);
  for (const std::string name : {"wide_deep", "deepfm", "lr"}) {
    absl::SetFlag(&FLAGS_model, name);
    absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
    ASSERT_OK(options);
    const bool stored = name != "lr";
    EXPECT_EQ(options->legacy_card.has_value(), !stored) << name;
    const model::Table& wide =
        options->model.table(options->model.table_size() - 1);
    EXPECT_EQ(wide.name(), "wide");
    EXPECT_EQ(wide.stored_with(), stored ? "embedding" : "") << name;
  }
  absl::SetFlag(&FLAGS_model, "wide_deep");
  absl::SetFlag(&FLAGS_crosses, "0:1");
  absl::StatusOr<TrainerOptions> crossed = TrainerOptionsFromFlags();
  ASSERT_OK(crossed);
  EXPECT_TRUE(crossed->legacy_card.has_value());
  EXPECT_TRUE(crossed->model.table(1).stored_with().empty());
}

TEST_F(TrainerFlagsTest, MultiPoolingPoolsTheBuiltinsMultiFields) {
  absl::SetFlag(&FLAGS_columns, "label,cat,multi");
  for (const auto& [name, pooling] :
       {std::pair<const char*, model::Field::Pooling>{"sum", model::Field::SUM},
        {"mean", model::Field::MEAN},
        {"max", model::Field::MAX}}) {
    absl::SetFlag(&FLAGS_multi_pooling, name);
    absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
    ASSERT_OK(options);
    ASSERT_EQ(options->model.field_size(), 2) << name;
    EXPECT_EQ(options->model.field(1).pooling(), pooling) << name;
  }
  absl::SetFlag(&FLAGS_multi_pooling, "median");
  EXPECT_TRUE(
      IsUsageError(TrainerOptionsFromFlags().status(), "--multi_pooling"));
}

TEST_F(TrainerFlagsTest, ABadFlagIsAnInvalidArgumentNamingIt) {
  absl::SetFlag(&FLAGS_staleness, "-2");
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(), "--staleness"));
  absl::SetFlag(&FLAGS_staleness, "1");
  absl::SetFlag(&FLAGS_hidden, "64,x");
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(), "--hidden"));
  absl::SetFlag(&FLAGS_hidden, "64");
  absl::SetFlag(&FLAGS_train, "");
  EXPECT_TRUE(IsUsageError(TrainerOptionsFromFlags().status(),
                           "--train (or --follow) is required"));
  absl::SetFlag(&FLAGS_wire_format, "int8");
  EXPECT_TRUE(IsUsageError(ClientOptionsFromFlags().status(), "--wire_format"));
  absl::SetFlag(&FLAGS_drain_seconds, -1);
  EXPECT_TRUE(IsUsageError(WorkerFlagsFromFlags().status(), "--drain_seconds"));
  absl::SetFlag(&FLAGS_device, "cuda");
  absl::SetFlag(&FLAGS_bf16, true);
  EXPECT_TRUE(
      IsUsageError(BackendFromFlags(TrainerOptions()).status(), "--bf16"));
}

TEST_F(TrainerFlagsTest, GemmThreadsAreEveryCoreOnlyForGemmBoundModels) {
  EXPECT_EQ(AutoCpuThreads(kGemmBoundMultiplyAdds - 1, 8, /*bf16=*/true), 1);
  EXPECT_EQ(AutoCpuThreads(kGemmBoundMultiplyAdds, 8, /*bf16=*/true), 8);
  EXPECT_EQ(AutoCpuThreads(kFp32GemmBoundMultiplyAdds - 1, 8, false), 1);
  EXPECT_EQ(AutoCpuThreads(kFp32GemmBoundMultiplyAdds, 8, false), 8);
  // The defaults (Criteo's columns, embeddings of 16, MLP 256-128): in FP32
  // every built-in with an MLP is GEMM-bound; with bfloat16 inputs only
  // dcn_v2's crosses are. lr has no MLP.
  const int cores = UsableCores();
  for (const bool bf16 : {false, true}) {
    absl::SetFlag(&FLAGS_bf16, bf16);
    for (const std::string model : {"lr", "wide_deep", "deepfm", "dlrm"}) {
      absl::SetFlag(&FLAGS_model, model);
      absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
      ASSERT_OK(options);
      EXPECT_EQ(CpuThreadsFromFlags(*options).value_or(-1),
                model == "lr" || bf16 ? 1 : cores)
          << model << (bf16 ? " bf16" : " fp32");
    }
  }
  absl::SetFlag(&FLAGS_model, "dcn_v2");
  absl::StatusOr<TrainerOptions> options = TrainerOptionsFromFlags();
  ASSERT_OK(options);
  // What makes dcn_v2 GEMM-bound (on a one-core runner auto is 1 anyway).
  absl::StatusOr<model::ModelPlan> plan = model::ModelPlan::Create(
      {options->model, {}}, model::ColumnUses(options->train.layout));
  ASSERT_OK(plan);
  EXPECT_GE(plan->DenseMultiplyAddsPerExample(), kGemmBoundMultiplyAdds);
  EXPECT_EQ(CpuThreadsFromFlags(*options).value_or(-1), cores);
  absl::SetFlag(&FLAGS_cpu_threads, "3");
  EXPECT_EQ(CpuThreadsFromFlags(*options).value_or(-1), 3);
  for (const std::string bad : {"0", "-1", "two", ""}) {
    absl::SetFlag(&FLAGS_cpu_threads, bad);
    EXPECT_TRUE(
        IsUsageError(CpuThreadsFromFlags(*options).status(), "--cpu_threads"))
        << bad;
  }
}

TEST_F(TrainerFlagsTest, OnlyWorkerZeroTakesPeriodicCheckpoints) {
  absl::SetFlag(&FLAGS_checkpoint_every_steps, 10);
  EXPECT_TRUE(
      IsUsageError(TrainerOptionsFromFlags().status(), "--checkpoint_dir"));
  absl::SetFlag(&FLAGS_checkpoint_dir, "/tmp/checkpoints");
  absl::StatusOr<TrainerOptions> zero = TrainerOptionsFromFlags();
  ASSERT_OK(zero);
  EXPECT_EQ(zero->checkpoint_every_steps, 10);
  absl::SetFlag(&FLAGS_worker_index, 1);
  absl::StatusOr<TrainerOptions> one = TrainerOptionsFromFlags();
  ASSERT_OK(one);
  EXPECT_EQ(one->checkpoint_every_steps, 0);
}

TEST_F(TrainerFlagsTest, TheClientGetsEveryServerInOrder) {
  absl::SetFlag(&FLAGS_servers, "127.0.0.1:1, 127.0.0.1:2 ,127.0.0.1:3,");
  absl::SetFlag(&FLAGS_wire_format, "bf16");
  absl::StatusOr<client::ClientOptions> client = ClientOptionsFromFlags();
  ASSERT_OK(client);
  EXPECT_EQ(client->servers, (std::vector<std::string>{
                                 "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}));
  EXPECT_EQ(client->wire_format, WireFormat::BF16);
}

}  // namespace
}  // namespace ps::worker
