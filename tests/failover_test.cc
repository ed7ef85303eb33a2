// Failover under --etcd against real processes: a replica
// (ps_server --replica_of_shard=0) takes its primary's place once the primary's
// registration goes, and the workers follow it. Under --replication=sync,
// kill -9 of the primary with its data dir deleted while two clients push
// loses no acknowledged push and doubles none; a primary paused past its
// lease (SIGSTOP) is fenced once it runs again: it acknowledges no push.

#include "base/wait_until.h"
#include "tests/failover_fixture.h"

namespace ps::testing {
namespace {

TEST_F(FailoverTest, SyncLosesAndDoublesNothingWhenThePrimaryAndItsDiskGo) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica());
  std::vector<std::unique_ptr<client::PsClient>> clients;
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
  std::unique_ptr<client::PsClient> client = Connect(200);
  ASSERT_NE(client, nullptr);
  CountingPusher more(client.get(), keys_,
                      [](client::PsClient& c, const std::vector<uint64_t>& k) {
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
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Stats(*replica_).replication().lag_entries() == 0 &&
               Stats(*replica_).replication().replicas() == 1;
      },
      absl::Minutes(1), absl::Milliseconds(20)));
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
  std::unique_ptr<client::PsClient> client = Connect(100);
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
  ASSERT_TRUE(WaitPromoted(*replica_)) << "the replica was not promoted";
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
  std::unique_ptr<client::PsClient> client = Connect(100);
  ASSERT_NE(client, nullptr);
  for (auto& primary : primaries) {
    ASSERT_TRUE(WaitInSync(primary.get())) << "a replica is not in sync";
  }
  ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));
  const std::string log = FreshTestDir(name_ + "_move") + "/move.log";
  ASSERT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"move-slots", "--slots=0-16383", "--to=1"}, log,
                       absl::Minutes(2))
                .exit_code,
            0)
      << ReadFile(log);
  ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));

  // Shard 1's machine is lost: its replica, promoted, has every row.
  primaries[1]->SignalAndWait(SIGKILL);
  std::filesystem::remove_all(primary_dirs[1]);
  ASSERT_TRUE(WaitPromoted(*replicas[1])) << "the replica was not promoted";
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
  std::unique_ptr<client::PsClient> client = Connect(100);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(WaitInSync(primaries[1].get())) << "the replica is not in sync";
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
  ASSERT_EQ(RunPsAdmin(AdminCluster::Etcd(etcd_->endpoint(), kJob),
                       {"move-slots", "--slots=0-16383", "--to=1"}, log,
                       absl::Minutes(2))
                .exit_code,
            0)
      << ReadFile(log);
  for (int shard = 0; shard < 2; ++shard) {
    primaries[shard]->SignalAndWait(SIGKILL);
    std::filesystem::remove_all(primary_dirs[shard]);
  }
  ASSERT_TRUE(WaitPromoted(**replica)) << "the replica was not promoted";

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
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  ASSERT_TRUE(WaitInSync());
  for (auto& pusher : pushers) pusher->WaitForMore(5);

  ASSERT_EQ(kill(replica_->pid(), SIGSTOP), 0);
  // Dropped after half a second; pushes are refused from then on.
  EXPECT_TRUE(WaitUntil(
      [&] {
        const ShardStatsResponse::Replication now =
            Stats(*primary_).replication();
        return now.replicas_in_sync() == 0 &&
               now.pushes_refused_too_few_in_sync() > 0;
      },
      absl::Minutes(1), absl::Milliseconds(20)));
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
  ASSERT_TRUE(WaitInSync(primary_.get(), 2)) << "the replicas are not in sync";
  ASSERT_EQ(kill((*other)->pid(), SIGSTOP), 0);
  primary_->SignalAndWait(SIGKILL);
  ASSERT_TRUE(WaitPromoted(*replica_)) << "the replica was not promoted";
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
  ASSERT_TRUE(WaitInSync(replica_.get()))
      << "the restarted replica did not catch up";
}

TEST_F(FailoverTest, APrimaryPausedPastItsLeaseIsFenced) {
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndReplica());
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  ASSERT_TRUE(WaitInSync());
  for (auto& pusher : pushers) pusher->WaitForMore(10);

  // Paused past its lease: the replica takes over meanwhile.
  ASSERT_EQ(kill(primary_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitPromoted(*replica_)) << "the replica did not take over";
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
  client::ClientOptions options;
  options.servers = {primary_->address()};
  options.retry_for = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<client::PsClient>> stale =
      client::PsClient::Connect(options);
  ASSERT_OK(stale);
  const absl::Status refused = AddOne(**stale, kTable, kDim, keys_, 7);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("lease"), std::string::npos) << refused;

  // Stopped and started again on its data dir, it does not take the shard
  // back: a replica took its place since (the shard's generation rose).
  primary_->SignalAndWait(SIGTERM);
  std::vector<std::string> flags = EtcdFlags();
  flags.insert(flags.end(), {"--data_dir=" + primary_dir_, "--shard_index=0",
                             "--num_shards=1"});
  EXPECT_EQ(RunServerToExit(flags, primary_dir_ + ".again", absl::Minutes(1)),
            70);
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
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);
  // The replica paused, so that it lags as far as the primary lets it.
  ASSERT_EQ(kill(replica_->pid(), SIGSTOP), 0);
  EXPECT_TRUE(WaitUntil(
      [&] { return Stats(*primary_).replication().lag_entries() >= kMaxLag; },
      absl::Minutes(1), absl::Milliseconds(20)));
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
  std::vector<std::unique_ptr<client::PsClient>> clients;
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

}  // namespace
}  // namespace ps::testing
