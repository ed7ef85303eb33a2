#include "net/admin_channel.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace ps::net {
namespace {

// A shard's admin service that answers ShardStats with its index, and only
// to calls carrying `token`.
class FakeShard : public Admin::Service {
 public:
  // Listens on `port` (0: one free).
  FakeShard(uint32_t index, std::string token, int port = 0)
      : index_(index), token_(std::move(token)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~FakeShard() override { server_->Shutdown(); }

  grpc::Status ShardStats(grpc::ServerContext* context,
                          const ShardStatsRequest*,
                          ShardStatsResponse* response) override {
    ++calls_;
    const auto& metadata = context->client_metadata();
    auto found = metadata.find("authorization");
    const std::string sent =
        found == metadata.end()
            ? ""
            : std::string(found->second.data(), found->second.size());
    if (sent != (token_.empty() ? "" : "Bearer " + token_))
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token");
    response->set_shard_index(index_);
    return grpc::Status::OK;
  }

  const std::string& address() const { return address_; }
  int calls() const { return calls_; }

 private:
  const uint32_t index_;
  const std::string token_;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A loopback port a shard just listened on and gave back: nothing listens
// there now.
int FreedPort() {
  FakeShard probe(0, "", 0);
  return std::stoi(probe.address().substr(10));
}

// The status code of a ShardStats call to `channels`' first shard.
grpc::StatusCode ShardStatsCode(const AdminChannels& channels) {
  ShardStatsResponse response;
  return channels.shard(0)
      .ShardStats(channels.Context(absl::Seconds(10)).get(),
                  ShardStatsRequest(), &response)
      .error_code();
}

TEST(AdminChannelsTest, EveryShardIsCalledWithTheToken) {
  std::vector<std::unique_ptr<FakeShard>> shards;
  std::vector<std::string> servers;
  for (uint32_t i = 0; i < 3; ++i) {
    shards.push_back(std::make_unique<FakeShard>(i, "secret"));
    servers.push_back(shards.back()->address());
  }
  auto channels = AdminChannels::Connect(servers, "", TlsFiles(), "secret");
  ASSERT_TRUE(channels.ok()) << channels.status();
  EXPECT_EQ(channels->size(), 3u);
  EXPECT_EQ(channels->coordinator_address(), servers[0]);
  std::vector<grpc::Status> statuses(3);
  std::vector<ShardStatsResponse> responses(3);
  channels->OnEveryShard([&](size_t i) {
    statuses[i] = channels->shard(i).ShardStats(
        channels->Context(absl::Seconds(10)).get(), ShardStatsRequest(),
        &responses[i]);
  });
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_EQ(responses[i].shard_index(), i);
    EXPECT_EQ(shards[i]->calls(), 1);
  }
  ShardStatsResponse coordinator;
  EXPECT_TRUE(channels->coordinator()
                  .ShardStats(channels->Context(absl::Seconds(10)).get(),
                              ShardStatsRequest(), &coordinator)
                  .ok());
  EXPECT_EQ(coordinator.shard_index(), 0u);
}

// A shard that starts listening after the channels are made: a call right
// away fails (calls are fail-fast), one after AwaitConnected() reaches it.
TEST(AdminChannelsTest, AwaitConnectedWaitsForAShardThatComesUp) {
  const int port = FreedPort();
  auto channels = AdminChannels::Connect({absl::StrCat("127.0.0.1:", port)}, "",
                                         TlsFiles(), "");
  ASSERT_TRUE(channels.ok()) << channels.status();
  EXPECT_EQ(ShardStatsCode(*channels), grpc::StatusCode::UNAVAILABLE);
  std::unique_ptr<FakeShard> shard;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    shard = std::make_unique<FakeShard>(0, "", port);
  });
  channels->AwaitConnected(absl::Seconds(30));
  starter.join();
  EXPECT_EQ(ShardStatsCode(*channels), grpc::StatusCode::OK);
}

// A shard that never comes up costs the grace, then fails as before.
TEST(AdminChannelsTest, AwaitConnectedGivesUpAfterTheGrace) {
  auto channels = AdminChannels::Connect(
      {absl::StrCat("127.0.0.1:", FreedPort())}, "", TlsFiles(), "");
  ASSERT_TRUE(channels.ok()) << channels.status();
  const absl::Time start = absl::Now();
  channels->AwaitConnected(absl::Milliseconds(500));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(ShardStatsCode(*channels), grpc::StatusCode::UNAVAILABLE);
}

TEST(AdminChannelsTest, ACallWithoutTheTokenIsRefused) {
  FakeShard shard(0, "secret");
  auto channels = AdminChannels::Connect({shard.address()}, shard.address(),
                                         TlsFiles(), "");
  ASSERT_TRUE(channels.ok()) << channels.status();
  EXPECT_EQ(ShardStatsCode(*channels), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(AdminChannelsTest, NoShardOrAPlaintextTokenOffLoopbackIsRefused) {
  EXPECT_EQ(AdminChannels::Connect({}, "", TlsFiles(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing is sent: the refusal comes before any channel.
  const auto remote =
      AdminChannels::Connect({"10.1.2.3:50051"}, "", TlsFiles(), "secret");
  EXPECT_FALSE(remote.ok());
  const auto named_coordinator = AdminChannels::Connect(
      {"127.0.0.1:1"}, "10.1.2.3:50051", TlsFiles(), "secret");
  EXPECT_FALSE(named_coordinator.ok());
}

}  // namespace
}  // namespace ps::net
