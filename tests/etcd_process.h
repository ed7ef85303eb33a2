// File: tests/etcd_process.h
//
// Test helper: Debian's etcd (/usr/bin/etcd, installed by deploy/setup.sh)
// as a real child process, a one-member cluster listening on loopback ports
// chosen free at run time, with its data in a fresh test directory. Killed
// at destruction.

#ifndef PS_TESTS_ETCD_PROCESS_H_
#define PS_TESTS_ETCD_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cluster/coordination_store.h"
#include "net/tls_credentials.h"
#include "tests/child_process.h"

namespace ps::testing {

// How a test's etcd is secured. Default: plaintext, no users.
struct EtcdSecurity {
  // TLS on its client URLs (https): its certificate and key, and with
  // `client_ca` it requires client certificates that CA signed
  // (--client-cert-auth).
  std::string cert;
  std::string key;
  std::string client_ca;
  // How the helper's own clients reach it (the readiness check, Connect()).
  TlsFiles client_tls;
  // More of etcd's flags (--auth-token-ttl=1, say).
  std::vector<std::string> more_flags;
};

class EtcdProcess {
 public:
  // Starts etcd and waits (up to 30 s) until it answers on its client
  // port. FAILED_PRECONDITION when /usr/bin/etcd is missing.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(
      const std::string& name, const EtcdSecurity& security = {});

  // host:port of its client endpoint.
  const std::string& endpoint() const { return endpoint_; }

  // A client of it alone.
  absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> Connect() const;

  // Ends it with `signal` (SIGKILL: as a machine that is lost).
  void Stop(int signal);
  // Starts it again on its data dir and ports (after Stop()), and waits
  // until it answers, as Start().
  absl::Status Restart();

 private:
  EtcdProcess() = default;

  // Starts the process (argv_) and waits until it answers.
  absl::Status Launch();

  std::string endpoint_;
  int client_port_ = 0;
  std::string dir_;
  std::vector<std::string> argv_;
  TlsFiles client_tls_;
  std::unique_ptr<ChildProcess> process_;
};

// A loopback port nothing listens on (bound, then released).
int UnusedLoopbackPort();
// `count` different such ports (all bound before any is released).
std::vector<int> UnusedLoopbackPorts(int count);

}  // namespace ps::testing

#endif  // PS_TESTS_ETCD_PROCESS_H_
