// Shards that register in etcd (ps_server --etcd --job) and the binaries
// that find them there instead of --servers (ps_worker, ps_admin), against
// Debian's etcd and real processes on loopback.
#include "base/wait_until.h"
#include "tests/etcd/etcd_cluster_fixture.h"
#include "tests/test_cluster.h"

namespace ps::testing {
namespace {

TEST_F(EtcdClusterTest, AWorkerAndPsAdminFindTheShardsInEtcd) {
  auto shard0 = ServerProcess::Start(ShardFlags(0, 2));
  ASSERT_OK(shard0);
  auto shard1 = ServerProcess::Start(ShardFlags(1, 2));
  ASSERT_OK(shard1);
  ASSERT_EQ(Registered(), 2u);
  absl::StatusOr<net::EtcdValue> record =
      client_->Get(absl::StrCat("/ps/", kJob, "/shards/1"));
  ASSERT_OK(record);
  EXPECT_EQ(record->value, (*shard1)->address() + " 2");

  const std::string dir = FreshTestDir("etcd_training");
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + dir + "/train.tsv", "--lines=4000"},
                            dir + "/gen.log"),
            0);
  const int trained = RunToCompletion(
      PsWorkerArgv(
          {"--etcd=" + etcd_->endpoint(), absl::StrCat("--job=", kJob)},
          {"--train=" + dir + "/train.tsv", "--batch_size=500",
           "--embedding_dim=4", "--hidden=8", "--device=cpu",
           "--metrics_out=" + dir + "/metrics.json"}),
      dir + "/worker.log");
  ASSERT_EQ(trained, 0) << ReadFile(dir + "/worker.log");
  EXPECT_EQ(Metric(ReadFile(dir + "/metrics.json"), "examples"), 4000);
  EXPECT_NE(ReadFile(dir + "/worker.log").find("from etcd"), std::string::npos);

  // ps_admin sums both shards' answers.
  const int stats =
      RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                 {"stats", "--json", "--interval_s=0"}, dir + "/admin.log")
          .exit_code;
  EXPECT_EQ(stats, 0) << ReadFile(dir + "/admin.log");

  // Both ways of naming the shards at once is a bad command, even with
  // --servers at its default.
  EXPECT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"--servers=127.0.0.1:50051", "stats"},
                       dir + "/admin_both.log")
                .exit_code,
            64);
  EXPECT_EQ(RunToCompletion(PsWorkerArgv({"--etcd=" + etcd_->endpoint(),
                                          absl::StrCat("--job=", kJob)},
                                         {"--servers=" + (*shard0)->address(),
                                          "--train=" + dir + "/train.tsv"}),
                            dir + "/both.log"),
            64);
  EXPECT_EQ(RunToCompletion(
                PsWorkerArgv({"--etcd=" + etcd_->endpoint(), "--job=Bad Name"},
                             {"--train=" + dir + "/train.tsv"}),
                dir + "/bad_job.log"),
            64);
}

TEST_F(EtcdClusterTest, TheWorkerTokenIsNotSentInPlaintextToShardsFoundInEtcd) {
  // A shard of another host, as etcd names it (nothing is dialled: the
  // check comes first).
  ASSERT_OK(client_->Put("/ps/remote/shards/0", "10.1.2.3:50051 1"));
  const std::string dir = FreshTestDir("etcd_token");
  {
    std::ofstream token(dir + "/token");
    token << "worker-secret\n";
  }
  EXPECT_EQ(RunToCompletion(
                PsWorkerArgv({"--etcd=" + etcd_->endpoint(), "--job=remote"},
                             {"--worker_token_file=" + dir + "/token",
                              "--train=" + dir + "/none.tsv", "--retry_for_s=1",
                              "--rpc_timeout_s=1"}),
                dir + "/worker.log", absl::Seconds(60)),
            64);
  EXPECT_NE(ReadFile(dir + "/worker.log").find("in plaintext to 10.1.2.3"),
            std::string::npos)
      << ReadFile(dir + "/worker.log");
}

TEST_F(EtcdClusterTest, ARecordOfAnEarlierShardCountIsWaitedOut) {
  // Left by a 3-shard run of the job, its lease not yet run out.
  absl::StatusOr<int64_t> lease = client_->GrantLease(absl::Seconds(2));
  ASSERT_OK(lease);
  ASSERT_OK(client_->Put(absl::StrCat("/ps/", kJob, "/shards/2"),
                         "127.0.0.1:1 3", *lease));
  auto shard0 = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(shard0);
  const std::string dir = FreshTestDir("etcd_stale");
  EXPECT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"--etcd_wait_s=20", "stats", "--interval_s=0"},
                       dir + "/admin.log")
                .exit_code,
            0)
      << ReadFile(dir + "/admin.log");
}

TEST_F(EtcdClusterTest, AShardLeavesEtcdAtOnceWhenStoppedAndWithItsLease) {
  auto shard0 = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(shard0);
  ASSERT_EQ(Registered(), 1u);
  // A second process for the same index while the first lives is refused,
  // once it has waited out a lease (2 s here) in case the first had died.
  const std::string twin_log = FreshTestDir("twin") + "/shard.log";
  EXPECT_EQ(RunServerToExit(ShardFlags(0, 1), twin_log, absl::Seconds(30)), 70);
  EXPECT_NE(ReadFile(twin_log).find("running twice"), std::string::npos)
      << ReadFile(twin_log);
  EXPECT_EQ(Registered(), 1u);
  // Stopped: the record goes with the revoked lease, at once.
  EXPECT_EQ((*shard0)->SignalAndWait(SIGTERM), 0);
  EXPECT_EQ(Registered(), 0u);
  // Killed: it goes when the 2 s lease runs out.
  auto again = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(again);
  ASSERT_EQ(Registered(), 1u);
  (*again)->SignalAndWait(SIGKILL);
  const absl::Time killed = absl::Now();
  EXPECT_EQ(Registered(), 1u);  // not yet
  EXPECT_TRUE(WaitForRegistered(0, absl::Seconds(20)));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  // One started again right after a kill -9 waits the dead one's lease out
  // and registers.
  auto killed_again = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(killed_again);
  (*killed_again)->SignalAndWait(SIGKILL);
  auto restarted = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(restarted);
  EXPECT_EQ(Registered(), 1u);
  EXPECT_EQ((*restarted)->SignalAndWait(SIGTERM), 0);
  // With no shard registered, ps_admin waits --etcd_wait_s, then says so.
  const std::string dir = FreshTestDir("etcd_none");
  EXPECT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"--etcd_wait_s=1", "stats"}, dir + "/admin.log")
                .exit_code,
            69);
  EXPECT_NE(ReadFile(dir + "/admin.log")
                .find("shards 0 of 1 of job ctr are not registered"),
            std::string::npos)
      << ReadFile(dir + "/admin.log");
}

// The slot map of `address`, over its admin API.
SlotMapSpec SlotMapOf(const std::string& address) {
  auto admin = Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  GetSlotMapResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  EXPECT_TRUE(admin->GetSlotMap(&context, GetSlotMapRequest(), &response).ok());
  return response.slot_map();
}

grpc::StatusCode SetSlotMapOf(const std::string& address,
                              uint64_t expected_epoch, const SlotMap& map) {
  auto admin = Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  SetSlotMapRequest request;
  request.set_expected_slot_map_epoch(expected_epoch);
  *request.mutable_slot_map() = map.ToSpec();
  // By hand: slots in no move go with no rows.
  request.set_allow_without_move(true);
  SetSlotMapResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return admin->SetSlotMap(&context, request, &response).error_code();
}

TEST_F(EtcdClusterTest, TheSlotMapIsTheJobsInEtcdAndChangesByCompareAndSwap) {
  auto shard0 = ServerProcess::Start(ShardFlags(0, 2));
  ASSERT_OK(shard0);
  std::vector<std::string> shard1_flags = ShardFlags(1, 2);
  auto shard1 = ServerProcess::Start(shard1_flags);
  ASSERT_OK(shard1);
  // Both hold a table, so that their maps place rows: a data dir that
  // holds none takes whichever map etcd has.
  {
    client::ClientOptions options;
    options.servers = {(*shard0)->address(), (*shard1)->address()};
    absl::StatusOr<std::unique_ptr<client::PsClient>> declaring =
        client::PsClient::Connect(options);
    ASSERT_OK(declaring);
    ASSERT_OK((*declaring)->DeclareTable(CountingTableSpec("declared", 2)));
  }
  const std::string key = absl::StrCat("/ps/", kJob, "/slot_map");
  absl::StatusOr<net::EtcdValue> stored = client_->Get(key);
  ASSERT_OK(stored);
  EXPECT_NE(stored->value.find("\"epoch\":\"1\""), std::string::npos)
      << stored->value;

  // A change asked of shard 0 reaches shard 1 through etcd.
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(0, 999, 1);
  ASSERT_EQ(SetSlotMapOf((*shard0)->address(), 1, moved), grpc::StatusCode::OK);
  EXPECT_TRUE(
      WaitUntil([&] { return SlotMapOf((*shard1)->address()).epoch() == 2; },
                absl::Seconds(10), absl::Milliseconds(20)));
  // A change from the old epoch is refused whichever shard is asked; the
  // same change again is none.
  EXPECT_EQ(SetSlotMapOf((*shard1)->address(), 1,
                         SlotMap::Initial(2).WithSlotsMoved(5, 5, 0)),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(SetSlotMapOf((*shard1)->address(), 1, moved), grpc::StatusCode::OK);
  // A map of more shards than the job has never reaches etcd (workers
  // would wait for shards that are not there): a shard joins by starting.
  EXPECT_EQ(SetSlotMapOf((*shard0)->address(), 2,
                         moved.WithNumShards(6).WithSlotsMoved(7, 7, 5)),
            grpc::StatusCode::FAILED_PRECONDITION);
  stored = client_->Get(key);
  ASSERT_OK(stored);
  EXPECT_NE(stored->value.find("\"epoch\":\"2\""), std::string::npos)
      << stored->value;

  const std::string dir = FreshTestDir("etcd_slots");
  const AdminRun slots = RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                                    {"slots"}, dir + "/slots.log");
  ASSERT_EQ(slots.exit_code, 0) << slots.log;
  EXPECT_EQ(slots.out.rfind("slot map epoch 2, 16384 slots\n", 0), 0u)
      << slots.out;

  // A shard started on a new data dir takes the job's map before it serves.
  EXPECT_EQ((*shard1)->SignalAndWait(SIGTERM), 0);
  auto fresh = ServerProcess::Start(ShardFlags(1, 2));
  ASSERT_OK(fresh);
  EXPECT_EQ(SlotMapOf((*fresh)->address()).epoch(), 2u);
  EXPECT_EQ(SlotMapOf((*fresh)->address()).ranges(0).last(), 999u);
  EXPECT_EQ((*fresh)->SignalAndWait(SIGTERM), 0);

  // One whose data dir holds another map of etcd's epoch refuses to start.
  ASSERT_OK(client_->Put(key,
                         "{\"epoch\":\"2\",\"ranges\":[{\"first\":0,"
                         "\"last\":16383,\"shard\":0}]}"));
  EXPECT_EQ(RunServerToExit(shard1_flags, dir + "/same.log", absl::Seconds(30)),
            70);
  EXPECT_NE(ReadFile(dir + "/same.log").find("both at epoch 2 but differ"),
            std::string::npos)
      << ReadFile(dir + "/same.log");

  // One whose data dir is ahead of etcd (etcd's state lost) refuses to
  // start rather than serve by either.
  ASSERT_OK(client_->Put(key,
                         "{\"epoch\":\"1\",\"ranges\":[{\"first\":0,"
                         "\"last\":16383,\"shard\":0}]}"));
  const std::string log = dir + "/ahead.log";
  EXPECT_EQ(RunServerToExit(shard1_flags, log, absl::Seconds(30)), 70);
  EXPECT_NE(ReadFile(log).find("newer than the job's map in etcd"),
            std::string::npos)
      << ReadFile(log);
}

TEST_F(EtcdClusterTest, SlotsMoveUnderEtcdAndEveryShardFollows) {
  std::vector<std::string> shard0_flags = ShardFlags(0, 2);
  auto shard0 = ServerProcess::Start(shard0_flags);
  ASSERT_OK(shard0);
  const std::vector<std::string> shard1_flags = ShardFlags(1, 2);
  auto shard1 = ServerProcess::Start(shard1_flags);
  ASSERT_OK(shard1);
  const std::string dir = FreshTestDir("etcd_move");
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + dir + "/train.tsv", "--lines=3000"},
                            dir + "/gen.log"),
            0);
  const std::vector<std::string> worker = PsWorkerArgv(
      {"--etcd=" + etcd_->endpoint(), absl::StrCat("--job=", kJob)},
      {"--train=" + dir + "/train.tsv", "--batch_size=500", "--embedding_dim=4",
       "--hidden=8", "--device=cpu"});
  ASSERT_EQ(RunToCompletion(worker, dir + "/worker.log"), 0)
      << ReadFile(dir + "/worker.log");
  const AdminRun drain =
      RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                 {"drain-shard", "--shard=1"}, dir + "/drain.log");
  ASSERT_EQ(drain.exit_code, 0) << drain.log;
  // The job's map in etcd and both shards': shard 1 owns nothing, and, the
  // last shard, it left the job (epoch 3), which has one shard now.
  const SlotMap drained = SlotMap::Initial(2)
                              .WithSlotsMovedFrom(0, kNumSlots - 1, 1, 0)
                              .WithNumShards(1);
  absl::StatusOr<net::EtcdValue> stored =
      client_->Get(absl::StrCat("/ps/", kJob, "/slot_map"));
  ASSERT_OK(stored);
  EXPECT_NE(stored->value.find("\"epoch\":\"3\""), std::string::npos)
      << stored->value;
  EXPECT_NE(drain.out.find("shard 1 left the job, which has 1 shards now"),
            std::string::npos)
      << drain.out;
  // It says which shards it balanced over, first.
  EXPECT_EQ(drain.out.find(absl::StrCat(
                "drain-shard over 2 shards: 0=", (*shard0)->address(),
                " 1=", (*shard1)->address(), "\n")),
            0u)
      << drain.out;
  WaitUntil([&] { return SlotMapOf((*shard1)->address()).epoch() == 3; },
            absl::Seconds(10), absl::Milliseconds(20));
  absl::StatusOr<SlotMap> on0 =
      SlotMap::FromSpec(SlotMapOf((*shard0)->address()));
  absl::StatusOr<SlotMap> on1 =
      SlotMap::FromSpec(SlotMapOf((*shard1)->address()));
  ASSERT_OK(on0);
  ASSERT_OK(on1);
  EXPECT_TRUE(*on0 == drained);
  EXPECT_TRUE(*on1 == drained);
  // It stops; training goes on against the new map, on shard 0 alone.
  EXPECT_EQ((*shard1)->SignalAndWait(SIGTERM), 0);
  ASSERT_EQ(RunToCompletion(worker, dir + "/worker2.log"), 0)
      << ReadFile(dir + "/worker2.log");
  // Started again on its data dir, it joins the job again (epoch 4), and
  // rebalance gives it its share back.
  shard1 = ServerProcess::Start(shard1_flags);
  ASSERT_OK(shard1);
  ASSERT_TRUE(WaitForShardCount(*client_, 2, absl::Seconds(20)));
  ASSERT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"rebalance"}, dir + "/rebalance.log")
                .exit_code,
            0)
      << ReadFile(dir + "/rebalance.log");
  absl::StatusOr<SlotMap> balanced =
      SlotMap::FromSpec(SlotMapOf((*shard0)->address()));
  ASSERT_OK(balanced);
  EXPECT_EQ(balanced->epoch(), 5u);
  EXPECT_EQ(balanced->SlotsOwned(0, kNumSlots - 1, 1), kNumSlots / 2);

  // Started again with another --num_shards (Kubernetes passes the
  // StatefulSet's replicas), shard 0 serves its data dir under the job's
  // map: under etcd the flag is only the job's first count.
  EXPECT_EQ((*shard0)->SignalAndWait(SIGTERM), 0);
  int replaced = 0;
  for (std::string& flag : shard0_flags) {
    if (flag == "--num_shards=2") {
      flag = "--num_shards=3";
      ++replaced;
    }
  }
  ASSERT_EQ(replaced, 1);
  shard0 = ServerProcess::Start(shard0_flags);
  ASSERT_OK(shard0);
  absl::StatusOr<SlotMap> restarted =
      SlotMap::FromSpec(SlotMapOf((*shard0)->address()));
  ASSERT_OK(restarted);
  EXPECT_TRUE(*restarted == *balanced);
  ASSERT_EQ(RunToCompletion(worker, dir + "/worker3.log"), 0)
      << ReadFile(dir + "/worker3.log");
}

}  // namespace
}  // namespace ps::testing
