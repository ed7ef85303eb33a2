// TestCluster against real processes: a job by addresses with a worker
// and ps_admin, and a job in etcd with a replica, restarted.

#include "tests/test_cluster.h"

#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

// `json` without spaces or line breaks.
std::string Compact(const std::string& json) {
  return absl::StrReplaceAll(json, {{" ", ""}, {"\n", ""}});
}

// The first column of `ps_admin tables`, below its header.
std::vector<std::string> TableNames(const std::string& table_list) {
  std::vector<std::string> names;
  for (absl::string_view line : absl::StrSplit(table_list, '\n')) {
    if (line.empty() || absl::StartsWith(line, "table ")) continue;
    names.emplace_back(line.substr(0, line.find(' ')));
  }
  return names;
}

TEST(TestClusterTest, ShardsByAddressTrainAWorkerAndAnswerTheAdmin) {
  const std::string dir = FreshTestDir("by_address");
  TestClusterOptions options;
  options.shards = 2;
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(dir + "/cluster", options);
  ASSERT_OK(cluster);
  TestCluster& c = **cluster;
  ASSERT_EQ(c.num_shards(), 2);
  EXPECT_NE(c.shard(0).address(), c.shard(1).address());
  EXPECT_EQ(c.ClientFlags(), std::vector<std::string>{absl::StrCat(
                                 "--servers=", c.shard(0).address(), ",",
                                 c.shard(1).address())});

  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + dir + "/train.tsv", "--lines=2000"},
                            dir + "/gen.log"),
            0);
  const int trained = c.RunWorker(
      0, 1,
      {"--train=" + dir + "/train.tsv", "--batch_size=500", "--embedding_dim=4",
       "--hidden=8", "--device=cpu", "--metrics_out=" + dir + "/metrics.json"});
  ASSERT_EQ(trained, 0) << ReadFile(c.WorkerLog(0));
  EXPECT_EQ(Metric(ReadFile(dir + "/metrics.json"), "examples"), 2000);

  const AdminRun stats = c.Admin({"stats", "--json", "--interval_s=0"});
  ASSERT_EQ(stats.exit_code, 0) << stats.log;
  EXPECT_NE(Compact(stats.out).find("\"shards_answered\":2"), std::string::npos)
      << stats.out;
  // Rows reached both shards.
  EXPECT_GT(ShardStatsOf(c.shard(0)).rows_pushed(), 0u);
  EXPECT_GT(ShardStatsOf(c.shard(1)).rows_pushed(), 0u);
}

TEST(TestClusterTest, AJobInEtcdWithAReplica) {
  const std::string dir = FreshTestDir("with_replica");
  TestClusterOptions options;
  options.etcd = true;
  options.job = "builder";
  options.replicas_per_shard = 1;
  options.primary_flags = {"--replication=sync"};
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(dir, options);
  ASSERT_OK(cluster);
  TestCluster& c = **cluster;
  ASSERT_NE(c.etcd(), nullptr);
  EXPECT_EQ(c.ClientFlags()[1], "--job=builder");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ShardStatsOf(c.shard(0)).replication().replicas_in_sync() == 1;
      },
      absl::Minutes(1)));
  EXPECT_TRUE(absl::StartsWith(
      ShardStatsOf(c.replica(0, 0)).replication().role(), "replica of"));
  const AdminRun tables = c.Admin({"tables"});
  EXPECT_EQ(tables.exit_code, 0) << tables.log;
}

TEST(TestClusterTest, AShardOfAJobInEtcdRestartsOnItsData) {
  const std::string dir = FreshTestDir("restart");
  TestClusterOptions options;
  options.etcd = true;
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(dir, options);
  ASSERT_OK(cluster);
  TestCluster& c = **cluster;
  ASSERT_OK(c.ConnectEtcd());
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + dir + "/train.tsv", "--lines=1000"},
                            dir + "/gen.log"),
            0);
  ASSERT_EQ(c.RunWorker(0, 1,
                        {"--train=" + dir + "/train.tsv", "--batch_size=500",
                         "--embedding_dim=4", "--hidden=8", "--device=cpu"}),
            0)
      << ReadFile(c.WorkerLog(0));
  const AdminRun before = c.Admin({"tables"});
  ASSERT_EQ(before.exit_code, 0) << before.log;
  ASSERT_FALSE(before.out.empty());
  EXPECT_EQ(c.StopShard(0, SIGTERM), 0);
  ASSERT_OK(c.RestartShard(0));
  const AdminRun after = c.Admin({"tables"});
  ASSERT_EQ(after.exit_code, 0) << after.log;
  // The same tables (their row counts grow once written back).
  EXPECT_EQ(TableNames(after.out), TableNames(before.out));
  EXPECT_EQ(TableNames(after.out).size(), 8u) << after.out;
}

}  // namespace
}  // namespace ps::testing
