// Failover under --etcd against real processes (issue 28): a replica
// (ps_server --replica_of_shard=0) takes its primary's place once the primary's
// registration goes, and the workers follow it. Under --replication=sync,
// kill -9 of the primary with its data dir deleted while two clients push
// loses no acknowledged push and doubles none; a primary paused past its
// lease (SIGSTOP) is fenced once it runs again: it acknowledges no push.

#include <signal.h>

#include <algorithm>
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
#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/chaos_rows.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"
#include "tests/etcd_process.h"
#include "tests/server_process.h"
#include "tests/test_files.h"
#include "worker/ps_client.h"

namespace ps::testing {
namespace {

constexpr char kJob[] = "failover";
constexpr int kDim = 4;
constexpr char kTable[] = "t";

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
        EtcdProcess::Start(name_ + "_etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
    absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> client =
        etcd_->Connect();
    ASSERT_OK(client);
    client_ = *std::move(client);
    for (uint64_t i = 0; i < 1000; ++i) keys_.push_back(i * 2654435761ULL);
  }

  std::vector<std::string> EtcdFlags() const {
    return {"--etcd=" + etcd_->endpoint(), absl::StrCat("--job=", kJob),
            "--etcd_lease_s=2", "--cache_mb=64"};
  }

  // `primary_more`: more flags for the primary (a later one wins).
  void StartPrimaryAndReplica(
      bool sync = true, int max_lag = 100000,
      const std::vector<std::string>& primary_more = {}) {
    primary_dir_ = FreshTestDir(name_ + "_primary");
    std::vector<std::string> flags = EtcdFlags();
    flags.insert(
        flags.end(),
        {"--data_dir=" + primary_dir_, "--shard_index=0", "--num_shards=1",
         sync ? "--replication=sync" : "--replication=async",
         absl::StrCat("--max_replication_lag_records=", max_lag)});
    flags.insert(flags.end(), primary_more.begin(), primary_more.end());
    auto primary =
        ServerProcess::Start(flags, absl::Seconds(60), primary_dir_ + ".log");
    ASSERT_OK(primary);
    primary_ = *std::move(primary);
    replica_dir_ = FreshTestDir(name_ + "_replica");
    // Once promoted it takes pushes with no replica of its own (the trade
    // --min_in_sync_replicas=0 makes), so that training goes on at once.
    flags = EtcdFlags();
    flags.insert(flags.end(),
                 {"--data_dir=" + replica_dir_, "--replica_of_shard=0",
                  "--replication=sync", "--min_in_sync_replicas=0"});
    auto replica =
        ServerProcess::Start(flags, absl::Seconds(60), replica_dir_ + ".log");
    ASSERT_OK(replica);
    replica_ = *std::move(replica);
  }

  // A worker's client that finds the shards in etcd.
  std::unique_ptr<worker::PsClient> Connect(uint64_t incarnation) {
    return ConnectThroughEtcd(*client_, kJob, incarnation, kTable, kDim);
  }

  static ShardStatsResponse Stats(const ServerProcess& server) {
    auto admin = Admin::NewStub(server.channel());
    ShardStatsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(
        admin->ShardStats(&context, ShardStatsRequest(), &response).ok());
    return response;
  }

  bool WaitInSync() {
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (absl::Now() < deadline) {
      if (Stats(*primary_).replication().replicas_in_sync() == 1) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // The first float of every 50th key's row on `server` (0 where none).
  std::vector<float> Values(const ServerProcess& server) {
    return CountedValues(server.channel(), kTable, keys_);
  }

  // Two clients pushing; `incarnation` (and the next) are their workers'
  // incarnations: new clients of the same workers need larger ones, or the
  // shard takes their pushes for retries of the old ones'.
  std::vector<std::unique_ptr<CountingPusher>> StartPushers(
      std::vector<std::unique_ptr<worker::PsClient>>& clients,
      uint64_t incarnation = 100) {
    std::vector<std::unique_ptr<CountingPusher>> pushers;
    for (uint32_t w = 0; w < 2; ++w) {
      clients.push_back(Connect(incarnation + w));
      EXPECT_NE(clients.back(), nullptr);
      pushers.push_back(std::make_unique<CountingPusher>(
          clients.back().get(), keys_,
          [w](worker::PsClient& c, const std::vector<uint64_t>& k) {
            return AddOne(c, kTable, kDim, k, w);
          }));
    }
    return pushers;
  }

  // ps_server --replicas=1 --replication=sync for shard 0 on `dir`, and
  // `more` flags (a later one wins). With --min_in_sync_replicas=0, so that
  // a primary alone takes pushes (the tests that use these flags are about
  // roles; one puts 1 back).
  std::vector<std::string> ReplicasFlags(
      const std::string& dir, const std::vector<std::string>& more = {}) const {
    std::vector<std::string> flags = EtcdFlags();
    flags.insert(
        flags.end(),
        {"--data_dir=" + dir, "--shard_index=0", "--num_shards=1",
         "--replicas=1", "--replication=sync", "--min_in_sync_replicas=0"});
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  }
  std::unique_ptr<ServerProcess> StartWithReplicas(
      const std::string& dir, const std::vector<std::string>& more = {}) {
    auto started =
        ServerProcess::Start(ReplicasFlags(dir, more), absl::Seconds(90),
                             absl::StrCat(dir, ".log", ++starts_));
    EXPECT_OK(started);
    return started.ok() ? *std::move(started) : nullptr;
  }

  // See OnlyAReplicaInTheRecordedInSyncSetIsPromoted.
  void LoseAllButADroppedReplica(bool unclean) {
    ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica(
        /*sync=*/true, /*max_lag=*/100000, {"--replica_timeout_ms=500"}));
    const std::string dropped_dir = FreshTestDir(name_ + "_dropped");
    std::vector<std::string> flags = EtcdFlags();
    flags.insert(flags.end(),
                 {"--data_dir=" + dropped_dir, "--replica_of_shard=0",
                  "--replication=sync", "--min_in_sync_replicas=0",
                  unclean ? "--allow_unclean_promotion" : "--cache_mb=64"});
    auto dropped =
        ServerProcess::Start(flags, absl::Seconds(60), dropped_dir + ".log");
    ASSERT_OK(dropped);
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (Stats(*primary_).replication().replicas_in_sync() != 2) {
      ASSERT_LT(absl::Now(), deadline) << "the replicas are not in sync";
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::unique_ptr<worker::PsClient> client = Connect(100);
    ASSERT_NE(client, nullptr);
    for (int i = 0; i < 5; ++i)
      ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));

    ASSERT_EQ(kill((*dropped)->pid(), SIGSTOP), 0);
    while (Stats(*primary_).replication().replicas() != 1) {
      ASSERT_LT(absl::Now(), deadline) << "the paused replica was not dropped";
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (int i = 0; i < 5; ++i)
      ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));
    absl::StatusOr<cluster::InSyncSet> recorded =
        cluster::ReadInSyncSet(*client_, kJob, 0);
    ASSERT_OK(recorded);
    EXPECT_EQ(recorded->followers.size(), 1u) << cluster::InSyncText(*recorded);

    replica_->SignalAndWait(SIGKILL);
    primary_->SignalAndWait(SIGKILL);
    std::filesystem::remove_all(primary_dir_);
    ASSERT_EQ(kill((*dropped)->pid(), SIGCONT), 0);
    if (!unclean) {
      EXPECT_EQ((*dropped)->Wait(absl::Minutes(1)), 70);
      EXPECT_NE(
          ReadFile(dropped_dir + ".log").find("does not name this replica"),
          std::string::npos)
          << ReadFile(dropped_dir + ".log");
      EXPECT_TRUE(
          absl::IsNotFound(cluster::FindShard(*client_, kJob, 0).status()));
      return;
    }
    while (Stats(**dropped).replication().role() != "primary") {
      ASSERT_LT(absl::Now(), deadline + absl::Minutes(1))
          << "the replica was not promoted";
      absl::SleepFor(absl::Milliseconds(50));
    }
    // It lacks the five pushes acknowledged while it was paused.
    for (float value : Values(**dropped)) EXPECT_EQ(value, 5.0f);
  }

  std::string name_;
  int starts_ = 0;
  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<cluster::CoordinationStore> client_;
  std::string primary_dir_, replica_dir_;
  std::unique_ptr<ServerProcess> primary_, replica_;
  std::vector<uint64_t> keys_;
};

TEST_F(FailoverTest, SyncLosesAndDoublesNothingWhenThePrimaryAndItsDiskGo) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica());
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  ASSERT_TRUE(WaitInSync());
  for (auto& pusher : pushers) pusher->WaitForMore(10);

  // The primary's machine is lost: process and disk.
  const absl::Time killed = absl::Now();
  primary_->SignalAndWait(SIGKILL);
  std::filesystem::remove_all(primary_dir_);
  // Training goes on, on the promoted replica.
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  const absl::Duration paused = absl::Now() - killed;
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  std::printf("failover: pushes went on %s after the kill\n",
              absl::FormatDuration(paused).c_str());
  EXPECT_EQ(Stats(*replica_).replication().role(), "primary");
  // Every acknowledged push once: none lost, none doubled.
  for (float value : Values(*replica_)) EXPECT_EQ(value, acknowledged);
  AddChaosRow(
      "under --etcd, --replication=sync: the primary killed (kill -9) and "
      "its data dir deleted, two clients pushing",
      absl::StrCat("retried until the replica took over; pushes went on ",
                   absl::FormatDuration(paused), " after the kill"),
      Values(*replica_), acknowledged, "the promoted replica serves");
  absl::StatusOr<cluster::ShardRecord> registered =
      cluster::FindShard(*client_, kJob, 0);
  ASSERT_OK(registered);
  EXPECT_EQ(registered->address, replica_->address());

  // A new replica of the promoted shard, copied while pushes go on,
  // catches up with it.
  std::unique_ptr<worker::PsClient> client = Connect(200);
  ASSERT_NE(client, nullptr);
  CountingPusher more(client.get(), keys_,
                      [](worker::PsClient& c, const std::vector<uint64_t>& k) {
                        return AddOne(c, kTable, kDim, k, 2);
                      });
  more.WaitForMore(5);
  const std::string dir = FreshTestDir(name_ + "_new_replica");
  std::vector<std::string> flags = EtcdFlags();
  flags.insert(flags.end(), {"--data_dir=" + dir, "--replica_of_shard=0"});
  auto fresh = ServerProcess::Start(flags, absl::Seconds(60), dir + ".log");
  ASSERT_OK(fresh);
  more.WaitForMore(5);
  ASSERT_OK(more.Stop());
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*replica_).replication().lag_entries() != 0 ||
         Stats(*replica_).replication().replicas() != 1) {
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (float value : Values(**fresh)) {
    EXPECT_EQ(value, acknowledged + more.acknowledged());
  }
}

// A delta export after a failover: the promoted replica's clock stamped
// its rows, not the clock of the primary that wrote the export before (one
// behind would leave rows out of the delta). The delta is refused, and a
// full export goes on.
TEST_F(FailoverTest, AfterAPromotionTheNextExportIsAFullOne) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica());
  std::unique_ptr<worker::PsClient> client = Connect(100);
  ASSERT_NE(client, nullptr);
  TableSpec wide = CountingTableSpec("lr.wide", 1);
  wide.mutable_model()->set_kind(ModelCard::LR);
  wide.mutable_model()->set_wide_table("lr.wide");
  ASSERT_OK(client->DeclareTable(wide));
  ASSERT_TRUE(WaitInSync());
  ASSERT_OK(AddOne(*client, "lr.wide", 1, keys_, 0));
  const std::string dir = FreshTestDir(name_ + "_exports");
  auto export_to = [&](const ServerProcess& shard, const std::string& name,
                       const std::string& predecessor) {
    ExportOptions options;
    options.cluster.servers = {shard.address()};
    options.cluster.dir = dir + "/" + name;
    options.predecessor = predecessor.empty() ? "" : dir + "/" + predecessor;
    return TakeExport(options);
  };
  ASSERT_OK(export_to(*primary_, "base", "").status());
  ASSERT_OK(AddOne(*client, "lr.wide", 1, keys_, 0));
  // Before the failover a delta follows.
  absl::StatusOr<ExportManifest> delta = export_to(*primary_, "delta1", "base");
  ASSERT_OK(delta.status());
  EXPECT_EQ(delta->delta_index(), 1u);

  primary_->SignalAndWait(SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*replica_).replication().role() != "primary") {
    ASSERT_LT(absl::Now(), deadline) << "the replica was not promoted";
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_OK(AddOne(*client, "lr.wide", 1, keys_, 0));
  delta = export_to(*replica_, "delta2", "delta1");
  EXPECT_EQ(delta.status().code(), absl::StatusCode::kFailedPrecondition)
      << delta.status();
  EXPECT_NE(delta.status().message().find("full export"), std::string::npos)
      << delta.status();
  absl::StatusOr<ExportManifest> full = export_to(*replica_, "base2", "");
  ASSERT_OK(full.status());
  EXPECT_EQ(full->delta_index(), 0u);
  // And a delta of that full export follows again.
  ASSERT_OK(AddOne(*client, "lr.wide", 1, keys_, 0));
  EXPECT_OK(export_to(*replica_, "delta3", "base2").status());
}

// A slot move under sync reaches the replicas of both sides: the
// target's replica holds the moved rows (with the pushes after the move)
// once promoted in its primary's place, and the source's replica deletes
// them as its primary does.
TEST_F(FailoverTest, MovedSlotsReachTheReplicasOfBothShards) {
  std::vector<std::unique_ptr<ServerProcess>> primaries, replicas;
  std::vector<std::string> primary_dirs;
  for (int shard = 0; shard < 2; ++shard) {
    primary_dirs.push_back(
        FreshTestDir(absl::StrCat(name_, "_primary", shard)));
    std::vector<std::string> flags = EtcdFlags();
    flags.insert(flags.end(), {"--data_dir=" + primary_dirs.back(),
                               absl::StrCat("--shard_index=", shard),
                               "--num_shards=2", "--replication=sync"});
    auto primary = ServerProcess::Start(flags, absl::Seconds(60),
                                        primary_dirs.back() + ".log");
    ASSERT_OK(primary);
    primaries.push_back(*std::move(primary));
    const std::string replica_dir =
        FreshTestDir(absl::StrCat(name_, "_replica", shard));
    flags = EtcdFlags();
    flags.insert(flags.end(), {"--data_dir=" + replica_dir,
                               absl::StrCat("--replica_of_shard=", shard),
                               "--replication=sync"});
    auto replica =
        ServerProcess::Start(flags, absl::Seconds(60), replica_dir + ".log");
    ASSERT_OK(replica);
    replicas.push_back(*std::move(replica));
  }
  std::unique_ptr<worker::PsClient> client = Connect(100);
  ASSERT_NE(client, nullptr);
  for (auto& primary : primaries) {
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (Stats(*primary).replication().replicas_in_sync() != 1) {
      ASSERT_LT(absl::Now(), deadline) << "a replica is not in sync";
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));
  const std::string log = FreshTestDir(name_ + "_move") + "/move.log";
  ASSERT_EQ(RunToCompletion(
                {BinaryPath("ops/ps_admin"), "--etcd=" + etcd_->endpoint(),
                 absl::StrCat("--job=", kJob), "move-slots", "--slots=0-16383",
                 "--to=1"},
                log, absl::Minutes(2)),
            0)
      << ReadFile(log);
  ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));

  // Shard 1's machine is lost: its replica, promoted, has every row.
  primaries[1]->SignalAndWait(SIGKILL);
  std::filesystem::remove_all(primary_dirs[1]);
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*replicas[1]).replication().role() != "primary") {
    ASSERT_LT(absl::Now(), deadline) << "the replica was not promoted";
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (float value : Values(*replicas[1])) EXPECT_EQ(value, 2.0f);
  // Shard 0's replica kept none of the rows its primary gave away.
  for (float value : Values(*replicas[0])) EXPECT_EQ(value, 0.0f);
}

// A push applied on a move's source whose answer was lost, retried after
// the source is gone (or after a replica that never saw it took its
// place): the retry is refused as moved, and re-routed to the target with
// the source's origin, which the ledger the move brought answers as a
// duplicate. The ledger is on the target's replica too: the target's
// primary is lost as well before the retry comes.
TEST_F(FailoverTest, APushWhoseAnswerWasLostCountsOnceAfterAMoveAndAFailover) {
  std::vector<std::unique_ptr<ServerProcess>> primaries;
  std::vector<std::string> primary_dirs;
  for (int shard = 0; shard < 2; ++shard) {
    primary_dirs.push_back(
        FreshTestDir(absl::StrCat(name_, "_primary", shard)));
    std::vector<std::string> flags = EtcdFlags();
    // Shard 0, the move's source, has no replica; shard 1 has one.
    flags.insert(flags.end(),
                 {"--data_dir=" + primary_dirs.back(),
                  absl::StrCat("--shard_index=", shard), "--num_shards=2",
                  shard == 0 ? "--replication=async" : "--replication=sync"});
    auto primary = ServerProcess::Start(flags, absl::Seconds(60),
                                        primary_dirs.back() + ".log");
    ASSERT_OK(primary);
    primaries.push_back(*std::move(primary));
  }
  const std::string replica_dir = FreshTestDir(name_ + "_replica1");
  std::vector<std::string> flags = EtcdFlags();
  // Promoted, it takes pushes alone.
  flags.insert(flags.end(),
               {"--data_dir=" + replica_dir, "--replica_of_shard=1",
                "--replication=sync", "--min_in_sync_replicas=0"});
  auto replica =
      ServerProcess::Start(flags, absl::Seconds(60), replica_dir + ".log");
  ASSERT_OK(replica);
  std::unique_ptr<worker::PsClient> client = Connect(100);
  ASSERT_NE(client, nullptr);
  const absl::Time in_sync = absl::Now() + absl::Minutes(1);
  while (Stats(*primaries[1]).replication().replicas_in_sync() != 1) {
    ASSERT_LT(absl::Now(), in_sync) << "the replica is not in sync";
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));

  // P: shard 0's keys once more, as worker 77; its answer is "lost".
  const SlotMap initial = SlotMap::Initial(2);
  std::vector<uint64_t> keys;
  for (uint64_t key : keys_) {
    if (initial.ShardForKey(key) == 0) keys.push_back(key);
  }
  ASSERT_GT(keys.size(), 100u);
  PushRequest push;
  push.set_table(kTable);
  push.set_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                            keys.size() * sizeof(uint64_t)));
  const std::vector<float> gradients(keys.size() * kDim, -1.0f);
  push.set_gradients(
      std::string(reinterpret_cast<const char*>(gradients.data()),
                  gradients.size() * sizeof(float)));
  push.set_worker(77);
  push.set_incarnation(1);
  push.set_sequence(1);
  auto send = [&](const ServerProcess& server, const PushRequest& request,
                  PushResponse* response) {
    grpc::ClientContext context;
    return ParameterServer::NewStub(server.channel())
        ->Push(&context, request, response);
  };
  PushResponse first;
  ASSERT_TRUE(send(*primaries[0], push, &first).ok());
  ASSERT_FALSE(first.duplicate());
  ASSERT_GT(first.rows_updated(), 0u);

  // Every slot moves to shard 1; then both primaries' machines are lost,
  // and shard 1's replica takes over.
  const std::string log = FreshTestDir(name_ + "_move") + "/move.log";
  ASSERT_EQ(RunToCompletion(
                {BinaryPath("ops/ps_admin"), "--etcd=" + etcd_->endpoint(),
                 absl::StrCat("--job=", kJob), "move-slots", "--slots=0-16383",
                 "--to=1"},
                log, absl::Minutes(2)),
            0)
      << ReadFile(log);
  for (int shard = 0; shard < 2; ++shard) {
    primaries[shard]->SignalAndWait(SIGKILL);
    std::filesystem::remove_all(primary_dirs[shard]);
  }
  const absl::Time promoted = absl::Now() + absl::Minutes(1);
  while (Stats(**replica).replication().role() != "primary") {
    ASSERT_LT(absl::Now(), promoted) << "the replica was not promoted";
    absl::SleepFor(absl::Milliseconds(50));
  }

  // The retry of P, re-routed as the client does when its first shard
  // refuses it as moved: a new sequence on shard 1, the origin it had on
  // shard 0.
  PushRequest rerouted = push;
  PushRequest::MovedFrom* from = rerouted.add_moved_from();
  from->set_shard(0);
  from->set_sequence(1);
  PushResponse answered;
  const grpc::Status status = send(**replica, rerouted, &answered);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(answered.duplicate());
  EXPECT_EQ(answered.rows_updated(), keys.size());
  for (float value : CountedValues((*replica)->channel(), kTable, keys, 10)) {
    EXPECT_EQ(value, 2.0f);
  }
  // A push the source never applied is applied.
  rerouted.set_sequence(2);
  from->set_sequence(2);
  ASSERT_TRUE(send(**replica, rerouted, &answered).ok());
  EXPECT_FALSE(answered.duplicate());
  for (float value : CountedValues((*replica)->channel(), kTable, keys, 10)) {
    EXPECT_EQ(value, 3.0f);
  }
}

// A replica paused past --replica_timeout_ms is dropped from the in-sync
// set. Under sync (--min_in_sync_replicas 1) the primary then refuses
// pushes (transiently) rather than acknowledge them with no replica; the
// primary dies with its disk, the replica resumes and is promoted, and the
// pushes retried there lose nothing.
TEST_F(FailoverTest, NoPushIsAcknowledgedWithFewerReplicasInSyncThanTheLeast) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica(
      /*sync=*/true, /*max_lag=*/100000, {"--replica_timeout_ms=500"}));
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  ASSERT_TRUE(WaitInSync());
  for (auto& pusher : pushers) pusher->WaitForMore(5);

  ASSERT_EQ(kill(replica_->pid(), SIGSTOP), 0);
  // Dropped after half a second; pushes go on (or are refused) meanwhile.
  absl::SleepFor(absl::Seconds(2));
  const ShardStatsResponse paused = Stats(*primary_);
  primary_->SignalAndWait(SIGKILL);
  std::filesystem::remove_all(primary_dir_);
  ASSERT_EQ(kill(replica_->pid(), SIGCONT), 0);
  for (auto& pusher : pushers) pusher->WaitForMore(5);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  EXPECT_EQ(paused.replication().replicas_in_sync(), 0u);
  EXPECT_GT(paused.replication().pushes_refused_too_few_in_sync(), 0u);
  EXPECT_EQ(paused.replication().pushes_without_replica(), 0u);
  for (float value : Values(*replica_)) EXPECT_EQ(value, acknowledged);
}

// Two replicas under sync; one (B) paused past --replica_timeout_ms leaves
// the recorded in-sync set, and pushes go on with the other (A). Then A and
// the primary are lost. B, resumed, lacks pushes that were acknowledged:
// without --allow_unclean_promotion it is not promoted (it exits 70, the
// shard waits for an operator); with it, it is, and lacks them.
TEST_F(FailoverTest, OnlyAReplicaInTheRecordedInSyncSetIsPromoted) {
  LoseAllButADroppedReplica(/*unclean=*/false);
}

TEST_F(FailoverTest, AnUncleanPromotionTakesAReplicaOutsideTheSet) {
  LoseAllButADroppedReplica(/*unclean=*/true);
}

// Two replicas; one (B) is paused while the primary is killed and the
// other (A) takes over. B, resumed, finds the shard registered at A's
// address, not at the primary's it follows: it stops at once (70), to be
// copied from A, rather than retrying the dead primary for
// --replica_follow_retry (30 s) outside A's in-sync set; started again on
// an empty dir it is A's replica, in sync.
TEST_F(FailoverTest, AReplicaThatMissedAPromotionStopsAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica(
      /*sync=*/true, /*max_lag=*/100000, {"--replica_timeout_ms=500"}));
  const std::string other_dir = FreshTestDir(name_ + "_other");
  auto other_flags = [&] {
    std::vector<std::string> flags = EtcdFlags();
    flags.insert(flags.end(),
                 {"--data_dir=" + other_dir, "--replica_of_shard=0",
                  "--replication=sync", "--min_in_sync_replicas=0"});
    return flags;
  };
  auto other = ServerProcess::Start(other_flags(), absl::Seconds(60),
                                    other_dir + ".log");
  ASSERT_OK(other);
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*primary_).replication().replicas_in_sync() != 2) {
    ASSERT_LT(absl::Now(), deadline) << "the replicas are not in sync";
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(kill((*other)->pid(), SIGSTOP), 0);
  primary_->SignalAndWait(SIGKILL);
  while (Stats(*replica_).replication().role() != "primary") {
    ASSERT_LT(absl::Now(), deadline) << "the replica was not promoted";
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(kill((*other)->pid(), SIGCONT), 0);
  EXPECT_EQ((*other)->Wait(absl::Seconds(10)), 70);
  EXPECT_NE(ReadFile(other_dir + ".log").find("that this replica follows"),
            std::string::npos)
      << ReadFile(other_dir + ".log");

  std::filesystem::remove_all(other_dir);
  other = ServerProcess::Start(other_flags(), absl::Seconds(60),
                               other_dir + ".log2");
  ASSERT_OK(other);
  EXPECT_EQ(Stats(**other).replication().role(),
            absl::StrCat("replica of ", replica_->address()));
  while (Stats(*replica_).replication().replicas_in_sync() != 1) {
    ASSERT_LT(absl::Now(), deadline + absl::Minutes(1))
        << "the restarted replica did not catch up";
    absl::SleepFor(absl::Milliseconds(20));
  }
}

TEST_F(FailoverTest, APrimaryPausedPastItsLeaseIsFenced) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica());
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  ASSERT_TRUE(WaitInSync());
  for (auto& pusher : pushers) pusher->WaitForMore(10);

  // Paused past its lease: the replica takes over meanwhile.
  ASSERT_EQ(kill(primary_->pid(), SIGSTOP), 0);
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*replica_).replication().role() != "primary") {
    ASSERT_LT(absl::Now(), deadline) << "the replica did not take over";
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  ASSERT_EQ(kill(primary_->pid(), SIGCONT), 0);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  for (float value : Values(*replica_)) EXPECT_EQ(value, acknowledged);
  AddChaosRow(
      "under --etcd, --replication=sync: the primary paused (SIGSTOP) past "
      "its lease, then resumed",
      "retried until the replica took over", Values(*replica_), acknowledged,
      "the resumed primary is fenced (refuses pushes)");

  // Running again, the old primary acknowledges no push: its lease is gone
  // and the replica holds its key.
  worker::ClientOptions options;
  options.servers = {primary_->address()};
  options.retry_for = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<worker::PsClient>> stale =
      worker::PsClient::Connect(options);
  ASSERT_OK(stale);
  const absl::Status refused = AddOne(**stale, kTable, kDim, keys_, 7);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("lease"), std::string::npos) << refused;

  // Stopped and started again on its data dir, it does not take the shard
  // back: a replica took its place since (the shard's generation rose).
  primary_->SignalAndWait(SIGTERM);
  std::vector<std::string> flags = EtcdFlags();
  flags.insert(flags.end(), {"--data_dir=" + primary_dir_, "--shard_index=0",
                             "--num_shards=1", "--listen=127.0.0.1:0"});
  flags.insert(flags.begin(), BinaryPath("server/ps_server"));
  auto restarted = ChildProcess::Start(flags, false, primary_dir_ + ".again");
  ASSERT_OK(restarted);
  EXPECT_EQ((*restarted)->Wait(absl::Minutes(1)), 70);
  EXPECT_NE(ReadFile(primary_dir_ + ".again").find("failed over"),
            std::string::npos);
  absl::StatusOr<cluster::ShardRecord> registered =
      cluster::FindShard(*client_, kJob, 0);
  ASSERT_OK(registered);
  EXPECT_EQ(registered->address, replica_->address());
}

TEST_F(FailoverTest, AsyncLosesAtMostTheLagBoundWhenThePrimaryDies) {
  constexpr int kMaxLag = 5;
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica(/*sync=*/false, kMaxLag));
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  // The replica paused, so that it lags as far as the primary lets it.
  ASSERT_EQ(kill(replica_->pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(1));
  const uint64_t lag = Stats(*primary_).replication().lag_entries();
  primary_->SignalAndWait(SIGKILL);
  std::filesystem::remove_all(primary_dir_);
  ASSERT_EQ(kill(replica_->pid(), SIGCONT), 0);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  // The reported lag is the bound plus at most each client's push waiting
  // on it (applied, not acknowledged). What was lost is at most the bound
  // and the reported lag; nothing is doubled (a waiting push, retried, is
  // applied once on the promoted replica).
  EXPECT_LE(lag, static_cast<uint64_t>(kMaxLag + 2));
  const int may_lack = std::min(static_cast<int>(lag), kMaxLag);
  for (float value : Values(*replica_)) {
    EXPECT_GE(value, acknowledged - may_lack);
    EXPECT_LE(value, acknowledged);
  }
  AddChaosRow(
      absl::StrCat("under --etcd, --replication=async (lag bound ", kMaxLag,
                   "): the replica paused, then the primary killed (kill -9) "
                   "and its data dir deleted"),
      absl::StrCat("retried until the replica took over; the primary "
                   "reported a lag of ",
                   lag, " entries"),
      Values(*replica_), acknowledged,
      "the promoted replica serves, lacking at most the reported lag");
}

TEST_F(FailoverTest, AStoppedPrimaryHandsOverUnderAsync) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica(/*sync=*/false));
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  // A clean stop (a rolling update): pushes stop, the replica catches up,
  // then the primary lets go and the replica takes over.
  EXPECT_EQ(primary_->SignalAndWait(SIGTERM), 0);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  EXPECT_EQ(Stats(*replica_).replication().role(), "primary");
  for (float value : Values(*replica_)) EXPECT_EQ(value, acknowledged);
  AddChaosRow(
      "under --etcd, --replication=async: the primary stopped (SIGTERM)",
      "retried until the replica took over", Values(*replica_), acknowledged,
      "the replica caught up before the primary let go");
}

// ps_server --replicas=1: a shard's two processes, started alike, find
// their roles; each machine lost in turn (process and disk, then process
// alone) costs no acknowledged push, and the process started again in the
// lost one's place becomes a replica of the promoted one, by itself: on an
// empty data dir, and on a data dir of the shard's older generation. A
// primary paused past its lease stops by itself once resumed.
TEST_F(FailoverTest, WithReplicasEachProcessFindsItsRoleAcrossFailovers) {
  std::vector<std::string> dirs = {FreshTestDir(name_ + "_a"),
                                   FreshTestDir(name_ + "_b")};
  // The default under sync: a push needs a replica in sync.
  auto start = [&](int which) {
    return StartWithReplicas(dirs[which], {"--min_in_sync_replicas=1"});
  };
  // Both at once: one claims the new shard, the other follows it.
  std::vector<std::unique_ptr<ServerProcess>> processes(2);
  std::thread second([&] { processes[1] = start(1); });
  processes[0] = start(0);
  second.join();
  ASSERT_NE(processes[0], nullptr);
  ASSERT_NE(processes[1], nullptr);
  const bool first_is_primary =
      Stats(*processes[0]).replication().role() == "primary";
  int primary = first_is_primary ? 0 : 1;
  EXPECT_EQ(Stats(*processes[1 - primary]).replication().role(),
            absl::StrCat("replica of ", processes[primary]->address()));

  auto wait_in_sync = [&](int which) {
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (Stats(*processes[which]).replication().replicas_in_sync() != 1) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  };
  auto wait_promoted = [&](int which) {
    const absl::Time deadline = absl::Now() + absl::Minutes(1);
    while (Stats(*processes[which]).replication().role() != "primary") {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return true;
  };
  ASSERT_TRUE(wait_in_sync(primary));
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);

  // Loses the primary by `lose`; once the other took over (refusing
  // pushes, transiently, with no replica in sync), calls `then` on the lost
  // process, starts it again on its dir and checks that it became the new
  // primary's replica, in sync, and that pushes go on.
  auto fail_over = [&](const std::function<void(ServerProcess&)>& lose,
                       const std::function<void(ServerProcess&)>& then) {
    lose(*processes[primary]);
    ASSERT_TRUE(wait_promoted(1 - primary)) << "no replica took over";
    then(*processes[primary]);
    processes[primary] = start(primary);
    ASSERT_NE(processes[primary], nullptr);
    EXPECT_EQ(Stats(*processes[primary]).replication().role(),
              absl::StrCat("replica of ", processes[1 - primary]->address()));
    primary = 1 - primary;
    ASSERT_TRUE(wait_in_sync(primary));
    for (auto& pusher : pushers) pusher->WaitForMore(10);
  };
  auto nothing = [](ServerProcess&) {};

  // The primary's machine is lost with its disk; a new machine starts the
  // same process on an empty disk.
  ASSERT_NO_FATAL_FAILURE(fail_over(
      [&](ServerProcess& lost) {
        lost.SignalAndWait(SIGKILL);
        std::filesystem::remove_all(dirs[primary]);
      },
      nothing));
  // Now the other one dies, its disk kept: started again on it, its rows
  // are the shard's older generation's, and it becomes a replica.
  ASSERT_NO_FATAL_FAILURE(fail_over(
      [](ServerProcess& lost) { lost.SignalAndWait(SIGKILL); }, nothing));
  // Then the primary is paused past its lease: resumed, it finds the
  // shard taken and stops by itself (70); started again, a replica.
  ASSERT_NO_FATAL_FAILURE(fail_over(
      [](ServerProcess& lost) { ASSERT_EQ(kill(lost.pid(), SIGSTOP), 0); },
      [](ServerProcess& lost) {
        ASSERT_EQ(kill(lost.pid(), SIGCONT), 0);
        EXPECT_EQ(lost.Wait(absl::Minutes(1)), 70);
      }));

  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  // Every acknowledged push once, on the primary and on its replica.
  for (float value : Values(*processes[primary])) {
    EXPECT_EQ(value, acknowledged);
  }
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (Stats(*processes[primary]).replication().lag_entries() != 0) {
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Values(*processes[1 - primary]), Values(*processes[primary]));
  AddChaosRow(
      "under --etcd, --replicas=1, --replication=sync: the primary killed "
      "with its disk, then the promoted one killed (disk kept), then the "
      "next one paused past its lease and resumed; each started again as "
      "it was",
      "retried until the replica took over, three times",
      Values(*processes[primary]), acknowledged,
      "each restarted process became a replica by itself (an empty dir, "
      "then a superseded one)");
}

// A new job restored from a checkpoint under --replicas: every process
// runs the same command, --restore_from included (one pod template). The
// one that claims the shard restores it; the other copies it from that
// primary instead, and holds the checkpoint's rows once promoted.
TEST_F(FailoverTest, WithReplicasOnlyThePrimaryRestoresAndItsReplicaCopies) {
  primary_dir_ = FreshTestDir(name_ + "_trained");
  primary_ = StartWithReplicas(primary_dir_);
  ASSERT_NE(primary_, nullptr);
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  clients.clear();
  CheckpointOptions checkpoint;
  checkpoint.servers = {primary_->address()};
  checkpoint.dir = FreshTestDir(name_ + "_checkpoint") + "/ckpt-1";
  ASSERT_OK(TakeCheckpoint(checkpoint).status());
  primary_->SignalAndWait(SIGTERM);

  const std::vector<std::string> restored = {
      "--job=restored", "--restore_from=" + checkpoint.dir};
  std::vector<std::string> dirs = {FreshTestDir(name_ + "_a"),
                                   FreshTestDir(name_ + "_b")};
  std::vector<std::unique_ptr<ServerProcess>> processes(2);
  std::thread second(
      [&] { processes[1] = StartWithReplicas(dirs[1], restored); });
  processes[0] = StartWithReplicas(dirs[0], restored);
  second.join();
  ASSERT_NE(processes[0], nullptr);
  ASSERT_NE(processes[1], nullptr);
  const int primary =
      Stats(*processes[0]).replication().role() == "primary" ? 0 : 1;
  EXPECT_EQ(Stats(*processes[1 - primary]).replication().role(),
            absl::StrCat("replica of ", processes[primary]->address()));
  for (float value : Values(*processes[primary])) {
    EXPECT_EQ(value, acknowledged);
  }

  // The primary goes once its replica is in sync: the replica takes over
  // with the checkpoint's rows.
  primary_ = std::move(processes[primary]);
  ASSERT_TRUE(WaitInSync());
  primary_->SignalAndWait(SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  ServerProcess& replica = *processes[1 - primary];
  while (Stats(replica).replication().role() != "primary") {
    if (absl::Now() >= deadline) {
      int code = 0;
      const bool exited = replica.Exited(&code);
      const std::string log = ReadFile(replica.log_path());
      FAIL() << "the replica did not take over"
             << (exited ? absl::StrCat(" (it exited ", code, ")") : "")
             << "; the end of its log:\n"
             << log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (float value : Values(*processes[1 - primary])) {
    EXPECT_EQ(value, acknowledged);
  }
}

// A promotion cut short: before etcd took it, it is not finished (the
// primary it left serves again, and the replica copies it afresh); after,
// the replica's next start finishes it, with every acknowledged push. A
// data dir of a newer generation than etcd's (etcd lost its state) is
// refused, never emptied.
TEST_F(FailoverTest,
       WithReplicasAPromotionCutShortIsFinishedOnlyOnceEtcdHoldsIt) {
  const std::string primary_dir = FreshTestDir(name_ + "_a");
  const std::string replica_dir = FreshTestDir(name_ + "_b");
  std::unique_ptr<ServerProcess> primary = StartWithReplicas(primary_dir);
  ASSERT_NE(primary, nullptr);
  std::unique_ptr<ServerProcess> replica = StartWithReplicas(replica_dir);
  ASSERT_NE(replica, nullptr);
  primary_ = std::move(primary);
  ASSERT_TRUE(WaitInSync());
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  int acknowledged = 0;
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  clients.clear();
  auto kill_both_and_wait_out_the_lease = [&] {
    replica->SignalAndWait(SIGKILL);
    primary_->SignalAndWait(SIGKILL);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (cluster::FindShard(*client_, kJob, 0).ok()) {
      ASSERT_LT(absl::Now(), deadline);
      absl::SleepFor(absl::Milliseconds(100));
    }
  };

  // Both machines go; the replica had written its promotion and died
  // before etcd took it. The primary, started again on its dir (still the
  // shard's newest), takes more pushes and dies again.
  ASSERT_NO_FATAL_FAILURE(kill_both_and_wait_out_the_lease());
  { std::ofstream(replica_dir + "/GENERATION") << "1 before-etcd\n"; }
  primary_ = StartWithReplicas(primary_dir);
  ASSERT_NE(primary_, nullptr);
  EXPECT_EQ(Stats(*primary_).replication().role(), "primary");
  pushers = StartPushers(clients, /*incarnation=*/200);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  for (auto& pusher : pushers) {
    ASSERT_OK(pusher->Stop());
    acknowledged += pusher->acknowledged();
  }
  clients.clear();
  primary_->SignalAndWait(SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (cluster::FindShard(*client_, kJob, 0).ok()) {
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(100));
  }
  // The replica does not finish its promotion (it would lack those
  // pushes): it waits for a primary, and follows the one that comes.
  std::thread waiting([&] { replica = StartWithReplicas(replica_dir); });
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE(absl::IsNotFound(cluster::FindShard(*client_, kJob, 0).status()))
      << "the replica took the shard";
  primary_ = StartWithReplicas(primary_dir);
  waiting.join();
  ASSERT_NE(primary_, nullptr);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(Stats(*primary_).replication().role(), "primary");
  EXPECT_EQ(Stats(*replica).replication().role(),
            absl::StrCat("replica of ", primary_->address()));
  ASSERT_TRUE(WaitInSync());
  for (float value : Values(*primary_)) EXPECT_EQ(value, acknowledged);

  // Again, now killed once etcd took the promotion (the primary's disk
  // lost too): the replica's next start finishes it.
  ASSERT_NO_FATAL_FAILURE(kill_both_and_wait_out_the_lease());
  std::filesystem::remove_all(primary_dir);
  absl::StatusOr<cluster::ShardGeneration> seen =
      cluster::ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(seen);
  { std::ofstream(replica_dir + "/GENERATION") << "1 after-etcd\n"; }
  ASSERT_OK(
      cluster::RaiseShardGeneration(*client_, kJob, 0, *seen, "after-etcd")
          .status());
  replica = StartWithReplicas(replica_dir);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(Stats(*replica).replication().role(), "primary");
  for (float value : Values(*replica)) EXPECT_EQ(value, acknowledged);

  // A data dir ahead of etcd is refused (exit 70), and kept.
  const std::string ahead = FreshTestDir(name_ + "_ahead");
  { std::ofstream(ahead + "/GENERATION") << "5\n"; }
  std::vector<std::string> argv = ReplicasFlags(ahead);
  argv.insert(argv.begin(), BinaryPath("server/ps_server"));
  argv.push_back("--listen=127.0.0.1:0");
  EXPECT_EQ(RunToCompletion(argv, ahead + ".log", absl::Minutes(1)), 70);
  EXPECT_NE(ReadFile(ahead + ".log").find("etcd lost its state"),
            std::string::npos)
      << ReadFile(ahead + ".log");
  EXPECT_TRUE(std::filesystem::exists(ahead + "/GENERATION"));
}

}  // namespace
}  // namespace ps::testing
