#include "tests/ps_admin_run.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/child_process.h"

namespace ps::testing {

AdminCluster AdminCluster::Servers(absl::Span<const std::string> addresses,
                                   std::vector<std::string> extra) {
  AdminCluster cluster = {{"--servers=" + absl::StrJoin(addresses, ",")}};
  cluster.flags.insert(cluster.flags.end(), extra.begin(), extra.end());
  return cluster;
}

AdminCluster AdminCluster::Etcd(const std::string& endpoint,
                                const std::string& job,
                                std::vector<std::string> extra) {
  AdminCluster cluster = {{"--etcd=" + endpoint, "--job=" + job}};
  cluster.flags.insert(cluster.flags.end(), extra.begin(), extra.end());
  return cluster;
}

std::vector<std::string> PsAdminArgv(const AdminCluster& cluster,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinaryPath("ops/ps_admin")};
  argv.insert(argv.end(), cluster.flags.begin(), cluster.flags.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

AdminRun RunPsAdmin(const AdminCluster& cluster,
                    const std::vector<std::string>& args,
                    const std::string& log_path, absl::Duration timeout) {
  const std::vector<std::string> argv = PsAdminArgv(cluster, args);
  AdminRun run;
  const absl::Time deadline = absl::Now() + timeout;
  auto process = ChildProcess::Start(argv, /*capture_stdout=*/true, log_path);
  if (!process.ok()) {
    run.log = std::string(process.status().message());
    return run;
  }
  if (absl::StatusOr<std::string> out = (*process)->ReadToEnd(deadline);
      out.ok()) {
    run.out = *std::move(out);
  }
  run.exit_code = (*process)->Wait(deadline - absl::Now());
  std::ifstream file(log_path);
  std::stringstream log;
  log << file.rdbuf();
  run.log = log.str();
  return run;
}

}  // namespace ps::testing
