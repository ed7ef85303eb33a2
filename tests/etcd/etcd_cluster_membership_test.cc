// A job's shard count under etcd: a map without a count, shards joining a
// running job (in index order) and the last one leaving while workers push,
// and another shard coordinating once the coordinator is killed. Against
// Debian's etcd and real processes on loopback.

#include "base/wait_until.h"
#include "tests/etcd/etcd_cluster_fixture.h"
#include "tests/test_cluster.h"

namespace ps::testing {
namespace {

constexpr int kCountingDim = 2;
constexpr char kCountingTable[] = "counts";

// The row of `key` on the shard at `address`, and whether it stores it.
std::vector<float> StoredRow(const std::string& address, uint64_t key,
                             bool* stored) {
  auto admin = Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  GetRowRequest request;
  request.set_table(kCountingTable);
  request.set_key(key);
  GetRowResponse response;
  grpc::ClientContext context;
  const grpc::Status status = admin->GetRow(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  *stored = response.stored();
  return {response.values().begin(), response.values().end()};
}

// `map` as a release before maps held their shard count wrote it.
std::string JsonWithoutShardCount(const SlotMap& map) {
  std::string json = SlotMapToJson(map);
  const std::string count_field =
      absl::StrCat("\"num_shards\":", map.num_shards());
  const size_t at = json.find(count_field);
  EXPECT_NE(at, std::string::npos) << json;
  if (at == std::string::npos) return json;
  json.erase(at, count_field.size());
  if (json[at] == ',') {
    json.erase(at, 1);
  } else if (json[at - 1] == ',') {
    json.erase(at - 1, 1);
  }
  EXPECT_EQ(json.find("num_shards"), std::string::npos) << json;
  return json;
}

TEST_F(EtcdClusterTest, AJobMapWithoutItsShardCountGetsTheFlagsCount) {
  const std::string countless = JsonWithoutShardCount(SlotMap::Initial(2));
  ASSERT_OK(SlotMapFromJson(countless, 2).status()) << countless;
  const std::string key = absl::StrCat("/ps/", kJob, "/slot_map");
  ASSERT_OK(client_->Put(key, countless).status());

  auto shard0 = ServerProcess::Start(ShardFlags(0, 2));
  ASSERT_OK(shard0);
  absl::StatusOr<net::EtcdValue> stored = client_->Get(key);
  ASSERT_OK(stored);
  EXPECT_NE(stored->value.find("\"num_shards\":2"), std::string::npos)
      << stored->value;
  absl::StatusOr<SlotMap> map = JobMap(*client_);
  ASSERT_OK(map);
  EXPECT_EQ(map->num_shards(), 2u);
  EXPECT_TRUE(*map == SlotMap::Initial(2));
}

TEST_F(EtcdClusterTest,
       ADataDirsMapWithoutItsCountHasTheCountTheDirWasMadeFor) {
  std::vector<std::string> flags = ShardFlags(0, 2);
  auto shard0 = ServerProcess::Start(flags);
  ASSERT_OK(shard0);
  EXPECT_EQ((*shard0)->SignalAndWait(SIGTERM), 0);
  // A new job (etcd's key gone), and the dir's map as an older release
  // wrote it; --num_shards is now another count.
  ASSERT_OK(client_->DeletePrefix(absl::StrCat("/ps/", kJob, "/")).status());
  const std::string data_dir =
      flags[0].substr(std::string("--data_dir=").size());
  {
    std::ofstream file(data_dir + "/SLOT_MAP.json", std::ios::trunc);
    file << JsonWithoutShardCount(SlotMap::Initial(2));
  }
  int replaced = 0;
  for (std::string& flag : flags) {
    if (flag == "--num_shards=2") {
      flag = "--num_shards=3";
      ++replaced;
    }
  }
  ASSERT_EQ(replaced, 1);
  shard0 = ServerProcess::Start(flags);
  ASSERT_OK(shard0);
  absl::StatusOr<SlotMap> map = JobMap(*client_);
  ASSERT_OK(map);
  EXPECT_EQ(map->num_shards(), 2u);
  EXPECT_TRUE(*map == SlotMap::Initial(2));
}

TEST_F(EtcdClusterTest, AShardStartedWithTheCountItMakesJoinsANewJob) {
  // A job of 2 at its initial map (epoch 1); a third shard started with
  // --num_shards=3, as Kubernetes starts it once replicas say 3, on a new
  // data dir: its own initial map (of 3, epoch 1) gives way to the job's.
  auto shard0 = ServerProcess::Start(ShardFlags(0, 2));
  ASSERT_OK(shard0);
  auto shard1 = ServerProcess::Start(ShardFlags(1, 2));
  ASSERT_OK(shard1);
  auto shard2 = ServerProcess::Start(ShardFlags(2, 3));
  ASSERT_OK(shard2);
  ASSERT_TRUE(WaitForShardCount(*client_, 3, absl::Seconds(20)));
  absl::StatusOr<SlotMap> map = JobMap(*client_);
  ASSERT_OK(map);
  EXPECT_TRUE(*map == SlotMap::Initial(2).WithNumShards(3));
}

TEST_F(EtcdClusterTest, ShardsJoinInIndexOrder) {
  auto shard0 = ServerProcess::Start(ShardFlags(0, 1));
  ASSERT_OK(shard0);
  // Shard 2 of a 1-shard job waits for shard 1, then gives up.
  std::vector<std::string> early = {"--join_wait_s=1"};
  for (const std::string& flag : ShardFlags(2, 1)) early.push_back(flag);
  const std::string dir = FreshTestDir("etcd_join_order");
  EXPECT_NE(RunServerToExit(early, dir + "/early.log"), 0);
  EXPECT_NE(
      ReadFile(dir + "/early.log").find("shards join in index order (1 first)"),
      std::string::npos)
      << ReadFile(dir + "/early.log");
  absl::StatusOr<SlotMap> map = JobMap(*client_);
  ASSERT_OK(map);
  EXPECT_EQ(map->num_shards(), 1u);
  // Shard 1 joins, then shard 2.
  auto shard1 = ServerProcess::Start(ShardFlags(1, 1));
  ASSERT_OK(shard1);
  auto shard2 = ServerProcess::Start(ShardFlags(2, 1));
  ASSERT_OK(shard2);
  map = JobMap(*client_);
  ASSERT_OK(map);
  EXPECT_EQ(map->num_shards(), 3u);
  EXPECT_EQ(map->epoch(), 3u);
}

TEST_F(EtcdClusterTest, AShardJoinsLeavesAndJoinsAgainWhileTwoWorkersPush) {
  auto shard0 = ServerProcess::Start(ShardFlags(0, 2));
  ASSERT_OK(shard0);
  auto shard1 = ServerProcess::Start(ShardFlags(1, 2));
  ASSERT_OK(shard1);
  // Two workers that find the shards in etcd, and follow those that join.
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::vector<uint64_t>> keys(2);
  for (uint32_t w = 0; w < 2; ++w) {
    client::ClientOptions options;
    absl::StatusOr<std::vector<std::string>> found =
        cluster::FindShards(*client_, kJob, absl::Seconds(10));
    ASSERT_OK(found);
    options.servers = *found;
    options.find_shards = [this] {
      return cluster::FindShards(*client_, kJob, absl::Seconds(10));
    };
    options.incarnation = 100 + w;
    options.initial_backoff = absl::Milliseconds(20);
    options.retry_for = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<client::PsClient>> connected =
        client::PsClient::Connect(options);
    ASSERT_OK(connected);
    clients.push_back(*std::move(connected));
    for (int i = 0; i < 1500; ++i) keys[w].push_back(i * 7919 + 3 + w);
  }
  ASSERT_OK(clients[0]->DeclareTable(
      CountingTableSpec(kCountingTable, kCountingDim)));
  for (uint32_t w = 0; w < 2; ++w)
    ASSERT_OK(AddOne(*clients[w], kCountingTable, kCountingDim, keys[w], w));
  std::vector<std::unique_ptr<CountingPusher>> pushers;
  for (uint32_t w = 0; w < 2; ++w) {
    pushers.push_back(std::make_unique<CountingPusher>(
        clients[w].get(), keys[w],
        [w](client::PsClient& client, const std::vector<uint64_t>& k) {
          return AddOne(client, kCountingTable, kCountingDim, k, w);
        }));
  }
  const std::string dir = FreshTestDir("etcd_join");
  // Its stdout to <name>.out, its stderr to <name>.log.
  auto run_admin = [&](const std::vector<std::string>& command,
                       const std::string& name) {
    const AdminRun run = RunPsAdmin(
        AdminCluster::Etcd(etcd_->endpoint(), kJob, {"--move_page_rows=200"}),
        command, dir + "/" + name + ".log");
    std::ofstream(dir + "/" + name + ".out") << run.out;
    return run.exit_code;
  };

  // A third shard joins the running job, owning nothing, and rebalance
  // gives it a third of the slots while both workers push.
  auto shard2 = ServerProcess::Start(ShardFlags(2, 2));
  ASSERT_OK(shard2);
  // Its listening line comes once it registered and joined: a rebalance
  // started then counts it.
  absl::StatusOr<SlotMap> joined = JobMap(*client_);
  ASSERT_OK(joined);
  EXPECT_EQ(joined->num_shards(), 3u);
  ASSERT_TRUE(WaitForShardCount(*client_, 3, absl::Seconds(20)));
  // With a replica of its own.
  auto replica2 = ServerProcess::Start(
      {"--data_dir=" + FreshTestDir("shard2_replica"), "--replica_of_shard=2",
       "--etcd=" + etcd_->endpoint(), absl::StrCat("--job=", kJob),
       "--etcd_lease_s=2"});
  ASSERT_OK(replica2);
  // A checkpoint taken now covers it, though it holds no table yet.
  ASSERT_EQ(run_admin({"checkpoint", "--dir=" + dir + "/joined_checkpoint"},
                      "checkpoint"),
            0)
      << ReadFile(dir + "/checkpoint.log");
  ASSERT_EQ(run_admin({"rebalance"}, "rebalance"), 0)
      << ReadFile(dir + "/rebalance.log");
  EXPECT_NE(ReadFile(dir + "/rebalance.out")
                .find(absl::StrCat("rebalance over 3 shards: 0=")),
            std::string::npos)
      << ReadFile(dir + "/rebalance.out");
  EXPECT_NE(ReadFile(dir + "/rebalance.out")
                .find(absl::StrCat(" 2=", (*shard2)->address())),
            std::string::npos)
      << ReadFile(dir + "/rebalance.out");
  for (auto& pusher : pushers) pusher->WaitForMore(3);
  absl::StatusOr<SlotMap> three = JobMap(*client_);
  ASSERT_OK(three);
  EXPECT_EQ(three->num_shards(), 3u);
  for (uint32_t shard = 0; shard < 3; ++shard) {
    EXPECT_GE(three->SlotsOwned(0, kNumSlots - 1, shard), kNumSlots / 3);
    EXPECT_LE(three->SlotsOwned(0, kNumSlots - 1, shard), kNumSlots / 3 + 1);
  }
  // Both workers reach the new shard: they learnt of it from the map.
  for (auto& client : clients) EXPECT_EQ(client->num_shards(), 3);

  // drain-shard empties it, and the job is of 2 shards again: it may stop.
  ASSERT_EQ(run_admin({"--json", "drain-shard", "--shard=2"}, "drain"), 0)
      << ReadFile(dir + "/drain.log");
  EXPECT_NE(ReadFile(dir + "/drain.out").find("\"num_shards\":2"),
            std::string::npos)
      << ReadFile(dir + "/drain.out");
  absl::StatusOr<SlotMap> two = JobMap(*client_);
  ASSERT_OK(two);
  EXPECT_EQ(two->num_shards(), 2u);
  for (auto& pusher : pushers) pusher->WaitForMore(3);
  for (uint32_t w = 0; w < 2; ++w) {
    for (uint64_t key : keys[w]) {
      bool stored = true;
      StoredRow((*shard2)->address(), key, &stored);
      ASSERT_FALSE(stored) << "key " << key << " left on the drained shard";
    }
  }
  // Still registered, it is no longer one of the job's shards.
  EXPECT_EQ(Registered(), 3u);
  absl::StatusOr<std::vector<std::string>> found =
      cluster::FindShards(*client_, kJob, absl::Seconds(10));
  ASSERT_OK(found);
  EXPECT_EQ(*found, std::vector<std::string>(
                        {(*shard0)->address(), (*shard1)->address()}));
  EXPECT_EQ((*shard2)->SignalAndWait(SIGTERM), 0);
  // Its replica, once the registration is gone, has nothing to take over:
  // it stops (0) rather than registering as a shard the job no longer has.
  EXPECT_EQ((*replica2)->Wait(absl::Seconds(30)), 0);
  EXPECT_EQ(Registered(), 2u);
  for (auto& pusher : pushers) pusher->WaitForMore(3);

  // A shard 2 joins again, on another port and data dir: the workers,
  // which knew the old one, follow it there.
  auto rejoined = ServerProcess::Start(ShardFlags(2, 2));
  ASSERT_OK(rejoined);
  ASSERT_NE((*rejoined)->address(), (*shard2)->address());
  ASSERT_TRUE(WaitForShardCount(*client_, 3, absl::Seconds(20)));
  ASSERT_EQ(run_admin({"rebalance"}, "rebalance_again"), 0)
      << ReadFile(dir + "/rebalance_again.log");
  for (auto& pusher : pushers) pusher->WaitForMore(3);
  for (auto& pusher : pushers) ASSERT_OK(pusher->Stop());
  absl::StatusOr<SlotMap> final_map = JobMap(*client_);
  ASSERT_OK(final_map);
  EXPECT_EQ(final_map->num_shards(), 3u);
  EXPECT_GE(final_map->SlotsOwned(0, kNumSlots - 1, 2), kNumSlots / 3);

  // Every key holds each acknowledged push once (and the first), on its
  // owner by the final map only.
  const std::vector<std::string> addresses = {
      (*shard0)->address(), (*shard1)->address(), (*rejoined)->address()};
  for (uint32_t w = 0; w < 2; ++w) {
    const float pushes = static_cast<float>(pushers[w]->acknowledged() + 1);
    EXPECT_GT(pushes, 10.0f);
    for (uint64_t key : keys[w]) {
      for (uint32_t shard = 0; shard < 3; ++shard) {
        bool stored = false;
        const std::vector<float> row =
            StoredRow(addresses[shard], key, &stored);
        if (shard == final_map->ShardForKey(key)) {
          ASSERT_TRUE(stored) << "key " << key << " on shard " << shard;
          ASSERT_EQ(row, std::vector<float>(kCountingDim, pushes))
              << "key " << key << " of worker " << w << " on shard " << shard;
        } else {
          ASSERT_FALSE(stored) << "key " << key << " on shard " << shard;
        }
      }
    }
  }
}

// The coordinator elected in etcd: "<index> <address>", or "" for none.
std::string ElectedCoordinator(cluster::CoordinationStore& etcd) {
  absl::StatusOr<net::EtcdValue> held =
      etcd.Get(absl::StrCat("/ps/", kJob, "/coordinator"));
  return held.ok() ? held->value : "";
}

// The workers' clocks as `address` (the coordinator) answers; an empty
// answer when it does not (`code` says why).
WorkerClocksResponse ClocksOf(const std::string& address,
                              grpc::StatusCode* code = nullptr) {
  auto admin = Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  WorkerClocksResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const grpc::Status status =
      admin->WorkerClocks(&context, WorkerClocksRequest(), &response);
  if (code != nullptr) *code = status.error_code();
  return status.ok() ? response : WorkerClocksResponse();
}

// Both workers live at `address`, each at a clock of at least `clock`.
bool BothLiveAtLeast(const std::string& address, int64_t clock) {
  const WorkerClocksResponse clocks = ClocksOf(address);
  int live = 0;
  for (const auto& worker : clocks.workers())
    live += worker.live() && worker.clock() >= clock ? 1 : 0;
  return live == 2;
}

// The coordinator's shard killed with -9 while two workers train under a
// staleness bound: another shard takes the role over within the lease and
// a few seconds, learns the workers' clocks from their reports (not from
// zero), takes a checkpoint's cut with both of them, and training finishes.
TEST_F(EtcdClusterTest, AnotherShardCoordinatesWhenTheCoordinatorIsKilled) {
  TestClusterOptions options;
  options.shards = 2;
  options.running_etcd = etcd_.get();
  options.job = kJob;
  absl::StatusOr<std::unique_ptr<TestCluster>> started =
      TestCluster::Start(FreshTestDir("etcd_takeover"), options);
  ASSERT_OK(started);
  TestCluster& cluster = **started;
  WaitUntil([&] { return !ElectedCoordinator(*client_).empty(); },
            absl::Seconds(10), absl::Milliseconds(50));
  const std::string first = ElectedCoordinator(*client_);
  ASSERT_FALSE(first.empty());
  const int leader = first[0] - '0';
  ASSERT_TRUE(leader == 0 || leader == 1) << first;
  EXPECT_EQ(first, absl::StrCat(leader, " ", cluster.shard(leader).address()));
  // The other shard does not answer as a coordinator.
  grpc::StatusCode code = grpc::StatusCode::OK;
  ClocksOf(cluster.shard(1 - leader).address(), &code);
  EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE);
  ClocksOf(cluster.shard(leader).address(), &code);
  EXPECT_EQ(code, grpc::StatusCode::OK);

  const std::string& dir = cluster.dir();
  constexpr int kLines = 60000;
  ASSERT_EQ(RunToCompletion({BinaryPath("worker/datagen/clicklog_gen"),
                             "--out=" + dir + "/train.tsv",
                             absl::StrCat("--lines=", kLines)},
                            dir + "/gen.log"),
            0);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    auto worker = cluster.StartWorker(
        w, 2,
        {"--train=" + dir + "/train.tsv", "--staleness=2", "--lease_ms=3000",
         "--epochs=3", "--batch_size=200", "--embedding_dim=4", "--hidden=8",
         "--device=cpu",
         absl::StrCat("--metrics_out=", dir, "/metrics", w, ".json")});
    ASSERT_OK(worker);
    workers.push_back(*std::move(worker));
  }
  const std::string leader_address = cluster.shard(leader).address();
  ASSERT_TRUE(WaitUntil([&] { return BothLiveAtLeast(leader_address, 20); },
                        absl::Seconds(60), absl::Milliseconds(50)))
      << ReadFile(cluster.WorkerLog(0));
  int64_t clock_before_kill = 0;
  const WorkerClocksResponse before = ClocksOf(leader_address);
  for (const auto& worker : before.workers())
    clock_before_kill = std::max(clock_before_kill, worker.clock());

  const absl::Time killed = absl::Now();
  cluster.StopShard(leader, SIGKILL);
  const int follower = 1 - leader;
  const std::string next =
      absl::StrCat(follower, " ", cluster.shard(follower).address());
  WaitUntil([&] { return ElectedCoordinator(*client_) == next; },
            absl::Seconds(20), absl::Milliseconds(20));
  ASSERT_EQ(ElectedCoordinator(*client_), next);
  const absl::Duration takeover = absl::Now() - killed;
  // The lease (2 s) and a few seconds.
  EXPECT_LT(takeover, absl::Seconds(6)) << takeover;
  std::printf("coordinator taken over in %s\n",
              absl::FormatDuration(takeover).c_str());

  // The killed shard back on its data dir and port: its rows come back from
  // its push log, and it does not take the role back.
  ASSERT_OK(cluster.RestartShard(leader));

  // Both workers report to the new coordinator, which goes on from their
  // real clocks.
  const std::string coordinator = cluster.shard(follower).address();
  ASSERT_TRUE(
      WaitUntil([&] { return BothLiveAtLeast(coordinator, clock_before_kill); },
                absl::Seconds(60), absl::Milliseconds(50)))
      << ClocksOf(coordinator).DebugString();
  // A cut the new coordinator takes holds both workers.
  const AdminRun checkpointed =
      cluster.Admin({"checkpoint", "--dir=" + dir + "/ckpt"});
  EXPECT_EQ(checkpointed.exit_code, 0) << checkpointed.log;
  // drop-table asks the elected coordinator whether workers train (the
  // other shard does not know them).
  const AdminRun dropped =
      cluster.Admin({"drop-table", "--table=no_such_table"});
  EXPECT_NE(dropped.exit_code, 0);
  EXPECT_NE(dropped.log.find("hold leases"), std::string::npos) << dropped.log;

  int64_t examples = 0;
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(workers[w]->Wait(absl::Minutes(5)), 0)
        << ReadFile(cluster.WorkerLog(w));
    examples += static_cast<int64_t>(Metric(
        ReadFile(absl::StrCat(dir, "/metrics", w, ".json")), "examples"));
  }
  EXPECT_EQ(examples, 3 * kLines);
  int finished = 0;
  const WorkerClocksResponse after = ClocksOf(coordinator);
  for (const auto& worker : after.workers())
    finished += worker.finished() ? 1 : 0;
  EXPECT_EQ(finished, 2) << after.DebugString();
  EXPECT_EQ(ElectedCoordinator(*client_), next);
  EXPECT_NE(ReadFile(cluster.WorkerLog(0)).find("the clock coordinator is now"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::testing
