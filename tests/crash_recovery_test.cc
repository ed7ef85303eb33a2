// Under --durability=wal an acknowledged push survives kill -9: clients push
// continuously, the server is SIGKILLed mid-stream, restarted on the same
// directory (which replays the push log), and every acknowledged update is
// counted back, once: a replayed update applied twice fails too.

#include <signal.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/wait_until.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"
#include "tests/test_client.h"

namespace ps::testing {
namespace {

constexpr int kClients = 4;

// Pushes from kClients clients, keys_per_client keys each, until the server
// started with `extra_flags` is killed after `kill_after` acknowledged
// pushes; then checks every key's count after a restart.
void PushKillRestartAndCount(const std::string& name,
                             const std::vector<std::string>& extra_flags,
                             int keys_per_client, int kill_after) {
  const std::string dir = FreshTestDir(name);
  std::vector<std::string> flags = {"--data_dir=" + dir, "--durability=wal",
                                    "--cache_mb=1"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    auto stub = ParameterServer::NewStub((*server)->channel());
    // Each push adds exactly 1 to every key it names: SGD, rate 1, gradient -1.
    ASSERT_TRUE(DeclareTable(*stub, SgdTableSpec("counts", 1, 1.0f,
                                                 InitializerSpec::ZEROS))
                    .ok());
  }

  std::vector<int> acknowledged(kClients, 0);
  std::atomic<int> total{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto stub = ParameterServer::NewStub((*server)->channel());
      std::vector<uint64_t> keys;
      for (int k = 0; k < keys_per_client; ++k) keys.push_back(c * 1000000 + k);
      const std::vector<float> minus_one(keys.size(), -1.0f);
      while (PushRows(*stub, "counts", keys, minus_one).ok()) {
        ++acknowledged[c];
        ++total;
      }
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return total.load() >= kill_after; },
                        absl::Seconds(60), absl::Milliseconds(5)))
      << "pushes too slow to reach the kill point";
  EXPECT_EQ((*server)->SignalAndWait(SIGKILL), 128 + SIGKILL);
  for (auto& client : clients) client.join();

  auto restarted = ServerProcess::Start(flags);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto stub = ParameterServer::NewStub((*restarted)->channel());
  int64_t found_updates = 0;
  for (int c = 0; c < kClients; ++c) {
    std::vector<uint64_t> keys;
    for (int k = 0; k < keys_per_client; ++k) keys.push_back(c * 1000000 + k);
    std::vector<float> counts;
    ASSERT_TRUE(PullRows(*stub, "counts", keys, &counts).ok());
    for (int k = 0; k < keys_per_client; ++k) {
      // At least every acknowledged push; at most one more, the push that
      // was in flight when the server died.
      ASSERT_GE(counts[k], acknowledged[c]) << "client " << c << " key " << k;
      ASSERT_LE(counts[k], acknowledged[c] + 1)
          << "client " << c << " key " << k;
      found_updates += static_cast<int64_t>(counts[k]);
    }
  }
  // Counted from the rows themselves: every acknowledged update, and at
  // most the one push per client that was in flight.
  std::printf(
      "acknowledged pushes: %d (x%d keys); %lld row updates found after kill "
      "-9\n",
      total.load(), keys_per_client, static_cast<long long>(found_updates));
  EXPECT_GE(found_updates, int64_t{total.load()} * keys_per_client);
  EXPECT_LE(found_updates, int64_t{total.load() + kClients} * keys_per_client);
}

TEST(CrashRecoveryTest, NoAcknowledgedPushIsLostAfterKill9) {
  // Everything fits the hot tier: the rows are only in the push log.
  PushKillRestartAndCount("crash_recovery", {}, 256, 400);
}

TEST(CrashRecoveryTest, NoPushIsLostOrDoubledWhenEvictionsWriteRowsBack) {
  // 4 x 4096 rows in a 1 MiB hot tier of one stripe: every push evicts dirty
  // rows, which writes the stripe back and cuts its log mid-stream.
  PushKillRestartAndCount("crash_recovery_evicting", {"--hot_tier_stripes=1"},
                          4096, 100);
}

TEST(CrashRecoveryTest, PeriodicWriteBacksCutTheLogWithoutLosingPushes) {
  PushKillRestartAndCount("crash_recovery_write_back", {"--write_back_ms=20"},
                          256, 400);
}

TEST(CrashRecoveryTest, WriteBacksInFlightAndEvictionsTogether) {
  // Write-backs run outside the stripe's lock while pushes keep updating and
  // evicting rows of the same stripe.
  PushKillRestartAndCount("crash_recovery_both",
                          {"--hot_tier_stripes=1", "--write_back_ms=20"}, 4096,
                          100);
}

}  // namespace
}  // namespace ps::testing
