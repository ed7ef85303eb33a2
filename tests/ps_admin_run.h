// File: tests/ps_admin_run.h
//
// The one way the process tests run ps_admin: against a cluster named by
// its shards' addresses (--servers) or by a job in etcd (--etcd, --job),
// its stdout returned and its stderr kept in a file for the failure
// message.

#ifndef PS_TESTS_PS_ADMIN_RUN_H_
#define PS_TESTS_PS_ADMIN_RUN_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ps::testing {

// The flags that name the cluster ps_admin talks to.
struct AdminCluster {
  // --servers=addresses[0],addresses[1],..., and `extra` (TLS flags, say).
  static AdminCluster Servers(absl::Span<const std::string> addresses,
                              std::vector<std::string> extra = {});
  // --etcd=endpoint --job=job, and `extra` (TLS flags, say).
  static AdminCluster Etcd(const std::string& endpoint, const std::string& job,
                           std::vector<std::string> extra = {});

  std::vector<std::string> flags;
};

struct AdminRun {
  // ps_admin's exit code; 128 + the signal that ended it; -1 if it did not
  // start.
  int exit_code = -1;
  std::string out;  // its stdout
  std::string log;  // its stderr
};

// ps_admin's command line: the binary, `cluster`'s flags, then `args`; for
// a ps_admin a test starts and waits for itself.
std::vector<std::string> PsAdminArgv(const AdminCluster& cluster,
                                     const std::vector<std::string>& args);

// Runs `ps_admin <cluster flags> <args>`, its stderr written to `log_path`
// too, killing it past `timeout`.
AdminRun RunPsAdmin(const AdminCluster& cluster,
                    const std::vector<std::string>& args,
                    const std::string& log_path,
                    absl::Duration timeout = absl::Minutes(5));

}  // namespace ps::testing

#endif  // PS_TESTS_PS_ADMIN_RUN_H_
