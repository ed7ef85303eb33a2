// File: cluster/etcd_job_flags.h
//
// The flags of the binaries that find a job's shards in etcd instead of
// --servers (ps_worker, ps_admin): --etcd and --job, defined once in
// etcd_job_flags.cc so that both binaries say the same, and the lookup they
// ask for. Linking this library defines the flags.

#ifndef PS_CLUSTER_ETCD_JOB_FLAGS_H_
#define PS_CLUSTER_ETCD_JOB_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "net/etcd_client.h"

namespace ps::cluster {

struct EtcdJob {
  // How to reach the job's etcd: --etcd's endpoints, with the TLS and user
  // of the --etcd_tls_* and --etcd_user flags. No endpoints: no etcd
  // (--servers names the shards).
  net::EtcdOptions connection;
  std::string job;

  bool enabled() const { return !connection.endpoints.empty(); }
};

// The flags as given. INVALID_ARGUMENT for a bad --job, --servers given
// beside --etcd, or etcd security flags that do not go together.
absl::StatusOr<EtcdJob> EtcdJobFromFlags();

// A client of the job's etcd, for a binary that follows the job while it
// runs (the coordinator moving to another shard).
absl::StatusOr<std::unique_ptr<CoordinationStore>> ConnectToJobEtcd(
    const EtcdJob& job);

// The addresses of `job`'s shards in index order, waiting up to `wait` for
// all of them to be registered (shard_directory.h's FindShards).
absl::StatusOr<std::vector<std::string>> FindJobShards(const EtcdJob& job,
                                                       absl::Duration wait);

}  // namespace ps::cluster

#endif  // PS_CLUSTER_ETCD_JOB_FLAGS_H_
