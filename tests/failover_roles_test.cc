// Failover where the shard's processes find their roles in etcd
// (ps_server --replicas): each process takes the role etcd and its data dir
// give it across failovers and restarts, and only the primary restores a
// checkpoint while its replica copies it.

#include "base/wait_until.h"
#include "tests/failover_fixture.h"

namespace ps::testing {
namespace {

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

  ASSERT_TRUE(WaitInSync(processes[primary].get()));
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers = StartPushers(clients);
  for (auto& pusher : pushers) pusher->WaitForMore(10);

  // Loses the primary by `lose`; once the other took over (refusing
  // pushes, transiently, with no replica in sync), calls `then` on the lost
  // process, starts it again on its dir and checks that it became the new
  // primary's replica, in sync, and that pushes go on.
  auto fail_over = [&](const std::function<void(ServerProcess&)>& lose,
                       const std::function<void(ServerProcess&)>& then) {
    lose(*processes[primary]);
    ASSERT_TRUE(WaitPromoted(*processes[1 - primary]))
        << "no replica took over";
    then(*processes[primary]);
    processes[primary] = start(primary);
    ASSERT_NE(processes[primary], nullptr);
    EXPECT_EQ(Stats(*processes[primary]).replication().role(),
              absl::StrCat("replica of ", processes[1 - primary]->address()));
    primary = 1 - primary;
    ASSERT_TRUE(WaitInSync(processes[primary].get()));
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
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Stats(*processes[primary]).replication().lag_entries() == 0;
      },
      absl::Minutes(1), absl::Milliseconds(20)));
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
  std::vector<std::unique_ptr<client::PsClient>> clients;
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
  ServerProcess& replica = *processes[1 - primary];
  if (!WaitPromoted(replica)) {
    int code = 0;
    const bool exited = replica.Exited(&code);
    const std::string log = ReadFile(replica.log_path());
    FAIL() << "the replica did not take over"
           << (exited ? absl::StrCat(" (it exited ", code, ")") : "")
           << "; the end of its log:\n"
           << log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
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
  std::vector<std::unique_ptr<client::PsClient>> clients;
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
    ASSERT_TRUE(
        WaitUntil([&] { return !cluster::FindShard(*client_, kJob, 0).ok(); },
                  absl::Seconds(30), absl::Milliseconds(100)));
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
  ASSERT_TRUE(
      WaitUntil([&] { return !(cluster::FindShard(*client_, kJob, 0).ok()); },
                absl::Seconds(30), absl::Milliseconds(100)));
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
  EXPECT_EQ(
      RunServerToExit(ReplicasFlags(ahead), ahead + ".log", absl::Minutes(1)),
      70);
  EXPECT_NE(ReadFile(ahead + ".log").find("etcd lost its state"),
            std::string::npos)
      << ReadFile(ahead + ".log");
  EXPECT_TRUE(std::filesystem::exists(ahead + "/GENERATION"));
}

}  // namespace
}  // namespace ps::testing
