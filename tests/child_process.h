// File: tests/child_process.h
//
// Test helper: a real child process (one of the project's binaries), started
// with fork/exec, its stdout optionally captured through a pipe and its
// stderr sent to a file. Killed with SIGKILL at destruction if still running.

#ifndef PS_TESTS_CHILD_PROCESS_H_
#define PS_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/test_dirs.h"  // FreshTestDir(), used with these helpers

namespace ps::testing {

// The path of a binary built by Bazel, e.g. "server/ps_server", in the
// test's runfiles.
std::string BinaryPath(const std::string& workspace_relative);

class ChildProcess {
 public:
  // Starts argv[0] with `argv`. With `capture_stdout`, ReadLine() reads its
  // stdout; `stderr_path` (if not empty) receives its stderr.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv, bool capture_stdout = false,
      const std::string& stderr_path = "");

  ~ChildProcess();

  // Reads one line of stdout, waiting until `deadline`.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);
  // Reads the rest of stdout, up to the process closing it (a last line
  // without a newline included); DEADLINE_EXCEEDED, with what was read
  // lost, if it is still open at `deadline`.
  absl::StatusOr<std::string> ReadToEnd(absl::Time deadline);

  // Waits for the process to exit, up to `timeout` (then SIGKILLs it).
  // Returns its exit code, or 128 + the signal that ended it.
  int Wait(absl::Duration timeout);
  // Whether it has exited (reaping it, its code into *code), without
  // waiting.
  bool Exited(int* code);

  // Sends `signal`, then Wait()s.
  int SignalAndWait(int signal, absl::Duration timeout = absl::Minutes(1));

  pid_t pid() const { return pid_; }

 private:
  ChildProcess() = default;

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
};

// Runs a command to completion; returns its exit code (or 128 + signal).
int RunToCompletion(const std::vector<std::string>& argv,
                    const std::string& stderr_path = "",
                    absl::Duration timeout = absl::Minutes(5));

}  // namespace ps::testing

#endif  // PS_TESTS_CHILD_PROCESS_H_
