// Replicas that die, start again or serve reads, against real ps_server
// processes: a new replica of a paused primary gives up in time; a killed
// replica costs its primary nothing and copies again; a replica copies
// again once its primary's slots change; the admin API and evaluations
// read rows from replicas.

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "client/ps_client.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/chaos_rows.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"
#include "tests/delay_proxy.h"
#include "tests/ps_admin_run.h"
#include "tests/replication_fixture.h"
#include "tests/server_process.h"
#include "tests/test_cluster.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

TEST_F(ReplicationTest, ANewReplicaOfAPausedPrimaryGivesUpInTime) {
  std::unique_ptr<ServerProcess> primary = StartPrimary({});
  ASSERT_NE(primary, nullptr);
  ASSERT_EQ(kill(primary->pid(), SIGSTOP), 0);
  replica_dir_ = FreshTestDir(name_ + "_replica");
  const absl::Time began = absl::Now();
  const int exit_code = RunServerToExit(
      {"--data_dir=" + replica_dir_, "--replica_of=" + primary->address(),
       "--listen=127.0.0.1:0", "--replica_copy_timeout_s=2"},
      replica_dir_ + ".log", absl::Seconds(60));
  const absl::Duration took = absl::Now() - began;
  ASSERT_EQ(kill(primary->pid(), SIGCONT), 0);
  EXPECT_NE(exit_code, 0);
  // Within its 2 s deadline (and the start of a process), well before
  // gRPC's own connect timeout of 20 s; a primary paused after the
  // connection was made would never answer at all.
  EXPECT_LT(took, absl::Seconds(12));
  const std::string log = ReadFile(replica_dir_ + ".log");
  EXPECT_NE(log.find("asking the primary for a copy"), std::string::npos)
      << log;
}

TEST_F(ReplicationTest, AKilledReplicaCostsNothingAndCopiesAgain) {
  std::unique_ptr<ServerProcess> primary =
      StartPrimary({"--replication=sync", "--replica_timeout_ms=3000"});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(30));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<CountingPusher> pusher = StartPushing(client.get());
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1;
  }));
  pusher->WaitForMore(10);

  // Killed: the pushes wait for it until the primary drops it (after
  // --replica_timeout_ms), then are refused (transiently: the client
  // retries) while no replica is in sync (--min_in_sync_replicas 1).
  replica->SignalAndWait(SIGKILL);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas() == 0 && r.pushes_refused_too_few_in_sync() > 0;
  }));
  const int before = pusher->acknowledged();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(pusher->acknowledged(), before);
  EXPECT_EQ(Replication(*primary).pushes_without_replica(), 0u);

  // Started again in the same data dir: copied afresh, caught up.
  replica = StartReplica(*primary, /*fresh_dir=*/false);
  ASSERT_NE(replica, nullptr);
  pusher->WaitForMore(10);
  ASSERT_OK(pusher->Stop());
  const int acknowledged = pusher->acknowledged();
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas() == 1 && r.lag_entries() == 0;
  }));
  for (float value : Values(*replica)) EXPECT_EQ(value, acknowledged);
  AddChaosRow(
      "--replication=sync: the replica killed (kill -9), then "
      "started again",
      "pushes waited until the primary dropped it, then went on",
      Values(*replica), acknowledged,
      "the replica copied the primary again and caught up");

  // A replica refuses pushes (and says where they go), and a data dir that
  // is not a replica's is never emptied for a copy.
  std::unique_ptr<client::PsClient> replica_client =
      Connect(*replica, absl::Seconds(1), /*declare=*/false);
  ASSERT_NE(replica_client, nullptr);
  const absl::Status refused = AddOne(*replica_client, kTable, kDim, keys_, 0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("replica of"), std::string::npos);
  primary->SignalAndWait(SIGTERM);
  EXPECT_NE(RunServerToExit({"--data_dir=" + primary_dir_,
                             "--replica_of=" + replica->address()},
                            primary_dir_ + ".refused.log", absl::Minutes(1)),
            0);
  EXPECT_TRUE(std::filesystem::exists(primary_dir_ + "/CURRENT"));
}

TEST_F(ReplicationTest, AReplicaCopiesAgainOnceItsPrimarysSlotsChange) {
  // Two shards; shard 0 has a replica.
  std::unique_ptr<ServerProcess> primary = StartPrimary(
      {"--num_shards=2", "--shard_index=0", "--replica_timeout_ms=2000"});
  ASSERT_NE(primary, nullptr);
  const std::string other_dir = FreshTestDir(name_ + "_shard1");
  auto other = ServerProcess::Start(
      {"--data_dir=" + other_dir, "--num_shards=2", "--shard_index=1"},
      absl::Seconds(60), other_dir + ".log");
  ASSERT_OK(other);
  client::ClientOptions options;
  options.servers = {primary->address(), (*other)->address()};
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  ASSERT_OK(client);
  ASSERT_OK((*client)->DeclareTable(CountingTableSpec(kTable, kDim)));
  ASSERT_OK(AddOne(**client, kTable, kDim, keys_, 0));
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);

  // An administrator gives shard 0's slots of keys_[0] to shard 1 (rows
  // could have moved with it, outside the feed): the replica stops
  // following and says so.
  auto admin = Admin::NewStub(primary->channel());
  GetSlotMapResponse current;
  grpc::ClientContext get_context;
  ASSERT_TRUE(
      admin->GetSlotMap(&get_context, GetSlotMapRequest(), &current).ok());
  absl::StatusOr<SlotMap> initial_or = SlotMap::FromSpec(current.slot_map());
  ASSERT_OK(initial_or.status());
  const SlotMap initial = *initial_or;
  const uint32_t slot = SlotForKey(keys_[0]);
  ASSERT_EQ(initial.ShardForKey(keys_[0]), 0u);
  const SlotMap next = initial.WithSlotsMoved(slot, slot, 1);
  SetSlotMapRequest request;
  request.set_expected_slot_map_epoch(initial.epoch());
  *request.mutable_slot_map() = next.ToSpec();
  request.set_allow_without_move(true);
  SetSlotMapResponse response;
  grpc::ClientContext context;
  const grpc::Status set = admin->SetSlotMap(&context, request, &response);
  ASSERT_TRUE(set.ok()) << set.error_message();
  // Not at once: under --etcd the two sides read the job's map each at its
  // own moment, and a difference for a moment must not cost a copy
  // (--replica_slot_map_grace_s, 10 s by default).
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(Replication(*replica).error(), "");
  ASSERT_TRUE(WaitFor(*replica, [](const ShardStatsResponse::Replication& r) {
    return r.error().find("slot map") != std::string::npos;
  })) << Replication(*replica).ShortDebugString();

  // Started again, it copies the map with the rows: it holds shard 0's
  // rows, pushed twice, and its map is the primary's.
  replica->SignalAndWait(SIGTERM);
  replica = StartReplica(*primary, /*fresh_dir=*/false);
  ASSERT_NE(replica, nullptr);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas() == 1 && r.lag_entries() == 0;
  }));
  EXPECT_TRUE(Replication(*replica).error().empty());
  auto replica_admin = Admin::NewStub(replica->channel());
  ShardStatsResponse stats;
  grpc::ClientContext stats_context;
  ASSERT_TRUE(
      replica_admin->ShardStats(&stats_context, ShardStatsRequest(), &stats)
          .ok());
  EXPECT_EQ(stats.slot_map_epoch(), next.epoch());
  const std::vector<float> values = Values(*replica);
  for (size_t k = 0, i = 0; k < keys_.size(); k += 50, ++i) {
    EXPECT_EQ(values[i], initial.ShardForKey(keys_[k]) == 0 ? 1.0f : 0.0f) << k;
  }
}

TEST_F(ReplicationTest, AdminReadsARowFromTheReplicaWithItsPrimaryGone) {
  std::unique_ptr<ServerProcess> primary = StartPrimary({});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(2));
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i)
    ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas() == 1 && r.lag_entries() == 0;
  }));
  primary->SignalAndWait(SIGKILL);

  const std::string log = FreshTestDir(name_ + "_admin") + "/admin.log";
  // ps_admin row with `flags`: its exit code, its stdout in `out`.
  auto row = [&](const std::vector<std::string>& flags, std::string* out) {
    std::vector<std::string> args = {"row", std::string("--table=") + kTable,
                                     absl::StrCat("--key=", keys_[7])};
    args.insert(args.end(), flags.begin(), flags.end());
    const AdminRun run = RunPsAdmin(
        AdminCluster::Servers({primary->address()}, {"--rpc_timeout_s=5"}),
        args, log, absl::Seconds(60));
    *out += run.out;
    return run.exit_code;
  };
  // From the replica, which holds the three pushes (the primary is gone).
  std::string out;
  ASSERT_EQ(row({"--read_replicas=" + replica->address(), "--json"}, &out), 0)
      << ReadFile(log);
  EXPECT_NE(out.find("\"server\":\"" + replica->address()), std::string::npos)
      << out;
  EXPECT_NE(out.find("\"values\":[3.0,3.0,3.0,3.0]"), std::string::npos) << out;
  // Without it, from the primary, which is gone.
  EXPECT_NE(row({}, &out), 0);
  // One replica per shard.
  EXPECT_EQ(
      row({"--read_replicas=" + replica->address() + "," + replica->address()},
          &out),
      64);
}

TEST_F(ReplicationTest, EvaluationsReadTheModelFromReplicas) {
  const std::string dir = FreshTestDir(name_ + "_data");
  const std::string gen = BinaryPath("worker/datagen/clicklog_gen");
  ASSERT_EQ(RunToCompletion({gen, "--out=" + dir + "/train.tsv",
                             "--lines=20000", "--sample_seed=1"},
                            dir + "/gen.log"),
            0);
  ASSERT_EQ(RunToCompletion({gen, "--out=" + dir + "/test.tsv", "--lines=4000",
                             "--sample_seed=2"},
                            dir + "/gen.log"),
            0);
  std::unique_ptr<ServerProcess> primary = StartPrimary({"--replication=sync"});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);
  const std::vector<std::string> worker = PsWorkerArgv(
      {"--servers=" + primary->address()},
      {"--train=" + dir + "/train.tsv", "--test=" + dir + "/test.tsv",
       "--batch_size=1024", "--metrics_out=" + dir + "/metrics.json"});
  // One replica per shard, or the flag is refused.
  std::vector<std::string> wrong = worker;
  wrong.push_back("--read_replicas=" + replica->address() + "," +
                  replica->address());
  EXPECT_EQ(RunToCompletion(wrong, dir + "/wrong.log"), 64);

  std::vector<std::string> argv = worker;
  argv.push_back("--read_replicas=" + replica->address());
  ASSERT_EQ(RunToCompletion(argv, dir + "/worker.log"), 0)
      << ReadFile(dir + "/worker.log");
  // The evaluation pulled from the replica (training never does), and the
  // model it read there was the trained one.
  EXPECT_GT(ShardStatsOf(*replica).pull_requests(), 0u);
  EXPECT_GT(ShardStatsOf(*replica).rows_pulled(), 0u);
  const std::string metrics = ReadFile(dir + "/metrics.json");
  const size_t at = metrics.find("\"test_auc\": ");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::stod(metrics.substr(at + 12)), 0.7) << metrics;
}

}  // namespace
}  // namespace ps::testing
