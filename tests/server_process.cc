#include "tests/server_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/health.grpc.pb.h"

namespace ps::testing {
namespace {

constexpr char kReadyPrefix[] = "ps_server listening on ";

std::string ServerBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return absl::StrCat(srcdir, "/", workspace, "/server/ps_server");
  }
  return "bazel-bin/server/ps_server";
}

// Reads one line from `fd`, waiting until `deadline`.
absl::StatusOr<std::string> ReadLine(int fd, absl::Time deadline) {
  std::string line;
  while (true) {
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (wait_ms <= 0) return absl::DeadlineExceededError("no output from ps_server");
    pollfd poll_fd{fd, POLLIN, 0};
    if (poll(&poll_fd, 1, static_cast<int>(wait_ms)) <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return absl::UnavailableError("ps_server exited before serving");
    if (c == '\n') return line;
    line.push_back(c);
  }
}

}  // namespace

std::string FreshTestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& flags, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("pipe() failed");
  std::vector<std::string> args = {ServerBinary(), "--listen=127.0.0.1:0"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork() failed");
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  auto process = std::unique_ptr<ServerProcess>(new ServerProcess());
  process->pid_ = pid;
  process->stdout_fd_ = pipe_fds[0];

  absl::StatusOr<std::string> line = ReadLine(process->stdout_fd_, deadline);
  if (!line.ok()) return line.status();
  if (!absl::StartsWith(*line, kReadyPrefix)) {
    return absl::UnavailableError(absl::StrCat("unexpected output: ", *line));
  }
  process->address_ = line->substr(strlen(kReadyPrefix));
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(256 << 20);
  process->channel_ = grpc::CreateCustomChannel(
      process->address_, grpc::InsecureChannelCredentials(), channel_args);

  auto health = grpc::health::v1::Health::NewStub(process->channel_);
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    context.set_wait_for_ready(true);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (health->Check(&context, request, &response).ok() &&
        response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return process;
    }
  }
  return absl::UnavailableError("ps_server did not become healthy in time");
}

int ServerProcess::SignalAndWait(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) SignalAndWait(SIGKILL);
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

}  // namespace ps::testing
