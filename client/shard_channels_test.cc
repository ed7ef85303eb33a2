#include "client/shard_channels.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps::client {
namespace {

// Addresses nothing listens on: a channel connects only when called.
const std::vector<std::string> kServers = {"127.0.0.1:1", "127.0.0.1:2"};

TableSpec Table(const std::string& name, int dim) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  return spec;
}

std::unique_ptr<ShardChannels> Open() {
  auto channels = ShardChannels::Open(kServers, "127.0.0.1:9", {});
  EXPECT_TRUE(channels.ok()) << channels.status();
  return *std::move(channels);
}

TEST(ShardChannelsTest, OpensAStubPerServer) {
  std::unique_ptr<ShardChannels> channels = Open();
  EXPECT_EQ(channels->num_shards(), 2);
  EXPECT_EQ(channels->job_shards(), 2u);
  EXPECT_NE(channels->shard(0), nullptr);
  EXPECT_NE(channels->shard(0), channels->shard(1));
  EXPECT_EQ(channels->coordinator_address(), "127.0.0.1:9");
}

TEST(ShardChannelsTest, RecordTableReplacesASpecOfItsName) {
  std::unique_ptr<ShardChannels> channels = Open();
  EXPECT_EQ(channels->RecordTable(Table("a", 4)), (std::vector<int>{0, 1}));
  channels->RecordTable(Table("b", 8));
  channels->RecordTable(Table("a", 16));
  const ShardChannels::TablesToDeclare to_declare =
      channels->MoveShards(kServers);
  ASSERT_EQ(to_declare.tables.size(), 2u);
  EXPECT_EQ(to_declare.tables[0].name(), "a");
  EXPECT_EQ(to_declare.tables[0].dim(), 16u);
  EXPECT_EQ(to_declare.tables[1].name(), "b");
}

TEST(ShardChannelsTest, TheSameAddressesKeepTheirStubs) {
  std::unique_ptr<ShardChannels> channels = Open();
  const auto stub = channels->shard(1);
  const auto raw_pull = channels->raw_pull(1);
  EXPECT_TRUE(channels->MoveShards(kServers).shards.empty());
  EXPECT_EQ(channels->shard(1), stub);
  EXPECT_EQ(channels->raw_pull(1), raw_pull);
}

TEST(ShardChannelsTest, AShardAtANewAddressIsRedialledAndDeclared) {
  std::unique_ptr<ShardChannels> channels = Open();
  const auto untouched = channels->shard(0);
  const auto moved = channels->shard(1);
  const auto moved_raw_pull = channels->raw_pull(1);
  const ShardChannels::TablesToDeclare to_declare =
      channels->MoveShards({"127.0.0.1:1", "127.0.0.1:3"});
  EXPECT_EQ(to_declare.shards, (std::vector<int>{1}));
  EXPECT_EQ(channels->shard(0), untouched);
  EXPECT_NE(channels->shard(1), moved);
  // Its raw pulls go to the new address too.
  EXPECT_NE(channels->raw_pull(1), moved_raw_pull);
}

TEST(ShardChannelsTest, JoinLeaveAndJoinAgain) {
  std::unique_ptr<ShardChannels> channels = Open();
  // Shard 2 joins.
  EXPECT_EQ(channels->MoveShards({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"})
                .shards,
            (std::vector<int>{2}));
  EXPECT_EQ(channels->num_shards(), 3);
  EXPECT_EQ(channels->job_shards(), 3u);
  const auto third = channels->shard(2);
  // It leaves: known, no longer the job's, so tables are not declared there.
  EXPECT_TRUE(channels->MoveShards(kServers).shards.empty());
  EXPECT_EQ(channels->num_shards(), 3);
  EXPECT_EQ(channels->job_shards(), 2u);
  EXPECT_EQ(channels->RecordTable(Table("a", 4)), (std::vector<int>{0, 1}));
  // It joins again at the same address: its stub kept, but it lacks the
  // tables declared while it was away.
  const ShardChannels::TablesToDeclare to_declare =
      channels->MoveShards({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"});
  EXPECT_EQ(to_declare.shards, (std::vector<int>{2}));
  ASSERT_EQ(to_declare.tables.size(), 1u);
  EXPECT_EQ(channels->shard(2), third);
}

TEST(ShardChannelsTest, JoinsAgainAtANewAddress) {
  std::unique_ptr<ShardChannels> channels = Open();
  channels->MoveShards({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"});
  const auto third = channels->shard(2);
  channels->MoveShards(kServers);  // it leaves
  channels->RecordTable(Table("a", 4));
  const ShardChannels::TablesToDeclare to_declare =
      channels->MoveShards({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:5"});
  EXPECT_EQ(to_declare.shards, (std::vector<int>{2}));
  ASSERT_EQ(to_declare.tables.size(), 1u);
  EXPECT_NE(channels->shard(2), third);
  EXPECT_NE(channels->raw_pull(2), nullptr);
  EXPECT_EQ(channels->num_shards(), 3);
}

TEST(ShardChannelsTest, StubsReadWhileShardsMove) {
  std::unique_ptr<ShardChannels> channels = Open();
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const int shards = channels->num_shards();
        for (int i = 0; i < shards; ++i) {
          EXPECT_NE(channels->shard(i), nullptr);
        }
        reads.fetch_add(1);
      }
    });
  }
  while (reads.load() == 0) std::this_thread::yield();
  for (int round = 0; round < 200; ++round) {
    const std::string moved = absl::StrCat("127.0.0.1:", 100 + round);
    channels->MoveShards({"127.0.0.1:1", moved, "127.0.0.1:4"});
    channels->MoveShards(kServers);
  }
  stop.store(true);
  for (std::thread& reader : readers) reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(channels->num_shards(), 3);
  EXPECT_EQ(channels->job_shards(), 2u);
}

TEST(ShardChannelsTest, MoveCoordinatorOnlyWhenItMoved) {
  std::unique_ptr<ShardChannels> channels = Open();
  const auto stub = channels->coordinator();
  EXPECT_FALSE(channels->MoveCoordinator("127.0.0.1:9"));
  EXPECT_EQ(channels->coordinator(), stub);
  EXPECT_TRUE(channels->MoveCoordinator("127.0.0.1:10"));
  EXPECT_NE(channels->coordinator(), stub);
  EXPECT_EQ(channels->coordinator_address(), "127.0.0.1:10");
}

TEST(ShardChannelsTest, RefusesTlsFilesThatAreNotThere) {
  ChannelOptions options;
  options.tls.ca = "/nonexistent/ca.pem";
  EXPECT_FALSE(ShardChannels::Open(kServers, kServers[0], options).ok());
}

}  // namespace
}  // namespace ps::client
