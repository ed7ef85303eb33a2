#include "tests/server_process.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/health.grpc.pb.h"

namespace ps::testing {
namespace {

constexpr char kReadyPrefix[] = "ps_server listening on ";

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& flags, absl::Duration timeout,
    const std::string& stderr_path,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> argv = {BinaryPath("server/ps_server"),
                                   "--listen=127.0.0.1:0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  auto process =
      ChildProcess::Start(argv, /*capture_stdout=*/true, stderr_path);
  if (!process.ok()) return process.status();
  server->process_ = std::move(process).value();
  server->log_path_ = stderr_path;

  absl::StatusOr<std::string> line = server->process_->ReadLine(deadline);
  if (!line.ok()) return line.status();
  if (!absl::StartsWith(*line, kReadyPrefix)) {
    return absl::UnavailableError(absl::StrCat("unexpected output: ", *line));
  }
  server->address_ = line->substr(strlen(kReadyPrefix));
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(256 << 20);
  server->channel_ =
      grpc::CreateCustomChannel(server->address_, credentials, channel_args);

  auto health = grpc::health::v1::Health::NewStub(server->channel_);
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    context.set_wait_for_ready(true);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (health->Check(&context, request, &response).ok() &&
        response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return server;
    }
  }
  return absl::UnavailableError("ps_server did not become healthy in time");
}

ShardStatsResponse ShardStatsOf(const ServerProcess& server) {
  auto admin = Admin::NewStub(server.channel());
  ShardStatsResponse response;
  grpc::ClientContext context;
  const grpc::Status status =
      admin->ShardStats(&context, ShardStatsRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

int RunServerToExit(const std::vector<std::string>& flags,
                    const std::string& log_path, absl::Duration timeout) {
  std::vector<std::string> argv = {BinaryPath("server/ps_server")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (std::none_of(flags.begin(), flags.end(), [](const std::string& flag) {
        return absl::StartsWith(flag, "--listen=");
      })) {
    argv.push_back("--listen=127.0.0.1:0");
  }
  return RunToCompletion(argv, log_path, timeout);
}

}  // namespace ps::testing
