// ShardServer::Start failures leave nothing half-built behind: a second
// server on a data directory in use, or on a port in use, gets a clear
// status (and, before the fix, crashed in its destructor).

#include "server/shard_server.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/test_faults.h"
#include "base/wait_until.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps.grpc.pb.h"

namespace ps::server {
namespace {

ServerOptions Options(const std::string& dir) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.store.data_dir = dir;
  return options;
}

TEST(ShardServerTest, ASecondServerOnTheSameDirectoryIsRefused) {
  const std::string dir = FreshTestDir("same_dir");
  auto first = ShardServer::Start(Options(dir));
  ASSERT_OK(first);
  auto second = ShardServer::Start(Options(dir));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status();
  EXPECT_OK((*first)->Shutdown(absl::ZeroDuration()));
}

TEST(ShardServerTest, APortInUseIsUnavailable) {
  auto first = ShardServer::Start(Options(FreshTestDir("port_first")));
  ASSERT_OK(first);
  ServerOptions options = Options(FreshTestDir("port_second"));
  options.listen_address = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = ShardServer::Start(options);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_OK((*first)->Shutdown(absl::ZeroDuration()));
}

TEST(ShardServerTest, ADataDirIsServedOnlyAsTheShardItWasCreatedAs) {
  const std::string dir = FreshTestDir("identity");
  ServerOptions options = Options(dir);
  options.shard_index = 1;
  options.num_shards = 2;
  {
    auto first = ShardServer::Start(options);
    ASSERT_OK(first);
    EXPECT_OK((*first)->Shutdown(absl::ZeroDuration()));
  }
  for (auto [index, count] : {std::pair{1u, 3u}, std::pair{0u, 2u}}) {
    ServerOptions other = options;
    other.shard_index = index;
    other.num_shards = count;
    auto refused = ShardServer::Start(other);
    EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_NE(refused.status().message().find("shard 1 of 2"),
              std::string::npos)
        << refused.status();
    EXPECT_NE(refused.status().message().find(
                  absl::StrCat("shard ", index, " of ", count)),
              std::string::npos)
        << refused.status();
  }
  auto again = ShardServer::Start(options);
  ASSERT_OK(again);
  EXPECT_OK((*again)->Shutdown(absl::ZeroDuration()));
}

// Admin.Stop calls the server's stop, as Drain (its former name) does; a
// server without one refuses both.
TEST(ShardServerTest, AdminStopAndItsFormerNameCallTheStop) {
  std::atomic<int> stops{0};
  ServerOptions options = Options(FreshTestDir("admin_stop"));
  options.stop = [&stops] { ++stops; };
  auto server = ShardServer::Start(options);
  ASSERT_OK(server);
  auto admin = Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    StopResponse response;
    EXPECT_TRUE(admin->Stop(&context, StopRequest(), &response).ok());
  }
  EXPECT_EQ(stops.load(), 1);
  {
    grpc::ClientContext context;
    DrainResponse response;
    EXPECT_TRUE(admin->Drain(&context, DrainRequest(), &response).ok());
  }
  EXPECT_EQ(stops.load(), 2);
  EXPECT_OK((*server)->Shutdown(absl::ZeroDuration()));

  auto unstoppable = ShardServer::Start(Options(FreshTestDir("no_stop")));
  ASSERT_OK(unstoppable);
  admin = Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*unstoppable)->port()),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  StopResponse response;
  EXPECT_EQ(admin->Stop(&context, StopRequest(), &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_OK((*unstoppable)->Shutdown(absl::ZeroDuration()));
}

// The health status on a plaintext channel to `port`, or the call's error.
std::string HealthAt(int port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  if (!status.ok()) return absl::StrCat("error ", status.error_code());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      response.status());
}

TEST(ShardServerTest, AHealthPortAnswersInPlaintextUntilADrain) {
  ServerOptions options = Options(FreshTestDir("health_port"));
  options.health_listen = "127.0.0.1:0";
  auto server = ShardServer::Start(options);
  ASSERT_OK(server);
  ASSERT_GT((*server)->health_port(), 0);
  ASSERT_NE((*server)->health_port(), (*server)->port());
  EXPECT_EQ(HealthAt((*server)->health_port()), "SERVING");
  ASSERT_OK((*server)->Shutdown(absl::Seconds(1)));
  EXPECT_NE(HealthAt((*server)->health_port()), "SERVING");
}

TEST(ShardServerTest, APushLogThatStoppedForGoodMakesHealthNotServing) {
  ServerOptions options = Options(FreshTestDir("health_log"));
  options.health_listen = "127.0.0.1:0";
  options.health_check_interval = absl::Milliseconds(20);
  auto server = ShardServer::Start(options);
  ASSERT_OK(server);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials());
  auto stub = ParameterServer::NewStub(channel);
  DeclareTableRequest declare;
  declare.mutable_table()->set_name("emb");
  declare.mutable_table()->set_dim(2);
  declare.mutable_table()->mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  DeclareTableResponse declared;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->DeclareTable(&context, declare, &declared).ok());
  }
  auto push = [&] {
    PushRequest request;
    request.set_table("emb");
    const uint64_t key = 7;
    const float gradients[2] = {1.0f, 1.0f};
    request.set_keys(std::string(reinterpret_cast<const char*>(&key), 8));
    request.set_gradients(
        std::string(reinterpret_cast<const char*>(gradients), 8));
    PushResponse response;
    grpc::ClientContext context;
    return stub->Push(&context, request, &response);
  };
  ASSERT_TRUE(push().ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(HealthAt((*server)->health_port()), "SERVING");
  EXPECT_EQ(HealthAt((*server)->port()), "SERVING");
  // The push log's segment turns into a read-only file under the shard's
  // feet (EBADF on its next write): not a full disk, so it stays stopped.
  const int replaced = MakeOpenFilesReadOnly("/push_log/");
  ASSERT_GT(replaced, 0) << "no open push-log segment found";
  const grpc::Status refused = push();
  EXPECT_FALSE(refused.ok());
  WaitUntil([&] { return HealthAt((*server)->health_port()) != "SERVING"; },
            absl::Seconds(5), absl::Milliseconds(20));
  EXPECT_EQ(HealthAt((*server)->health_port()), "NOT_SERVING");
  EXPECT_EQ(HealthAt((*server)->port()), "NOT_SERVING");
  (*server)->Shutdown(absl::ZeroDuration()).IgnoreError();
}

}  // namespace
}  // namespace ps::server
