// The worker's client against a real shard: pulls split into several
// requests per shard come back in the caller's order, also when the client
// reuses the replies of earlier, larger or smaller, pulls, and when pulls
// run from several threads at once.

#include "client/ps_client.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/slot_map.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/test_client.h"

namespace ps::testing {
namespace {

constexpr int kDim = 4;
constexpr uint64_t kKeys = 1000;

// What the push below leaves in row `key`: float d is key * 10 + d.
float Expected(uint64_t key, int d) {
  return static_cast<float>(key * 10 + static_cast<uint64_t>(d));
}

// Pulls `keys` and checks every row; returns false (with the failures
// reported) on the first wrong one.
bool PullAndCheck(client::PsClient& client, const std::vector<uint64_t>& keys) {
  std::vector<float> rows(keys.size() * kDim, -1.0f);
  const client::PsClient::TableRows pull = {"t", keys, kDim, rows.data()};
  const absl::Status pulled = client.Pull({pull});
  EXPECT_TRUE(pulled.ok()) << pulled;
  if (!pulled.ok()) return false;
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int d = 0; d < kDim; ++d) {
      EXPECT_EQ(rows[i * kDim + d], Expected(keys[i], d))
          << "key " << keys[i] << " float " << d;
      if (rows[i * kDim + d] != Expected(keys[i], d)) return false;
    }
  }
  return true;
}

// Pushes a gradient of 1 to every float of `keys`' rows of table "t", as
// worker 0 at clock 1.
absl::Status PushOnes(client::PsClient& client,
                      const std::vector<uint64_t>& keys) {
  std::vector<float> gradients(keys.size() * kDim, 1.0f);
  client::TrainingClient::TableGradients push;
  push.table = "t";
  push.keys = keys;
  push.gradients = gradients;
  push.dim = kDim;
  return client.Push({&push, 1}, 0, /*clock=*/1);
}

TEST(PsClientTest, PullsOfEverySizeReadTheirOwnRows) {
  const std::string dir = FreshTestDir("ps_client");
  auto server = ServerProcess::Start({"--data_dir=" + dir});
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions options;
  options.servers = {(*server)->address()};
  options.max_keys_per_request = 64;  // a pull of 1000 keys: 16 requests
  auto client = client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(
      (*client)
          ->DeclareTable(SgdTableSpec("t", kDim, 1.0f, InitializerSpec::ZEROS))
          .ok());
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  for (uint64_t key = 0; key < kKeys; ++key) {
    keys.push_back(key);
    for (int d = 0; d < kDim; ++d) gradients.push_back(-Expected(key, d));
  }
  const client::PsClient::TableGradients push = {"t", keys, gradients, kDim};
  ASSERT_TRUE((*client)->Push({push}, /*worker=*/0, /*clock=*/0).ok());

  ASSERT_TRUE(PullAndCheck(**client, keys));
  // Smaller, then larger again, in another order: the replies kept from
  // the pulls before hold other rows and sizes.
  ASSERT_TRUE(PullAndCheck(**client, {999, 3, 500}));
  std::vector<uint64_t> reversed(keys.rbegin(), keys.rend());
  ASSERT_TRUE(PullAndCheck(**client, reversed));
  ASSERT_TRUE(PullAndCheck(**client, {7}));

  // Several pulls at once, each of its own keys and size.
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        std::vector<uint64_t> some;
        for (uint64_t key = t; key < kKeys; key += 3 + t + round) {
          some.push_back(key);
        }
        if (!PullAndCheck(**client, some)) return;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(PsClientTest, PullsWithStateAreSplitToFitTheShardsMessageLimit) {
  // Rows of 1000 floats under Adam carry 2002 floats of state: 200 keys a
  // request make a 0.8 MB plain reply but a 2.4 MB one with state, over the
  // shard's 1 MB. The client sends fewer keys a request with state.
  constexpr int kWide = 1000;
  const std::string dir = FreshTestDir("ps_client_state");
  auto server =
      ServerProcess::Start({"--data_dir=" + dir, "--max_message_mb=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions options;
  options.servers = {(*server)->address()};
  options.max_keys_per_request = 200;
  auto client = client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TableSpec spec = SgdTableSpec("adam", kWide, 1.0f, InitializerSpec::ZEROS);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.0f);  // the default
  ASSERT_TRUE((*client)->DeclareTable(spec).ok());
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 600; ++key) keys.push_back(key);
  std::vector<float> rows(keys.size() * kWide);
  ASSERT_TRUE((*client)
                  ->Pull({client::PsClient::TableRows{"adam", keys, kWide,
                                                      rows.data()}})
                  .ok());
  const int state_floats = 2 * kWide + 2;
  std::vector<float> with_state(keys.size() * (kWide + state_floats), -1.0f);
  client::PsClient::PulledOptimizer optimizer;
  client::PsClient::TableRows pull = {"adam", keys, kWide, with_state.data()};
  pull.optimizer = &optimizer;
  pull.state_floats = state_floats;
  const absl::Status pulled = (*client)->Pull({pull});
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(optimizer.spec.kind(), OptimizerSpec::ADAM);
  // Fresh Adam state: zero moments, then the two powers of the betas at 1.
  const float* last = &with_state[(keys.size() - 1) * (kWide + state_floats)];
  EXPECT_EQ(last[kWide], 0.0f);
  EXPECT_EQ(last[kWide + 2 * kWide], 1.0f);
  EXPECT_EQ(last[kWide + 2 * kWide + 1], 1.0f);
}

// A shard that cancels the first push it gets (as one shutting down
// cancels the calls it still has), then takes pushes.
class CancellingShard : public ParameterServer::Service {
 public:
  grpc::Status Push(grpc::ServerContext*, const PushRequest*,
                    PushResponse*) override {
    if (pushes_.fetch_add(1) == 0) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
    }
    return grpc::Status::OK;
  }
  int pushes() const { return pushes_.load(); }

 private:
  std::atomic<int> pushes_{0};
};

TEST(PsClientTest, APushTheShardCancelledIsRetried) {
  CancellingShard shard;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&shard);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  client::ClientOptions options;
  options.servers = {"127.0.0.1:" + std::to_string(port)};
  options.initial_backoff = absl::Milliseconds(10);
  options.retry_for = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<uint64_t> keys = {1, 2, 3};
  const absl::Status pushed = PushOnes(**client, keys);
  EXPECT_TRUE(pushed.ok()) << pushed;
  EXPECT_EQ(shard.pushes(), 2);
  server->Shutdown();
}

// A shard that answers every push UNAVAILABLE, and notes when each came.
class UnavailableShard : public ParameterServer::Service {
 public:
  grpc::Status Push(grpc::ServerContext*, const PushRequest*,
                    PushResponse*) override {
    absl::MutexLock lock(&mu_);
    arrivals_.push_back(absl::Now());
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not yet");
  }
  std::vector<absl::Time> arrivals() {
    absl::MutexLock lock(&mu_);
    return arrivals_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Time> arrivals_ ABSL_GUARDED_BY(mu_);
};

// Retries wait between half and all of a backoff that doubles from
// initial_backoff up to 2 s (client/ps_client.h), then give up at
// retry_for. Load only lengthens a wait, so every wait is at least half its
// backoff; with jitter, some of the five or more waits of at least 0.5 s
// are well below their backoff (each is with probability about 0.8; a
// client without jitter never is).
TEST(PsClientTest, RetriesBackOffWithJitterAndGiveUp) {
  UnavailableShard shard;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&shard);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  client::ClientOptions options;
  options.servers = {"127.0.0.1:" + std::to_string(port)};
  options.initial_backoff = absl::Milliseconds(250);
  options.retry_for = absl::Seconds(9);
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time began = absl::Now();
  const absl::Status pushed = PushOnes(**client, {1, 2, 3});
  EXPECT_TRUE(absl::IsUnavailable(pushed)) << pushed;
  EXPECT_NE(pushed.message().find("gave up retrying"), std::string::npos)
      << pushed;
  EXPECT_LT(absl::Now() - began, absl::Seconds(9) + absl::Seconds(5));
  server->Shutdown();

  const std::vector<absl::Time> arrivals = shard.arrivals();
  ASSERT_GE(arrivals.size(), 7u);
  absl::Duration backoff = options.initial_backoff;
  int waits_of_half_a_second = 0, well_below = 0;
  for (size_t i = 1; i < arrivals.size(); ++i) {
    const absl::Duration wait = arrivals[i] - arrivals[i - 1];
    EXPECT_GE(wait, backoff / 2 - absl::Milliseconds(5))
        << "retry " << i << " of backoff " << backoff;
    if (backoff >= absl::Milliseconds(500)) {
      ++waits_of_half_a_second;
      if (wait < backoff * 0.9) ++well_below;
    }
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  EXPECT_GE(waits_of_half_a_second, 5);
  EXPECT_GE(well_below, 1) << "no wait below 0.9 of its backoff: no jitter";
}

// A shard that takes every push and declaration, and counts them.
class AcceptingShard : public ParameterServer::Service {
 public:
  grpc::Status Push(grpc::ServerContext*, const PushRequest*,
                    PushResponse*) override {
    ++pushes_;
    return grpc::Status::OK;
  }
  grpc::Status DeclareTable(grpc::ServerContext*, const DeclareTableRequest*,
                            DeclareTableResponse*) override {
    ++declared_;
    return grpc::Status::OK;
  }
  int pushes() const { return pushes_.load(); }
  int declared() const { return declared_.load(); }

 private:
  std::atomic<int> pushes_{0};
  std::atomic<int> declared_{0};
};

// Starts `service` on a free loopback port; its address in *address.
std::unique_ptr<grpc::Server> Serve(grpc::Service* service,
                                    std::string* address) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

// A table whose later columns train with another optimizer is refused by
// a shard of this build only if it cannot keep it; a shard that predates
// later_columns (one that answers no row_floats) would train every column
// with the first optimizer: the client says so rather than train another
// model.
TEST(PsClientTest, TablesOfSeveralOptimizersNeedShardsThatKeepThem) {
  TableSpec spec;
  spec.set_name("joined");
  spec.set_dim(3);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  LaterColumnsOptimizer* later = spec.mutable_optimizer()->add_later_columns();
  later->set_first_column(2);
  later->mutable_optimizer()->set_kind(OptimizerSpec::FTRL);
  client::ClientOptions options;
  options.retry_for = absl::Seconds(10);

  AcceptingShard old_shard;
  std::string old_address;
  std::unique_ptr<grpc::Server> old_server = Serve(&old_shard, &old_address);
  options.servers = {old_address};
  absl::StatusOr<std::unique_ptr<client::PsClient>> old_client =
      client::PsClient::Connect(options);
  ASSERT_TRUE(old_client.ok()) << old_client.status();
  const absl::Status refused = (*old_client)->DeclareTable(spec);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("predates"), std::string::npos) << refused;
  TableSpec plain = spec;
  plain.mutable_optimizer()->clear_later_columns();
  EXPECT_TRUE((*old_client)->DeclareTable(plain).ok());
  old_server->Shutdown();

  auto shard = ServerProcess::Start(
      {"--data_dir=" + FreshTestDir("several_optimizers")});
  ASSERT_TRUE(shard.ok()) << shard.status();
  options.servers = {(*shard)->address()};
  absl::StatusOr<std::unique_ptr<client::PsClient>> new_client =
      client::PsClient::Connect(options);
  ASSERT_TRUE(new_client.ok()) << new_client.status();
  EXPECT_TRUE((*new_client)->DeclareTable(spec).ok());
}

// Under --etcd a job can have fewer shards than a client once knew (the
// last one drained, and it left). A shard that then moves (a replica took
// over elsewhere) is still found: a lookup that lists fewer shards than the
// client knows is the job's count now, not shards missing; and a table
// declared then goes to the job's shards, not to the one that left.
TEST(PsClientTest, AShardThatMovedIsFoundAfterTheJobShrank) {
  UnavailableShard gone;
  AcceptingShard moved, other, left;
  std::string gone_address, moved_address, other_address, left_address;
  std::unique_ptr<grpc::Server> servers[] = {
      Serve(&gone, &gone_address), Serve(&moved, &moved_address),
      Serve(&other, &other_address), Serve(&left, &left_address)};
  for (const auto& server : servers) ASSERT_NE(server, nullptr);
  client::ClientOptions options;
  options.servers = {gone_address, other_address, left_address};
  // The job now: shard 0 elsewhere, shard 1 where it was, no shard 2.
  std::atomic<int> lookups{0};
  options.find_shards = [&]() -> absl::StatusOr<std::vector<std::string>> {
    ++lookups;
    return std::vector<std::string>{moved_address, other_address};
  };
  options.initial_backoff = absl::Milliseconds(50);
  options.retry_for = absl::Seconds(15);
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  // Keys of shard 0 alone.
  const SlotMap map = SlotMap::Initial(3);
  std::vector<uint64_t> keys;
  for (uint64_t key = 1; keys.size() < 8; ++key)
    if (map.ShardForKey(key) == 0) keys.push_back(key);
  const absl::Status pushed = PushOnes(**client, keys);
  EXPECT_TRUE(pushed.ok()) << pushed;
  EXPECT_GE(lookups.load(), 1);
  EXPECT_EQ(moved.pushes(), 1);
  const absl::Status declared = (*client)->DeclareTable(
      SgdTableSpec("u", kDim, 1.0f, InitializerSpec::ZEROS));
  EXPECT_TRUE(declared.ok()) << declared;
  EXPECT_EQ(moved.declared(), 1);
  EXPECT_EQ(other.declared(), 1);
  EXPECT_EQ(left.declared(), 0);
  for (const auto& server : servers) server->Shutdown();
}

}  // namespace
}  // namespace ps::testing
