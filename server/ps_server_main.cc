// ps_server: one parameter-server shard. See README.md and --help.

#include <signal.h>

#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/lock_mode.h"
#include "glog/logging.h"
#include "server/server_flags.h"
#include "server/shard_process.h"

namespace {

// Parses the command line and sets up logging.
void InitProcess(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One parameter-server shard: sparse embedding tables over RocksDB, "
      "served over gRPC.\n\nExample:\n  ps_server --data_dir=/tmp/shard0 "
      "--listen=127.0.0.1:0 --shard_index=0 --num_shards=2");
  ps::SetVersionFlag("ps_server",
                     {"server/server_flags.cc", "net/server_tls_flags.cc",
                      "net/etcd_security_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with deadlock detection on, which records every
  // lock acquisition in a graph; the tests keep it, the binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
}

// Blocks the shutdown signals (SIGTERM, SIGINT) in this thread and every
// thread it creates later (gRPC's included); returns them for sigwait().
sigset_t BlockShutdownSignals() {
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  return shutdown_signals;
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  InitProcess(argc, argv);
  const sigset_t shutdown_signals = BlockShutdownSignals();
  absl::StatusOr<ps::server::ServerProcessOptions> process =
      ps::server::ServerProcessOptionsFromFlags();
  if (!process.ok()) {
    return ps::FailUsage("ps_server", process.status().message());
  }
  return ps::server::RunShardProcess(*std::move(process), shutdown_signals);
}
