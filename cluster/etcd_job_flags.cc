#include "cluster/etcd_job_flags.h"

#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/address_list.h"
#include "base/status_macros.h"
#include "cluster/etcd_store.h"
#include "cluster/shard_directory.h"
#include "glog/logging.h"
#include "net/etcd_security_flags.h"

ABSL_FLAG(std::string, etcd, "",
          "host:port[,...] of an etcd cluster: find the shards of --job "
          "there (as ps_server --etcd registers them) instead of --servers.");
ABSL_FLAG(std::string, job, "", "With --etcd: the job whose shards to use.");

namespace ps::cluster {

absl::StatusOr<EtcdJob> EtcdJobFromFlags() {
  EtcdJob job;
  const std::string endpoints = absl::GetFlag(FLAGS_etcd);
  if (endpoints.empty()) return job;
  job.connection.endpoints = SplitAddressList(endpoints);
  if (job.connection.endpoints.empty()) {
    return absl::InvalidArgumentError("--etcd names no endpoint");
  }
  job.job = absl::GetFlag(FLAGS_job);
  RETURN_IF_ERROR(CheckJobName(job.job));
  if (absl::flags_internal::WasPresentOnCommandLine("servers")) {
    return absl::InvalidArgumentError(
        "--etcd finds the shards: give --servers or --etcd, not both");
  }
  RETURN_IF_ERROR(net::AddEtcdSecurityFromFlags(&job.connection));
  return job;
}

absl::StatusOr<std::unique_ptr<CoordinationStore>> ConnectToJobEtcd(
    const EtcdJob& job) {
  return EtcdStore::Connect(job.connection);
}

absl::StatusOr<std::vector<std::string>> FindJobShards(const EtcdJob& job,
                                                       absl::Duration wait) {
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinationStore> etcd,
                   ConnectToJobEtcd(job));
  ASSIGN_OR_RETURN(std::vector<std::string> servers,
                   FindShards(*etcd, job.job, wait));
  LOG(INFO) << "shards of job " << job.job
            << " from etcd: " << absl::StrJoin(servers, ",");
  return servers;
}

}  // namespace ps::cluster
