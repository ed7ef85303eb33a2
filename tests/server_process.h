// File: tests/server_process.h
//
// Test helper: runs the real ps_server binary as a child process on a free
// loopback port, waits until gRPC health checking says SERVING, and kills it
// (for real) on request or at destruction. For tests that observe the
// server from outside: restarts, SIGTERM, kill -9; and RunServerToExit()
// for the starts a server must refuse.

#ifndef PS_TESTS_SERVER_PROCESS_H_
#define PS_TESTS_SERVER_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.pb.h"
#include "tests/child_process.h"

namespace ps::testing {

class ServerProcess {
 public:
  // Starts ps_server with `flags` plus --listen=127.0.0.1:0 and waits until
  // it serves. UNAVAILABLE if it exits or is not serving within `timeout`.
  // `stderr_path`, if set, receives its log.
  // `credentials` (default: plaintext) are what channel() and the health
  // check use, for a server started with --tls_* flags.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::vector<std::string>& flags,
      absl::Duration timeout = absl::Seconds(60),
      const std::string& stderr_path = "",
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // Sends `signal` and waits for the process to exit. Returns its exit code,
  // or 128 + the signal that ended it.
  int SignalAndWait(int signal) { return process_->SignalAndWait(signal); }

  // Waits for the process to exit on its own, up to `timeout` (then kills
  // it). Returns its exit code, or 128 + the signal that ended it.
  int Wait(absl::Duration timeout) { return process_->Wait(timeout); }
  bool Exited(int* code) { return process_->Exited(code); }

  pid_t pid() const { return process_->pid(); }
  // Where its log goes (empty: nowhere).
  const std::string& log_path() const { return log_path_; }

 private:
  ServerProcess() = default;

  std::unique_ptr<ChildProcess> process_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string log_path_;
};

// `server`'s ShardStats answer; a test failure (and an empty answer) when
// it does not answer.
ShardStatsResponse ShardStatsOf(const ServerProcess& server);

// Runs ps_server with `flags` until it exits, as a test of a start it must
// refuse does: --listen=127.0.0.1:0 added unless `flags` names a --listen,
// its stderr to `log_path`, killed past `timeout`. Its exit code (128 + the
// signal that ended it; -1 if it did not start).
int RunServerToExit(const std::vector<std::string>& flags,
                    const std::string& log_path,
                    absl::Duration timeout = absl::Minutes(5));

}  // namespace ps::testing

#endif  // PS_TESTS_SERVER_PROCESS_H_
