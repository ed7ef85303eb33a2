// The fixture of the replication tests: a primary and its replicas as real
// ps_server processes, in data dirs of their own, with the keys the
// tests push and read back.

#ifndef PS_TESTS_REPLICATION_FIXTURE_H_
#define PS_TESTS_REPLICATION_FIXTURE_H_

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
#include "base/wait_until.h"
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

inline constexpr int kDim = 4;
inline constexpr char kTable[] = "t";

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
    return ShardStatsOf(server).replication();
  }

  // Waits until `done(primary's replication stats)`, up to a minute.
  static bool WaitFor(
      const ServerProcess& server,
      const std::function<bool(const ShardStatsResponse::Replication&)>& done) {
    return WaitUntil([&] { return done(Replication(server)); },
                     absl::Minutes(1), absl::Milliseconds(20));
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

}  // namespace ps::testing

#endif  // PS_TESTS_REPLICATION_FIXTURE_H_
