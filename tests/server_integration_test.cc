// A real ps_server process on a free loopback port, driven over gRPC: pulls,
// pushes, and bad requests (each checked for its status code and for leaving
// every row unchanged), then SIGTERM and a restart on the same directory.

#include <signal.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/initializer.h"
#include "base/packed.h"
#include "base/routing.h"
#include "base/wait_until.h"
#include "base/wire_format.h"
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

TEST_F(ServerIntegrationTest, Pull4096KeysReturnsRowsInRequestOrder) {
  std::vector<uint64_t> keys = Keys(4096);
  std::reverse(keys.begin() + 100, keys.begin() + 2000);  // not sorted
  keys[7] = keys[3000];                                   // a duplicate
  const std::vector<float> rows = MustPull(*stub_, keys);
  ASSERT_EQ(rows.size(), 4096u * kDim);
  Initializer initializer(SgdTableSpec(kTable, kDim, 0.5f).initializer());
  std::vector<float> expected(kDim);
  for (size_t i = 0; i < keys.size(); ++i) {
    initializer.Fill(keys[i], absl::MakeSpan(expected));
    for (uint32_t d = 0; d < kDim; ++d)
      ASSERT_EQ(rows[i * kDim + d], expected[d]) << i;
  }
}

TEST_F(ServerIntegrationTest, PushUpdatesRowsWithTheTablesOptimizer) {
  const std::vector<uint64_t> keys = Keys(4096);
  const std::vector<float> before = MustPull(*stub_, keys);
  std::vector<float> gradients(keys.size() * kDim);
  for (size_t i = 0; i < gradients.size(); ++i) gradients[i] = (i % 7) - 3.0f;
  grpc::Status pushed = PushRows(*stub_, kTable, keys, gradients);
  ASSERT_TRUE(pushed.ok()) << pushed.error_message();
  const std::vector<float> after = MustPull(*stub_, keys);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_FLOAT_EQ(after[i], before[i] - 0.5f * gradients[i]) << i;
  }
}

TEST_F(ServerIntegrationTest, BadRequestsGetClearCodesAndChangeNoRow) {
  const std::vector<uint64_t> keys = Keys(64);
  ASSERT_TRUE(
      PushRows(*stub_, kTable, keys, std::vector<float>(64 * kDim, 1.0f)).ok());
  const std::vector<float> before = MustPull(*stub_, keys);
  auto expect_unchanged = [&](const char* what) {
    EXPECT_EQ(MustPull(*stub_, keys), before) << "rows changed after " << what;
  };

  std::vector<float> with_nan(64 * kDim, 1.0f);
  with_nan[64 * kDim - 1] = NAN;
  EXPECT_EQ(PushRows(*stub_, kTable, keys, with_nan).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  expect_unchanged("a NaN");

  std::vector<float> with_inf(64 * kDim, 1.0f);
  with_inf[5] = -INFINITY;
  EXPECT_EQ(PushRows(*stub_, kTable, keys, with_inf).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  expect_unchanged("an Inf");

  EXPECT_EQ(PushRows(*stub_, kTable, keys, std::vector<float>(64 * 8, 1.0f))
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  expect_unchanged("the wrong dim");

  {
    grpc::ClientContext context;
    PushRequest request;
    request.set_table(kTable);
    request.set_keys(Pack<uint64_t>(keys).substr(3));  // not a multiple of 8
    request.set_gradients(Pack<float>(std::vector<float>(64 * kDim, 1.0f)));
    PushResponse response;
    EXPECT_EQ(stub_->Push(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  expect_unchanged("ragged keys");

  const std::vector<uint64_t> too_many = Keys(5001);
  EXPECT_EQ(
      PushRows(*stub_, kTable, too_many, std::vector<float>(5001 * kDim, 1.0f))
          .error_code(),
      grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::vector<float> ignored;
  EXPECT_EQ(PullRows(*stub_, kTable, too_many, &ignored).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  expect_unchanged("too many keys");

  EXPECT_EQ(PushRows(*stub_, "no_such_table", keys,
                     std::vector<float>(64 * kDim, 1.0f))
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(PullRows(*stub_, "no_such_table", keys, &ignored).error_code(),
            grpc::StatusCode::NOT_FOUND);
  expect_unchanged("an unknown table");

  bool created = true;
  EXPECT_EQ(DeclareTable(*stub_, SgdTableSpec(kTable, kDim, 0.5f), &created)
                .error_code(),
            grpc::StatusCode::OK);
  EXPECT_FALSE(created);
  EXPECT_EQ(
      DeclareTable(*stub_, SgdTableSpec(kTable, kDim + 1, 0.5f)).error_code(),
      grpc::StatusCode::ALREADY_EXISTS);
  expect_unchanged("a conflicting declaration");
}

TEST_F(ServerIntegrationTest, KeysOfAnotherShardAreRefusedWhole) {
  const std::string dir = FreshTestDir("server_integration_two_shards");
  auto shard0 = ServerProcess::Start(
      {"--data_dir=" + dir, "--num_shards=2", "--shard_index=0"});
  ASSERT_TRUE(shard0.ok()) << shard0.status();
  auto stub = ParameterServer::NewStub((*shard0)->channel());
  ASSERT_TRUE(DeclareTable(*stub, SgdTableSpec(kTable, kDim, 0.5f)).ok());
  uint64_t mine = 1, theirs = 1;
  while (ShardForKey(mine, 2) != 0) ++mine;
  while (ShardForKey(theirs, 2) != 1) ++theirs;
  const std::vector<float> before = MustPull(*stub, {mine});
  EXPECT_EQ(PushRows(*stub, kTable, {mine, theirs},
                     std::vector<float>(2 * kDim, 1.0f))
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(MustPull(*stub, {mine}), before);
  std::vector<float> ignored;
  EXPECT_EQ(PullRows(*stub, kTable, {theirs}, &ignored).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServerIntegrationTest, AdminReportsTablesRowsAndCounters) {
  const std::vector<uint64_t> keys = Keys(100);
  ASSERT_TRUE(
      PushRows(*stub_, kTable, keys, std::vector<float>(100 * kDim, 2.0f))
          .ok());
  auto admin = Admin::NewStub(server_->channel());
  {
    grpc::ClientContext context;
    ListTablesResponse response;
    ASSERT_TRUE(
        admin->ListTables(&context, ListTablesRequest(), &response).ok());
    ASSERT_EQ(response.tables_size(), 1);
    EXPECT_EQ(response.tables(0).spec().name(), kTable);
    EXPECT_EQ(response.tables(0).spec().dim(), kDim);
  }
  {
    grpc::ClientContext context;
    GetRowRequest request;
    request.set_table(kTable);
    request.set_key(keys[0]);
    GetRowResponse response;
    ASSERT_TRUE(admin->GetRow(&context, request, &response).ok());
    EXPECT_TRUE(response.stored());
    const std::vector<float> pulled = MustPull(*stub_, {keys[0]});
    ASSERT_EQ(response.values_size(), static_cast<int>(kDim));
    for (uint32_t d = 0; d < kDim; ++d)
      EXPECT_EQ(response.values(d), pulled[d]);
  }
  {
    const ShardStatsResponse response = ShardStatsOf(*server_);
    EXPECT_EQ(response.push_requests(), 1u);
    EXPECT_GE(response.pull_requests(), 1u);
    EXPECT_EQ(response.rows_pushed(), 100u);
    EXPECT_LE(response.hot_tier_bytes(), response.hot_tier_budget_bytes());
    // The push's 100 rows are in the log: 100 keys and 100 x kDim gradients
    // plus a header per stripe record.
    EXPECT_GE(response.push_log_bytes(), 100u * (8 + 4 * kDim));
    // The table was declared by this server and nothing was evicted.
    EXPECT_EQ(response.disk_lookups(), 0u);
  }
}

TEST_F(ServerIntegrationTest, AdmissionHoldsKeysBackUntilTheirNthPush) {
  TableSpec spec = SgdTableSpec("admitted", kDim, 0.5f);
  spec.set_admit_after(2);
  ASSERT_TRUE(DeclareTable(*stub_, spec).ok());
  const std::vector<uint64_t> keys = Keys(200);
  std::vector<float> initial;
  ASSERT_TRUE(PullRows(*stub_, "admitted", keys, &initial).ok());
  const std::vector<float> ones(keys.size() * kDim, 1.0f);
  ASSERT_TRUE(PushRows(*stub_, "admitted", keys, ones).ok());
  std::vector<float> rows;
  ASSERT_TRUE(PullRows(*stub_, "admitted", keys, &rows).ok());
  EXPECT_EQ(rows, initial) << "the first push was applied";
  // Half the keys again: those are stored, with that push's step only.
  const std::vector<uint64_t> half(keys.begin(), keys.begin() + 100);
  ASSERT_TRUE(
      PushRows(*stub_, "admitted", half, std::vector<float>(100 * kDim, 1.0f))
          .ok());
  int code = -1;
  const google::protobuf::Struct stats = ParseJson(RunAdmin(
      server_->address(), {"stats", "--json", "--interval_s=0"}, &code));
  const google::protobuf::Struct& total = Field(stats, "total").struct_value();
  EXPECT_EQ(Field(total, "rows_admitted").number_value(), 100);
  EXPECT_EQ(Field(total, "keys_held_back").number_value(), 200);
  // What was stored survives a restart; the rest still starts over.
  stub_.reset();
  EXPECT_EQ(server_->SignalAndWait(SIGTERM), 0);
  server_ = Start();
  stub_ = ParameterServer::NewStub(server_->channel());
  ASSERT_TRUE(PullRows(*stub_, "admitted", keys, &rows).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const float expected = initial[i * kDim] - (i < 100 ? 0.5f : 0.0f);
    ASSERT_FLOAT_EQ(rows[i * kDim], expected) << "key " << i;
  }
}

TEST(ExpiryTest, ExpiredRowsGoThroughCompactionAfterARestart) {
  // On disk a row goes after its ttl and twice the write-back interval.
  const std::vector<std::string> flags = {
      "--data_dir=" + FreshTestDir("expiry"), "--write_back_ms=500"};
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = ParameterServer::NewStub((*server)->channel());
  TableSpec spec = SgdTableSpec("ttl", kDim, 0.5f);
  spec.set_row_ttl_s(1);
  ASSERT_TRUE(DeclareTable(*stub, spec).ok());
  ASSERT_TRUE(DeclareTable(*stub, SgdTableSpec("kept", kDim, 0.5f)).ok());
  const std::vector<uint64_t> keys = Keys(50);
  std::vector<float> initial;
  ASSERT_TRUE(PullRows(*stub, "ttl", keys, &initial).ok());
  ASSERT_TRUE(
      PushRows(*stub, "ttl", keys, std::vector<float>(50 * kDim, 1.0f)).ok());
  // Written back at shutdown; expired while no shard runs.
  stub.reset();
  EXPECT_EQ((*server)->SignalAndWait(SIGTERM), 0);
  absl::SleepFor(absl::Seconds(3.1));
  server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  stub = ParameterServer::NewStub((*server)->channel());
  int code = -1;
  const google::protobuf::Struct expired = ParseJson(RunAdmin(
      (*server)->address(), {"expire", "--table=ttl", "--json"}, &code));
  EXPECT_EQ(code, 0);
  const google::protobuf::Struct& shard =
      Field(expired, "shards").list_value().values(0).struct_value();
  EXPECT_EQ(Field(shard, "rows_on_disk").number_value(), 50);
  std::vector<float> rows;
  ASSERT_TRUE(PullRows(*stub, "ttl", keys, &rows).ok());
  EXPECT_EQ(rows, initial);
  const google::protobuf::Struct stats = ParseJson(RunAdmin(
      (*server)->address(), {"stats", "--json", "--interval_s=0"}, &code));
  EXPECT_EQ(Field(Field(stats, "total").struct_value(), "rows_expired_on_disk")
                .number_value(),
            50);
  // A table without a ttl cannot be expired.
  RunAdmin((*server)->address(), {"expire", "--table=kept"}, &code);
  EXPECT_EQ(code, 70);
}

TEST_F(ServerIntegrationTest, RowsAndGradientsTravelInHalfPrecision) {
  const std::vector<uint64_t> keys = Keys(50);
  const std::vector<float> rows = MustPull(*stub_, keys);
  auto pull = [&](WireFormat format, PullResponse* response) {
    grpc::ClientContext context;
    PullRequest request;
    request.set_table(kTable);
    request.set_keys(Pack<uint64_t>(keys));
    request.set_format(format);
    return stub_->Pull(&context, request, response);
  };
  PullResponse half;
  ASSERT_TRUE(pull(WireFormat::FP16, &half).ok());
  EXPECT_EQ(half.format(), WireFormat::FP16);
  ASSERT_EQ(half.values().size(), rows.size() * 2);
  std::vector<float> decoded(rows.size());
  DecodeWireValues(WireFormat::FP16, half.values().data(),
                   absl::MakeSpan(decoded));
  for (size_t i = 0; i < rows.size(); ++i)
    ASSERT_NEAR(decoded[i], rows[i], std::fabs(rows[i]) / 2048 + 1e-7) << i;
  PullResponse unknown;
  EXPECT_EQ(pull(static_cast<WireFormat>(9), &unknown).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // A half-precision push of gradients 1e-6 scaled by 2^30: the shard
  // divides the scale back out exactly.
  auto push = [&](float scale, size_t bytes_per_value) {
    std::vector<float> gradients(keys.size() * kDim, 1e-6f * scale);
    std::string packed(gradients.size() * 2, '\0');
    EncodeWireValues(WireFormat::FP16, gradients, packed.data());
    packed.resize(gradients.size() * bytes_per_value - (bytes_per_value & 1));
    grpc::ClientContext context;
    PushRequest request;
    request.set_table(kTable);
    request.set_keys(Pack<uint64_t>(keys));
    request.set_gradients(packed);
    request.set_format(WireFormat::FP16);
    request.set_gradient_scale(scale);
    PushResponse response;
    return stub_->Push(&context, request, &response);
  };
  ASSERT_TRUE(push(std::ldexp(1.0f, 30), 2).ok());
  const std::vector<float> after = MustPull(*stub_, keys);
  for (size_t i = 0; i < rows.size(); ++i)
    ASSERT_NEAR(after[i], rows[i] - 0.5f * 1e-6f,
                1e-9f + std::fabs(rows[i]) * 1e-6f)
        << i;
  EXPECT_EQ(push(-1.0f, 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push(1.0f, 3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MustPull(*stub_, keys), after) << "a refused push changed rows";
}

TEST_F(ServerIntegrationTest, SigtermExitsZeroAndRestartResumes) {
  const std::vector<uint64_t> keys = Keys(500);
  ASSERT_TRUE(
      PushRows(*stub_, kTable, keys, std::vector<float>(500 * kDim, 1.0f))
          .ok());
  const std::vector<float> before = MustPull(*stub_, keys);
  stub_.reset();
  // The test still holds an idle connection (server_->channel()); the
  // shutdown must not wait for it to close, which a C++ client does only at
  // its 5 s backup poll.
  const absl::Time signalled = absl::Now();
  EXPECT_EQ(server_->SignalAndWait(SIGTERM), 0);
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(3));
  server_ = Start();
  stub_ = ParameterServer::NewStub(server_->channel());
  EXPECT_EQ(MustPull(*stub_, keys), before);
}

// Peak resident memory of process `pid`, from /proc.
size_t PeakResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(ServerFloodTest, AFloodOfLargeRequestsIsRefusedAndMemoryStaysBounded) {
  // 16 clients pulling 4 MiB replies at once against --max_inflight_mb=8.
  // Measured here: peak RSS 67 MiB with the cap, 173 MiB without it.
  auto server = ServerProcess::Start(
      {"--data_dir=" + FreshTestDir("server_flood"), "--max_inflight_mb=8",
       "--max_keys_per_request=65536", "--cache_mb=16"});
  ASSERT_TRUE(server.ok()) << server.status();
  {
    auto stub = ParameterServer::NewStub((*server)->channel());
    ASSERT_TRUE(DeclareTable(*stub, SgdTableSpec(kTable, kDim, 0.5f)).ok());
  }
  std::atomic<int> ok{0}, busy{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      auto stub = ParameterServer::NewStub((*server)->channel());
      const std::vector<uint64_t> keys = Keys(65536, 7919 + c);
      for (int i = 0; i < 8; ++i) {
        grpc::ClientContext context;
        PullRequest request;
        request.set_table(kTable);
        request.set_keys(Pack<uint64_t>(keys));
        PullResponse response;
        const grpc::Status status = stub->Pull(&context, request, &response);
        if (status.ok()) {
          ++ok;
        } else if (status.error_code() ==
                       grpc::StatusCode::RESOURCE_EXHAUSTED &&
                   context.GetServerTrailingMetadata().count("ps-transient")) {
          ++busy;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& client : clients) client.join();
  const size_t peak = PeakResidentBytes((*server)->pid());
  std::printf(
      "flood: %d served, %d refused as busy, %d other; shard peak "
      "RSS %.0f MiB\n",
      ok.load(), busy.load(), other.load(), peak / 1048576.0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(busy.load(), 0) << "nothing was refused: the cap did not act";
  EXPECT_EQ(other.load(), 0);
  EXPECT_LT(peak, size_t{120} << 20);
  // Still serving, and every flood call's bytes were given back: a call
  // counts until gRPC is done with it (OnDone), which can come a moment
  // after its client has the reply, so a pull right after the flood may
  // still be refused as busy; a client retries it, as workers do. Bytes
  // that were never given back would refuse it for good.
  auto stub = ParameterServer::NewStub((*server)->channel());
  std::vector<float> rows;
  grpc::Status pulled;
  int refusals = 0;
  WaitUntil(
      [&] {
        grpc::ClientContext context;
        PullRequest request;
        request.set_table(kTable);
        request.set_keys(Pack<uint64_t>(Keys(10)));
        PullResponse response;
        pulled = stub->Pull(&context, request, &response);
        if (pulled.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED)
          return true;
        ++refusals;
        return false;
      },
      absl::Seconds(10));
  EXPECT_TRUE(pulled.ok()) << pulled.error_message() << " after " << refusals
                           << " refusals";
}

}  // namespace
}  // namespace ps::testing
