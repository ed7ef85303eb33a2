// File: tests/failover_fixture.h
//
// What the failover tests share: etcd started for each test, a primary and
// its replica under --etcd (ps_server --replica_of_shard=0), pushers that
// count what was acknowledged, and the checks of a promotion.

#ifndef PS_TESTS_FAILOVER_FIXTURE_H_
#define PS_TESTS_FAILOVER_FIXTURE_H_

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
#include "base/wait_until.h"
#include "client/ps_client.h"
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
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_files.h"

namespace ps::testing {

inline constexpr char kJob[] = "failover";
inline constexpr int kDim = 4;
inline constexpr char kTable[] = "t";

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
  std::unique_ptr<client::PsClient> Connect(uint64_t incarnation) {
    return ConnectThroughEtcd(*client_, kJob, incarnation, kTable, kDim);
  }

  static ShardStatsResponse Stats(const ServerProcess& server) {
    return ShardStatsOf(server);
  }

  // Waits up to a minute until `server` counts `count` replicas in sync
  // (the primary's one replica by default).
  bool WaitInSync(const ServerProcess* server = nullptr, int count = 1) {
    const ServerProcess& primary = server != nullptr ? *server : *primary_;
    return WaitUntil(
        [&] {
          return Stats(primary).replication().replicas_in_sync() ==
                 static_cast<uint32_t>(count);
        },
        absl::Minutes(1), absl::Milliseconds(20));
  }

  // Waits up to `timeout` until `server` serves as its shard's primary.
  static bool WaitPromoted(const ServerProcess& server,
                           absl::Duration timeout = absl::Minutes(1)) {
    return WaitUntil(
        [&] { return Stats(server).replication().role() == "primary"; },
        timeout, absl::Milliseconds(50));
  }

  // The first float of every 50th key's row on `server` (0 where none).
  std::vector<float> Values(const ServerProcess& server) {
    return CountedValues(server.channel(), kTable, keys_);
  }

  // Two clients pushing; `incarnation` (and the next) are their workers'
  // incarnations: new clients of the same workers need larger ones, or the
  // shard takes their pushes for retries of the old ones'.
  std::vector<std::unique_ptr<CountingPusher>> StartPushers(
      std::vector<std::unique_ptr<client::PsClient>>& clients,
      uint64_t incarnation = 100) {
    std::vector<std::unique_ptr<CountingPusher>> pushers;
    for (uint32_t w = 0; w < 2; ++w) {
      clients.push_back(Connect(incarnation + w));
      EXPECT_NE(clients.back(), nullptr);
      pushers.push_back(std::make_unique<CountingPusher>(
          clients.back().get(), keys_,
          [w](client::PsClient& c, const std::vector<uint64_t>& k) {
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
    ASSERT_TRUE(WaitInSync(primary_.get(), 2))
        << "the replicas are not in sync";
    std::unique_ptr<client::PsClient> client = Connect(100);
    ASSERT_NE(client, nullptr);
    for (int i = 0; i < 5; ++i)
      ASSERT_OK(AddOne(*client, kTable, kDim, keys_, 0));

    ASSERT_EQ(kill((*dropped)->pid(), SIGSTOP), 0);
    ASSERT_TRUE(WaitUntil(
        [&] { return Stats(*primary_).replication().replicas() == 1; },
        absl::Minutes(1), absl::Milliseconds(20)))
        << "the paused replica was not dropped";
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
    ASSERT_TRUE(WaitPromoted(**dropped, absl::Minutes(2)))
        << "the replica was not promoted";
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

}  // namespace ps::testing

#endif  // PS_TESTS_FAILOVER_FIXTURE_H_
