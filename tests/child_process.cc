#include "tests/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps::testing {

std::string BinaryPath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return absl::StrCat(srcdir, "/", workspace, "/", workspace_relative);
  }
  return "bazel-bin/" + workspace_relative;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv_strings, bool capture_stdout,
    const std::string& stderr_path) {
  int pipe_fds[2] = {-1, -1};
  if (capture_stdout && pipe(pipe_fds) != 0)
    return absl::InternalError("pipe() failed");
  std::vector<std::string> args = argv_strings;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork() failed");
  if (pid == 0) {
    if (capture_stdout) {
      dup2(pipe_fds[1], STDOUT_FILENO);
      close(pipe_fds[0]);
      close(pipe_fds[1]);
    }
    if (!stderr_path.empty()) {
      const int fd =
          open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  auto process = std::unique_ptr<ChildProcess>(new ChildProcess());
  process->pid_ = pid;
  if (capture_stdout) {
    close(pipe_fds[1]);
    process->stdout_fd_ = pipe_fds[0];
  }
  return process;
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Time deadline) {
  if (stdout_fd_ < 0)
    return absl::FailedPreconditionError("stdout is not captured");
  std::string line;
  while (true) {
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (wait_ms <= 0) return absl::DeadlineExceededError("no output in time");
    pollfd poll_fd{stdout_fd_, POLLIN, 0};
    if (poll(&poll_fd, 1, static_cast<int>(wait_ms)) <= 0) continue;
    char c;
    const ssize_t n = read(stdout_fd_, &c, 1);
    if (n <= 0) return absl::UnavailableError("the process closed its output");
    if (c == '\n') return line;
    line.push_back(c);
  }
}

absl::StatusOr<std::string> ChildProcess::ReadToEnd(absl::Time deadline) {
  if (stdout_fd_ < 0)
    return absl::FailedPreconditionError("stdout is not captured");
  std::string out;
  char buffer[4096];
  while (true) {
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (wait_ms <= 0) return absl::DeadlineExceededError("output still open");
    pollfd poll_fd{stdout_fd_, POLLIN, 0};
    if (poll(&poll_fd, 1, static_cast<int>(wait_ms)) <= 0) continue;
    const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
    if (n <= 0) return out;
    out.append(buffer, static_cast<size_t>(n));
  }
}

int ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

bool ChildProcess::Exited(int* code) {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

int ChildProcess::SignalAndWait(int signal, absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  return Wait(timeout);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) SignalAndWait(SIGKILL);
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

int RunToCompletion(const std::vector<std::string>& argv,
                    const std::string& stderr_path, absl::Duration timeout) {
  auto process = ChildProcess::Start(argv, false, stderr_path);
  if (!process.ok()) return -1;
  return (*process)->Wait(timeout);
}

}  // namespace ps::testing
