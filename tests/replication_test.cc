// Replicas against real ps_server processes (issue 28): a replica copied
// while pushes go on holds every push its primary acknowledged under
// --replication=sync, even when the primary is killed while the replica
// was paused; under async, pushes run at most --max_replication_lag_records
// ahead of a paused replica, which then catches up to the primary's rows;
// a replica killed costs the primary nothing, and one started again in its
// data dir copies afresh.

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
#include "tests/server_process.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

constexpr int kDim = 4;
constexpr char kTable[] = "t";

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (uint64_t i = 0; i < 2000; ++i) keys_.push_back(i * 2654435761ULL);
  }

  std::unique_ptr<ServerProcess> StartPrimary(
      const std::vector<std::string>& flags) {
    primary_dir_ = FreshTestDir(name_ + "_primary");
    std::vector<std::string> all = {"--data_dir=" + primary_dir_,
                                    "--cache_mb=64"};
    all.insert(all.end(), flags.begin(), flags.end());
    auto started =
        ServerProcess::Start(all, absl::Seconds(60), primary_dir_ + ".log");
    EXPECT_OK(started);
    return started.ok() ? *std::move(started) : nullptr;
  }

  std::unique_ptr<ServerProcess> StartReplica(const ServerProcess& primary,
                                              bool fresh_dir = true) {
    return StartReplicaOf(primary.address(), fresh_dir);
  }
  // A replica that reaches its primary at `address` (a proxy's).
  std::unique_ptr<ServerProcess> StartReplicaOf(
      const std::string& address, bool fresh_dir = true,
      const std::vector<std::string>& flags = {}) {
    if (fresh_dir) replica_dir_ = FreshTestDir(name_ + "_replica");
    std::vector<std::string> all = {"--data_dir=" + replica_dir_,
                                    "--replica_of=" + address, "--cache_mb=64"};
    all.insert(all.end(), flags.begin(), flags.end());
    auto started =
        ServerProcess::Start(all, absl::Seconds(120),
                             absl::StrCat(replica_dir_, ".log", ++replicas_));
    EXPECT_OK(started);
    return started.ok() ? *std::move(started) : nullptr;
  }

  // A client of `server` that gives up on a dead shard after `retry_for`.
  std::unique_ptr<client::PsClient> Connect(const ServerProcess& server,
                                            absl::Duration retry_for,
                                            bool declare = true) {
    client::ClientOptions options;
    options.servers = {server.address()};
    options.initial_backoff = absl::Milliseconds(20);
    options.retry_for = retry_for;
    absl::StatusOr<std::unique_ptr<client::PsClient>> client =
        client::PsClient::Connect(options);
    EXPECT_OK(client);
    if (!client.ok()) return nullptr;
    if (declare) {
      EXPECT_OK((*client)->DeclareTable(CountingTableSpec(kTable, kDim)));
    }
    return *std::move(client);
  }

  std::unique_ptr<CountingPusher> StartPushing(client::PsClient* client) {
    return std::make_unique<CountingPusher>(
        client, keys_, [](client::PsClient& c, const std::vector<uint64_t>& k) {
          return AddOne(c, kTable, kDim, k, /*worker=*/0);
        });
  }

  static ShardStatsResponse::Replication Replication(
      const ServerProcess& server) {
    auto admin = Admin::NewStub(server.channel());
    ShardStatsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(
        admin->ShardStats(&context, ShardStatsRequest(), &response).ok());
    return response.replication();
  }

  // Waits until `done(primary's replication stats)`, up to a minute.
  static bool WaitFor(
      const ServerProcess& server,
      const std::function<bool(const ShardStatsResponse::Replication&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (absl::Now() < deadline) {
      if (done(Replication(server))) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // The first float of every 50th key's row on `server` (0 where none).
  std::vector<float> Values(const ServerProcess& server) {
    return CountedValues(server.channel(), kTable, keys_);
  }

  std::string name_;
  std::string primary_dir_;
  std::string replica_dir_;
  int replicas_ = 0;
  std::vector<uint64_t> keys_;
};

TEST_F(ReplicationTest, SyncLosesNoAcknowledgedPushWhenThePrimaryDies) {
  // Pushes go on before a replica is copied (with none in sync).
  std::unique_ptr<ServerProcess> primary =
      StartPrimary({"--replication=sync", "--min_in_sync_replicas=0"});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(2));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<CountingPusher> pusher = StartPushing(client.get());
  pusher->WaitForMore(20);
  // Acknowledged with nobody else holding them, and counted so.
  EXPECT_GT(Replication(*primary).pushes_without_replica(), 0u);

  // Copied while the pushes go on.
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1;
  }));
  pusher->WaitForMore(20);

  // The replica pauses: under sync the pushes wait for it, so none is
  // acknowledged that it lacks when the primary dies.
  ASSERT_EQ(kill(replica->pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(1));
  primary->SignalAndWait(SIGKILL);
  ASSERT_EQ(kill(replica->pid(), SIGCONT), 0);
  EXPECT_FALSE(pusher->Stop().ok());
  const int acknowledged = pusher->acknowledged();
  ASSERT_GE(acknowledged, 40);

  // Every acknowledged push, once (one more may have been applied without
  // its answer arriving).
  for (float value : Values(*replica)) {
    EXPECT_GE(value, acknowledged);
    EXPECT_LE(value, acknowledged + 1);
  }
  AddChaosRow(
      "--replication=sync: the replica paused (a slow replica), then the "
      "primary killed (kill -9)",
      "pushes waited for the replica; then the primary was gone",
      Values(*replica), acknowledged,
      "the replica holds every acknowledged push (and the one in flight at "
      "the kill, if applied)",
      /*in_flight=*/1);
  EXPECT_EQ(Replication(*replica).role(),
            absl::StrCat("replica of ", primary->address()));

  // Promoted: its data dir started as a primary keeps every row and takes
  // pushes.
  const std::vector<float> held = Values(*replica);
  replica->SignalAndWait(SIGTERM);
  auto promoted =
      ServerProcess::Start({"--data_dir=" + replica_dir_, "--cache_mb=64"},
                           absl::Seconds(60), replica_dir_ + ".promoted.log");
  ASSERT_OK(promoted);
  EXPECT_EQ(Values(**promoted), held);
  EXPECT_EQ(Replication(**promoted).role(), "primary");
  EXPECT_FALSE(std::filesystem::exists(replica_dir_ + "/REPLICA_OF"));
  std::unique_ptr<client::PsClient> promoted_client =
      Connect(**promoted, absl::Seconds(30));
  ASSERT_NE(promoted_client, nullptr);
  ASSERT_OK(AddOne(*promoted_client, kTable, kDim, keys_, 0));
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(Values(**promoted)[i], held[i] + 1);
  }
}

TEST_F(ReplicationTest, SyncPushesWaitForANetworkSlowReplicaAndLoseNothing) {
  std::unique_ptr<ServerProcess> primary = StartPrimary({"--replication=sync"});
  ASSERT_NE(primary, nullptr);
  // The replica reaches its primary over a link 25 ms slow each way.
  constexpr absl::Duration kLinkDelay = absl::Milliseconds(25);
  absl::StatusOr<std::unique_ptr<DelayProxy>> link =
      DelayProxy::Start(primary->address(), kLinkDelay);
  ASSERT_OK(link);
  std::unique_ptr<ServerProcess> replica = StartReplicaOf((*link)->address());
  ASSERT_NE(replica, nullptr);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1;
  }));
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(2));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<CountingPusher> pusher = StartPushing(client.get());
  pusher->WaitForMore(5);

  // One client pushing: each push is answered only once the replica has
  // it, which takes the entry's way to the replica and the replica's word
  // back: at least twice the link's delay.
  const int before = pusher->acknowledged();
  const absl::Time began = absl::Now();
  pusher->WaitForMore(20);
  // Counted before the clock is read: a push acknowledged between the two
  // would make the bound stricter than it is.
  const int pushes = pusher->acknowledged() - before;
  const absl::Duration took = absl::Now() - began;
  std::printf("a push with a replica 25 ms away each way: %s\n",
              absl::FormatDuration(took / pushes).c_str());
  // The first may have been on its way already when the clock started.
  EXPECT_GE(took, (pushes - 1) * 2 * kLinkDelay);

  // Nothing acknowledged is lost with the primary.
  primary->SignalAndWait(SIGKILL);
  EXPECT_FALSE(pusher->Stop().ok());
  const int acknowledged = pusher->acknowledged();
  for (float value : Values(*replica)) {
    EXPECT_GE(value, acknowledged);
    EXPECT_LE(value, acknowledged + 1);
  }
  AddChaosRow(
      "--replication=sync: the replica behind a link 25 ms slow each way, "
      "then the primary killed (kill -9)",
      absl::StrCat("pushes slowed to ", absl::FormatDuration(took / pushes),
                   " each (one client)"),
      Values(*replica), acknowledged,
      "the replica holds every acknowledged push (and the one in flight at "
      "the kill, if applied)",
      /*in_flight=*/1);
}

TEST_F(ReplicationTest, AsyncRunsAtMostTheLagAheadOfAPausedReplica) {
  std::unique_ptr<ServerProcess> primary =
      StartPrimary({"--replication=async", "--max_replication_lag_records=5"});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(30));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<CountingPusher> pusher = StartPushing(client.get());
  pusher->WaitForMore(10);
  std::unique_ptr<ServerProcess> replica = StartReplica(*primary);
  ASSERT_NE(replica, nullptr);
  // Pushes ran ahead while the replica copied (a copy never holds them
  // back); once it reads the feed they keep within the bound of it.
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1 && r.lag_entries() <= 6;
  }));

  ASSERT_EQ(kill(replica->pid(), SIGSTOP), 0);
  // Long enough for the lag to reach its bound, on a busy machine too.
  absl::SleepFor(absl::Seconds(1));
  const int before = pusher->acknowledged();
  absl::SleepFor(absl::Seconds(1));
  const int during = pusher->acknowledged() - before;
  const ShardStatsResponse::Replication paused = Replication(*primary);
  ASSERT_EQ(kill(replica->pid(), SIGCONT), 0);
  // At most the bound (plus the push in flight) beyond the replica.
  EXPECT_LE(during, 1);
  EXPECT_LE(paused.lag_entries(), 6u);
  EXPECT_GE(paused.lag_entries(), 1u);
  EXPECT_EQ(paused.mode(), "async");

  pusher->WaitForMore(20);
  ASSERT_OK(pusher->Stop());
  const int acknowledged = pusher->acknowledged();
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.lag_entries() == 0;
  }));
  const std::vector<float> expected(
      keys_.size() / 50 + (keys_.size() % 50 != 0),
      static_cast<float>(acknowledged));
  EXPECT_EQ(Values(*primary), expected);
  EXPECT_EQ(Values(*replica), expected);
}

TEST_F(ReplicationTest, ACopyFarBehindIsTakenAgainAndPushesNeverWaitForIt) {
  // A lag bound of 5 entries, which pushes waited on while a replica
  // copied; the feed may keep 1 MiB for a replica behind.
  std::unique_ptr<ServerProcess> primary =
      StartPrimary({"--replication=async", "--max_replication_lag_records=5",
                    "--max_replication_lag_mb=1"});
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<client::PsClient> client =
      Connect(*primary, absl::Seconds(30));
  ASSERT_NE(client, nullptr);
  std::unique_ptr<CountingPusher> pusher = StartPushing(client.get());
  pusher->WaitForMore(10);
  // The replica copies over a slow link: each piece of the copy takes
  // 0.4 s, so the copy lasts seconds while the pushes go on.
  absl::StatusOr<std::unique_ptr<DelayProxy>> link =
      DelayProxy::Start(primary->address(), absl::Milliseconds(200));
  ASSERT_OK(link);
  const int before_copy = pusher->acknowledged();
  std::unique_ptr<ServerProcess> replica;
  std::thread start_replica([&] {
    replica = StartReplicaOf((*link)->address(), true,
                             {"--replica_copy_attempts=50"});
  });
  // The copy falls 1 MiB behind and the primary drops it, rather than the
  // pushes waiting for it. (No ASSERT before the join below.)
  EXPECT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_dropped_behind() >= 1;
  }));
  const ShardStatsResponse::Replication dropped = Replication(*primary);
  EXPECT_LE(dropped.feed_bytes(), 2u << 20);
  // 2000 keys a push: 1 MiB is a few dozen pushes, all acknowledged while
  // the replica was copying.
  EXPECT_GE(pusher->acknowledged() - before_copy, 20);
  // Once the pushes stop, a copy is taken whole and followed.
  EXPECT_OK(pusher->Stop());
  start_replica.join();
  ASSERT_NE(replica, nullptr);
  ASSERT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1 && r.lag_entries() == 0;
  }));
  const int acknowledged = pusher->acknowledged();
  const std::vector<float> expected(
      keys_.size() / 50 + (keys_.size() % 50 != 0),
      static_cast<float>(acknowledged));
  EXPECT_EQ(Values(*primary), expected);
  EXPECT_EQ(Values(*replica), expected);
  EXPECT_NE(ReadFile(replica_dir_ + ".log" + std::to_string(replicas_))
                .find("copying again"),
            std::string::npos);
}

// A move's rows enter the target's replication feed as pushes do, and
// wait for room in it as pushes do: with the target's replica reading over
// a slow link, the feed never holds much more than its bound
// (--max_replication_lag_mb=1) while 5 MB of rows move in pages of 256 KB,
// and the replica holds every row once the move is done.
TEST_F(ReplicationTest, AMovesRowsWaitForRoomInTheTargetsFeed) {
  const std::string source_dir = FreshTestDir(name_ + "_source");
  auto source = ServerProcess::Start(
      {"--data_dir=" + source_dir, "--num_shards=2", "--shard_index=0"},
      absl::Seconds(60), source_dir + ".log");
  ASSERT_OK(source);
  std::unique_ptr<ServerProcess> target =
      StartPrimary({"--num_shards=2", "--shard_index=1", "--replication=async",
                    "--max_replication_lag_mb=1"});
  ASSERT_NE(target, nullptr);
  absl::StatusOr<std::unique_ptr<DelayProxy>> link =
      DelayProxy::Start(target->address(), absl::Milliseconds(100));
  ASSERT_OK(link);
  std::unique_ptr<ServerProcess> replica = StartReplicaOf((*link)->address());
  ASSERT_NE(replica, nullptr);
  // Reading the feed (a copy still under way would be dropped instead, and
  // the feed keep nothing for it).
  ASSERT_TRUE(WaitFor(*target, [](const ShardStatsResponse::Replication& r) {
    return r.replicas_in_sync() == 1 && r.lag_entries() == 0;
  }));

  // 20,000 rows of 64 floats on the source.
  constexpr uint32_t kWideDim = 64;
  client::ClientOptions options;
  options.servers = {(*source)->address(), target->address()};
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  ASSERT_OK(client);
  ASSERT_OK((*client)->DeclareTable(CountingTableSpec("wide", kWideDim)));
  const SlotMap initial = SlotMap::Initial(2);
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; keys.size() < 20000; ++key)
    if (initial.ShardForKey(key) == 0) keys.push_back(key);
  for (size_t first = 0; first < keys.size(); first += 2000) {
    const std::vector<uint64_t> part(keys.begin() + first,
                                     keys.begin() + first + 2000);
    ASSERT_OK(AddOne(**client, "wide", kWideDim, part, 0));
  }

  std::atomic<bool> moving{true};
  std::atomic<uint64_t> most_bytes{0};
  std::thread watch([&] {
    while (moving) {
      const uint64_t bytes = Replication(*target).feed_bytes();
      if (bytes > most_bytes) most_bytes = bytes;
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  const int moved = RunToCompletion(
      {BinaryPath("ops/ps_admin"),
       "--servers=" + (*source)->address() + "," + target->address(),
       "move-slots", "--slots=0-16383", "--to=1", "--move_page_rows=1024"},
      FreshTestDir(name_ + "_admin") + "/move.log", absl::Minutes(3));
  moving = false;
  watch.join();
  ASSERT_EQ(moved, 0);
  // 1 MiB and the page that went past it (1024 rows of 64 floats and
  // their keys and expiry data: 272 KiB), with room for the bookkeeping.
  EXPECT_LE(most_bytes.load(), (1u << 20) + (512u << 10));
  // The replica read the rows as they came: it was never dropped.
  EXPECT_EQ(Replication(*target).replicas_dropped_behind(), 0u);
  // The replica holds the moved rows (each pushed once).
  ASSERT_TRUE(WaitFor(*target, [](const ShardStatsResponse::Replication& r) {
    return r.lag_entries() == 0;
  }));
  for (const float value :
       CountedValues(replica->channel(), "wide", keys, /*step=*/997)) {
    EXPECT_EQ(value, 1.0f);
  }
}

TEST_F(ReplicationTest, ANewReplicaOfAPausedPrimaryGivesUpInTime) {
  std::unique_ptr<ServerProcess> primary = StartPrimary({});
  ASSERT_NE(primary, nullptr);
  ASSERT_EQ(kill(primary->pid(), SIGSTOP), 0);
  replica_dir_ = FreshTestDir(name_ + "_replica");
  const absl::Time began = absl::Now();
  const int exit_code = RunToCompletion(
      {BinaryPath("server/ps_server"), "--data_dir=" + replica_dir_,
       "--replica_of=" + primary->address(), "--listen=127.0.0.1:0",
       "--replica_copy_timeout_s=2"},
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
  auto refused_copy = ChildProcess::Start(
      {BinaryPath("server/ps_server"), "--data_dir=" + primary_dir_,
       "--listen=127.0.0.1:0", "--replica_of=" + replica->address()},
      false, primary_dir_ + ".refused.log");
  ASSERT_OK(refused_copy);
  EXPECT_NE((*refused_copy)->Wait(absl::Minutes(1)), 0);
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
  request.set_expected_epoch(initial.epoch());
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
    std::vector<std::string> argv = {BinaryPath("ops/ps_admin"),
                                     "--servers=" + primary->address(),
                                     "--rpc_timeout_s=5",
                                     "row",
                                     std::string("--table=") + kTable,
                                     absl::StrCat("--key=", keys_[7])};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto process = ChildProcess::Start(argv, /*capture_stdout=*/true, log);
    EXPECT_OK(process);
    if (!process.ok()) return -1;
    while (true) {
      absl::StatusOr<std::string> line =
          (*process)->ReadLine(absl::Now() + absl::Seconds(30));
      if (!line.ok()) break;
      *out += *line + "\n";
    }
    return (*process)->Wait(absl::Seconds(30));
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
  const std::vector<std::string> worker = {
      BinaryPath("worker/ps_worker"),
      "--servers=" + primary->address(),
      "--train=" + dir + "/train.tsv",
      "--test=" + dir + "/test.tsv",
      "--batch_size=1024",
      "--metrics_out=" + dir + "/metrics.json"};
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
  auto stats_of = [](const ServerProcess& server) {
    auto admin = Admin::NewStub(server.channel());
    ShardStatsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(
        admin->ShardStats(&context, ShardStatsRequest(), &response).ok());
    return response;
  };
  EXPECT_GT(stats_of(*replica).pull_requests(), 0u);
  EXPECT_GT(stats_of(*replica).rows_pulled(), 0u);
  const std::string metrics = ReadFile(dir + "/metrics.json");
  const size_t at = metrics.find("\"test_auc\": ");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::stod(metrics.substr(at + 12)), 0.7) << metrics;
}

}  // namespace
}  // namespace ps::testing
