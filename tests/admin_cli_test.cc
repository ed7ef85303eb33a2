// ps_admin against real ps_server processes: tables, rows and errors,
// --json output, a learning rate set live, a table dropped only when no
// worker holds a lease, and stats and tables that add up every shard.

#include <string>
#include <thread>
#include <vector>

#include "base/initializer.h"
#include "base/routing.h"
#include "base/wait_until.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/server_integration_fixture.h"
#include "tests/server_process.h"
#include "tests/test_client.h"

namespace ps::testing {
namespace {

TEST_F(ServerIntegrationTest, AdminCliShowsTablesRowsAndErrors) {
  const std::vector<uint64_t> keys = Keys(3);
  ASSERT_TRUE(
      PushRows(*stub_, kTable, keys, std::vector<float>(3 * kDim, 1.0f)).ok());
  int code = -1;
  const std::string tables = RunAdmin(server_->address(), {"tables"}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_NE(tables.find(kTable), std::string::npos) << tables;
  const std::string row = RunAdmin(server_->address(),
                                   {"row", "--table=" + std::string(kTable),
                                    "--key=" + std::to_string(keys[0])},
                                   &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(row.rfind("stored [", 0), 0u) << row;
  RunAdmin(server_->address(), {"row", "--table=no_such_table", "--key=1"},
           &code);
  EXPECT_NE(code, 0);
  RunAdmin(server_->address(), {"bogus"}, &code);
  EXPECT_NE(code, 0);
}

TEST_F(ServerIntegrationTest, AdminCliSetsALearningRateLive) {
  const std::vector<uint64_t> keys = Keys(2);
  const std::vector<float> initial = MustPull(*stub_, keys);
  const std::vector<float> ones(2 * kDim, 1.0f);
  ASSERT_TRUE(PushRows(*stub_, kTable, keys, ones).ok());
  int code = -1;
  const std::string set = RunAdmin(
      server_->address(),
      {"set-lr", "--table=emb", "--learning_rate=0.125", "--json"}, &code);
  ASSERT_EQ(code, 0) << set;
  const google::protobuf::Struct answer = ParseJson(set);
  const google::protobuf::Struct& shard =
      Field(answer, "shards").list_value().values(0).struct_value();
  EXPECT_EQ(Field(shard, "previous_learning_rate").number_value(), 0.5);
  // The next push takes the new rate: 0.5 + 0.125 in all.
  ASSERT_TRUE(PushRows(*stub_, kTable, keys, ones).ok());
  EXPECT_FLOAT_EQ(MustPull(*stub_, keys)[0], initial[0] - 0.625f);
  const google::protobuf::Struct tables =
      ParseJson(RunAdmin(server_->address(), {"tables", "--json"}, &code));
  const google::protobuf::Struct& table =
      Field(tables, "tables").list_value().values(0).struct_value();
  EXPECT_EQ(Field(table, "learning_rate").number_value(), 0.125);
  EXPECT_EQ(Field(table, "declared_learning_rate").number_value(), 0.5);
  // It survives a restart.
  stub_.reset();
  EXPECT_EQ(server_->SignalAndWait(SIGTERM), 0);
  server_ = Start();
  stub_ = ParameterServer::NewStub(server_->channel());
  ASSERT_TRUE(PushRows(*stub_, kTable, keys, ones).ok());
  EXPECT_FLOAT_EQ(MustPull(*stub_, keys)[0], initial[0] - 0.75f);
  // Bad input changes nothing.
  RunAdmin(server_->address(), {"set-lr", "--table=emb", "--learning_rate=-1"},
           &code);
  EXPECT_EQ(code, 64);  // a bad flag
  RunAdmin(server_->address(), {"set-lr", "--table=nope", "--learning_rate=1"},
           &code);
  EXPECT_EQ(code, 70);  // refused by the shard (no such table)
  ASSERT_TRUE(PushRows(*stub_, kTable, keys, ones).ok());
  EXPECT_FLOAT_EQ(MustPull(*stub_, keys)[0], initial[0] - 0.875f);
}

TEST_F(ServerIntegrationTest, AdminCliDropsATableOnlyWhenNoWorkerHoldsALease) {
  const std::vector<uint64_t> keys = Keys(100);
  ASSERT_TRUE(
      PushRows(*stub_, kTable, keys, std::vector<float>(100 * kDim, 1.0f))
          .ok());
  // A worker that holds a lease (this shard coordinates).
  {
    grpc::ClientContext context;
    ClockRequest request;
    request.set_worker(3);
    request.set_lease_ms(60000);
    request.set_incarnation(1);
    ClockResponse response;
    ASSERT_TRUE(stub_->Clock(&context, request, &response).ok());
  }
  int code = -1;
  RunAdmin(server_->address(), {"drop-table", "--table=emb"}, &code);
  EXPECT_EQ(code, 70);  // refused: a worker holds a lease
  EXPECT_EQ(MustPull(*stub_, keys).size(), keys.size() * kDim)
      << "refused, yet the table went";
  const std::string dropped = RunAdmin(
      server_->address(), {"drop-table", "--table=emb", "--force"}, &code);
  EXPECT_EQ(code, 0) << dropped;
  std::vector<float> rows;
  EXPECT_EQ(PullRows(*stub_, kTable, keys, &rows).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::string tables = RunAdmin(server_->address(), {"tables"}, &code);
  EXPECT_EQ(tables.find("emb"), std::string::npos) << tables;
  // Again: no shard has it.
  RunAdmin(server_->address(), {"drop-table", "--table=emb", "--force"}, &code);
  EXPECT_EQ(code, 70);
  // Gone after a restart too; declaring it again starts from initial rows.
  stub_.reset();
  EXPECT_EQ(server_->SignalAndWait(SIGTERM), 0);
  server_ = Start();
  stub_ = ParameterServer::NewStub(server_->channel());
  EXPECT_EQ(PullRows(*stub_, kTable, keys, &rows).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(DeclareTable(*stub_, SgdTableSpec(kTable, kDim, 0.5f)).ok());
  Initializer initializer(SgdTableSpec(kTable, kDim, 0.5f).initializer());
  std::vector<float> expected(kDim);
  initializer.Fill(keys[0], absl::MakeSpan(expected));
  EXPECT_EQ(MustPull(*stub_, {keys[0]}), expected);
}

TEST(AdminCliClusterTest, StatsAndTablesAddUpEveryShard) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    auto server = ServerProcess::Start(
        {"--data_dir=" + FreshTestDir("admin_cluster_" + std::to_string(i)),
         "--shard_index=" + std::to_string(i), "--num_shards=2"});
    ASSERT_TRUE(server.ok()) << server.status();
    addresses.push_back((*server)->address());
    servers.push_back(std::move(server).value());
  }
  const std::string cluster = addresses[0] + "," + addresses[1];
  // Shard i gets 10 * (i + 1) pulls of 100 keys and one push of i + 1 keys.
  for (int i = 0; i < 2; ++i) {
    auto stub = ParameterServer::NewStub(servers[i]->channel());
    ASSERT_TRUE(DeclareTable(*stub, SgdTableSpec(kTable, kDim, 0.5f)).ok());
    std::vector<uint64_t> keys;
    for (uint64_t key = 0; keys.size() < 100; ++key)
      if (ShardForKey(key, 2) == static_cast<uint32_t>(i)) keys.push_back(key);
    std::vector<float> rows;
    for (int p = 0; p < 10 * (i + 1); ++p)
      ASSERT_TRUE(PullRows(*stub, kTable, keys, &rows).ok());
    keys.resize(i + 1);
    ASSERT_TRUE(PushRows(*stub, kTable, keys,
                         std::vector<float>(keys.size() * kDim, 1.0f))
                    .ok());
  }
  int code = -1;
  const google::protobuf::Struct stats = ParseJson(
      RunAdmin(cluster, {"stats", "--json", "--interval_s=0"}, &code));
  EXPECT_EQ(code, 0);
  EXPECT_EQ(Field(stats, "shards_answered").number_value(), 2);
  const google::protobuf::Struct& total = Field(stats, "total").struct_value();
  EXPECT_EQ(Field(total, "rows_pulled").number_value(), 3000);
  EXPECT_EQ(Field(total, "rows_pushed").number_value(), 3);
  EXPECT_EQ(Field(total, "pull_requests").number_value(), 30);
  bool saw_pull = false;
  for (const auto& method : Field(stats, "methods").list_value().values()) {
    const google::protobuf::Struct& m = method.struct_value();
    if (Field(m, "method").string_value() != "/ps.ParameterServer/Pull")
      continue;
    saw_pull = true;
    EXPECT_EQ(Field(m, "calls").number_value(), 30);
    EXPECT_EQ(Field(m, "errors").number_value(), 0);
    EXPECT_GT(Field(m, "p50_seconds").number_value(), 0);
    EXPECT_GE(Field(m, "p99_seconds").number_value(),
              Field(m, "p50_seconds").number_value());
    EXPECT_LT(Field(m, "p99_seconds").number_value(), 10);
  }
  EXPECT_TRUE(saw_pull);
  // Over an interval with no traffic, no pull is counted.
  const google::protobuf::Struct quiet = ParseJson(
      RunAdmin(cluster, {"stats", "--json", "--interval_s=0.2"}, &code));
  EXPECT_EQ(code, 0);
  EXPECT_EQ(Field(Field(quiet, "per_second").struct_value(), "rows_pulled")
                .number_value(),
            0);
  // Over one with pulls going on, only the interval's are.
  std::atomic<bool> stop{false};
  std::atomic<int> pulled{0};
  uint64_t shard0_key = 0;
  while (ShardForKey(shard0_key, 2) != 0) ++shard0_key;
  std::thread puller([&] {
    auto stub = ParameterServer::NewStub(servers[0]->channel());
    std::vector<float> rows;
    while (!stop) {
      if (PullRows(*stub, kTable, {shard0_key}, &rows).ok()) ++pulled;
    }
  });
  EXPECT_TRUE(WaitUntil([&] { return pulled >= 10; }, absl::Seconds(30),
                        absl::Milliseconds(5)));
  const google::protobuf::Struct busy = ParseJson(
      RunAdmin(cluster, {"stats", "--json", "--interval_s=0.5"}, &code));
  stop = true;
  puller.join();
  EXPECT_EQ(code, 0);
  EXPECT_GT(Field(Field(busy, "per_second").struct_value(), "rows_pulled")
                .number_value(),
            0);
  for (const auto& method : Field(busy, "methods").list_value().values()) {
    const google::protobuf::Struct& m = method.struct_value();
    if (Field(m, "method").string_value() != "/ps.ParameterServer/Pull")
      continue;
    EXPECT_GT(Field(m, "calls").number_value(), 0);
    EXPECT_LT(Field(m, "calls").number_value(), 30 + pulled.load());
    EXPECT_GT(Field(m, "p50_seconds").number_value(), 0);
  }
  const google::protobuf::Struct tables =
      ParseJson(RunAdmin(cluster, {"tables", "--json"}, &code));
  const google::protobuf::Struct& table =
      Field(tables, "tables").list_value().values(0).struct_value();
  EXPECT_EQ(Field(table, "shards").number_value(), 2);
  // Rows are RocksDB's estimates: pushed rows are still in the push log.
  EXPECT_EQ(Field(tables, "shards").list_value().values_size(), 2);
  // A worker's lease, known to the coordinator (shard 0) only, keeps the
  // table on every shard.
  {
    auto coordinator = ParameterServer::NewStub(servers[0]->channel());
    grpc::ClientContext context;
    ClockRequest request;
    request.set_worker(0);
    request.set_lease_ms(60000);
    request.set_incarnation(1);
    ClockResponse response;
    ASSERT_TRUE(coordinator->Clock(&context, request, &response).ok());
  }
  RunAdmin(cluster, {"drop-table", "--table=emb"}, &code);
  EXPECT_EQ(code, 70);
  for (uint32_t i = 0; i < 2; ++i) {
    uint64_t key = 0;
    while (ShardForKey(key, 2) != i) ++key;
    std::vector<float> rows;
    EXPECT_TRUE(PullRows(*ParameterServer::NewStub(servers[i]->channel()),
                         kTable, {key}, &rows)
                    .ok())
        << "shard " << i << " dropped the table";
  }
  // One shard down: the other still answers, and the exit code says so.
  EXPECT_EQ(servers[1]->SignalAndWait(SIGTERM), 0);
  const google::protobuf::Struct partial = ParseJson(
      RunAdmin(cluster, {"stats", "--json", "--interval_s=0"}, &code));
  EXPECT_EQ(code, 69);  // a shard unreachable
  EXPECT_EQ(Field(partial, "shards_answered").number_value(), 1);
}

}  // namespace
}  // namespace ps::testing
