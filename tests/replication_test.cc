// Replicas against real ps_server processes: a replica copied while pushes
// go on holds every push its primary acknowledged under --replication=sync,
// even when the primary is killed while the replica was paused, or slowed
// by the network; under async, pushes run at most
// --max_replication_lag_records ahead of a paused replica, and a copy too
// far behind is taken again; a move's rows wait for room in the target's
// feed. (replication_recovery_test: replicas that die, start again or
// serve reads.)

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
#include "tests/test_files.h"

namespace ps::testing {
namespace {

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
  // The primary runs ahead until the lag reaches its bound.
  EXPECT_TRUE(WaitFor(*primary, [](const ShardStatsResponse::Replication& r) {
    return r.lag_entries() >= 5;
  }));
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
  const int moved =
      RunPsAdmin(
          AdminCluster::Servers({(*source)->address(), target->address()}),
          {"move-slots", "--slots=0-16383", "--to=1", "--move_page_rows=1024"},
          FreshTestDir(name_ + "_admin") + "/move.log", absl::Minutes(3))
          .exit_code;
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

}  // namespace
}  // namespace ps::testing
