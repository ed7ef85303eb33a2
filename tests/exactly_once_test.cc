// Exactly-once pushes against real processes: the shard is started with a
// fault-injection point that SIGKILLs it right after a push is in its push
// log and before the push is answered, so the worker's client never hears
// back and retries it against the restarted shard. Every update must be
// applied exactly once: the retried push is recognised (from the replayed
// push log) and answered, not applied again.

#include <signal.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/test_client.h"

namespace ps::testing {
namespace {

constexpr int kPushes = 30;
constexpr int kKeys = 200;

TEST(ExactlyOnceTest, PushesRetriedAcrossAShardKilledBeforeAnsweringApplyOnce) {
  const std::string dir = FreshTestDir("exactly_once");
  const std::vector<std::string> flags = {"--data_dir=" + dir,
                                          "--durability=wal"};
  // Killed after the 5th push record, then again after 5 more.
  std::vector<std::string> killing = flags;
  killing.push_back("--testing_kill_after_push_records=5");
  auto server = ServerProcess::Start(killing);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::string port = address.substr(address.rfind(':') + 1);

  client::ClientOptions options;
  options.servers = {address};
  options.retry_for = absl::Seconds(60);
  options.initial_backoff = absl::Milliseconds(20);
  auto client = client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)
                  ->DeclareTable(
                      SgdTableSpec("counts", 1, 1.0f, InitializerSpec::ZEROS))
                  .ok());

  // Each push adds exactly 1 to every key (SGD, rate 1, gradient -1).
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < kKeys; ++key) keys.push_back(key);
  const std::vector<float> minus_one(kKeys, -1.0f);
  std::atomic<int> acknowledged{0};
  absl::Status push_error;
  std::thread pusher([&] {
    for (int i = 0; i < kPushes; ++i) {
      const client::PsClient::TableGradients push = {"counts", keys, minus_one,
                                                     1};
      absl::Status pushed = (*client)->Push({push}, /*worker=*/0, i);
      if (!pushed.ok()) {
        push_error = pushed;
        return;
      }
      ++acknowledged;
    }
  });

  // Joined on every way out of the test, failed assertions included.
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{pusher};

  int kills = 0;
  for (int restart = 0; restart < 2; ++restart) {
    EXPECT_EQ((*server)->Wait(absl::Seconds(60)), 128 + SIGKILL)
        << "the shard did not die at its fault-injection point";
    ++kills;
    std::vector<std::string> next = restart == 0 ? killing : flags;
    next.push_back("--listen=127.0.0.1:" + port);
    server = ServerProcess::Start(next);
    ASSERT_TRUE(server.ok()) << server.status();
  }
  pusher.join();
  ASSERT_TRUE(push_error.ok()) << push_error;
  EXPECT_EQ(acknowledged.load(), kPushes);

  auto stub = ParameterServer::NewStub((*server)->channel());
  std::vector<float> counts;
  ASSERT_TRUE(PullRows(*stub, "counts", keys, &counts).ok());
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(counts[k], static_cast<float>(kPushes))
        << "key " << k << ": an update was lost or applied twice";
  }
  // The retries were recognised as such by the shard that answered them.
  auto admin = Admin::NewStub((*server)->channel());
  grpc::ClientContext context;
  ShardStatsResponse stats;
  ASSERT_TRUE(admin->ShardStats(&context, ShardStatsRequest(), &stats).ok());
  EXPECT_EQ(kills, 2);
  EXPECT_GE(stats.duplicate_pushes(), 1u);
}

}  // namespace
}  // namespace ps::testing
