// File: tests/test_cluster.h
//
// A cluster builder for the process tests: the shards of a job as real
// ps_server processes on fresh data directories, found by their addresses
// or through a Debian etcd (its own, or one the test runs), each with the
// replicas asked; and the flags, ps_admin runs and ps_worker processes that
// reach them. Tests of a job's shards start them here; tests of which role
// or membership one process takes (failover, replication, joining a job)
// start that process through server_process.h with the flags they study.
//
// Data directories and logs live under the cluster's directory: shard<i>/
// and shard<i>.log<n> (n counts the cluster's server starts),
// shard<i>_replica<r>/, admin<n>.log, worker<i>.log<n>.

#ifndef PS_TESTS_TEST_CLUSTER_H_
#define PS_TESTS_TEST_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/child_process.h"
#include "tests/etcd_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"

namespace ps::testing {

// ps_worker's command line: the binary, `cluster_flags` (--servers=..., or
// --etcd=... --job=...), then `flags`; for a worker of a cluster a test
// started by hand.
std::vector<std::string> PsWorkerArgv(
    const std::vector<std::string>& cluster_flags,
    const std::vector<std::string>& flags);

struct TestClusterOptions {
  // Shards of the job; 0 starts none (AddShard() does, one by one).
  int shards = 1;
  // Start etcd and run the job through it (--etcd, --job) rather than by
  // addresses (--servers).
  bool etcd = false;
  // Or run the job through an etcd the test already runs (and that outlives
  // the cluster), whatever `etcd` says.
  EtcdProcess* running_etcd = nullptr;
  std::string job = "ctr";
  int etcd_lease_s = 2;
  // Replicas started per shard: --replica_of=ADDRESS without etcd,
  // --replica_of_shard=I with it.
  int replicas_per_shard = 0;
  // Flags of every server, after the builder's (a later one wins).
  std::vector<std::string> server_flags = {"--cache_mb=64"};
  // Flags of the primaries only, and of the replicas only, after those.
  std::vector<std::string> primary_flags;
  std::vector<std::string> replica_flags;
  absl::Duration start_timeout = absl::Seconds(90);
};

class TestCluster {
 public:
  // Starts the cluster under `dir` (created if missing). UNAVAILABLE, with
  // the log of the server that did not start, if one does not.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      const std::string& dir, TestClusterOptions options);

  int num_shards() const { return static_cast<int>(shards_.size()); }
  // Shard i's primary (as last started), and its replica r.
  ServerProcess& shard(int i) { return *shards_[i].primary; }
  ServerProcess& replica(int shard, int r) {
    return *shards_[shard].replicas[r];
  }
  std::vector<std::string> addresses() const;
  const std::string& dir() const { return dir_; }
  const TestClusterOptions& options() const { return options_; }

  // The etcd of the job; nullptr without options.etcd.
  EtcdProcess* etcd() { return etcd_; }
  // A client of that etcd. REQUIRES: etcd() is not null.
  absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> ConnectEtcd()
      const;

  // The flags that point a worker or ps_admin at the job: --servers=... or
  // --etcd=... --job=....
  std::vector<std::string> ClientFlags() const;

  // The data directory and the ps_server flags of shard i's primary.
  std::string ShardDir(int i) const;
  std::vector<std::string> ShardFlags(int i) const;

  // Starts one more shard (index num_shards()) of a job of `job_shards`
  // shards, with `more` flags, and its replicas.
  absl::Status AddShard(int job_shards,
                        const std::vector<std::string>& more = {});
  // Starts shard i's primary again on its data directory and port, with
  // the --num_shards it first had and `more` flags. REQUIRES: StopShard(i).
  absl::Status RestartShard(int i, const std::vector<std::string>& more = {});
  // Ends shard i's primary with `signal`; its exit code (128 + the signal
  // that ended it). REQUIRES: it runs.
  int StopShard(int i, int signal);

  // ps_admin's command line at the job: the binary, ClientFlags(), `args`.
  std::vector<std::string> AdminArgs(
      const std::vector<std::string>& args) const;
  // Runs ps_admin at the job with `args`; its stderr also in admin<n>.log.
  AdminRun Admin(const std::vector<std::string>& args,
                 absl::Duration timeout = absl::Minutes(5));

  // ps_worker's command line: the binary, ClientFlags(), --worker_index,
  // --num_workers, then `flags`.
  std::vector<std::string> WorkerArgs(
      int index, int count, const std::vector<std::string>& flags) const;
  // Starts that worker, its stderr to WorkerLog(index).
  absl::StatusOr<std::unique_ptr<ChildProcess>> StartWorker(
      int index, int count, const std::vector<std::string>& flags);
  // Runs it to its exit (killed past `timeout`): its exit code.
  int RunWorker(int index, int count, const std::vector<std::string>& flags,
                absl::Duration timeout = absl::Minutes(5));
  // Where the last start of worker `index` writes its stderr (each start
  // has a file of its own).
  std::string WorkerLog(int index) const;

 private:
  struct Shard {
    std::unique_ptr<ServerProcess> primary;
    std::vector<std::unique_ptr<ServerProcess>> replicas;
    std::vector<std::string> more;  // flags given to AddShard()
    int job_shards = 0;
  };

  TestCluster(std::string dir, TestClusterOptions options)
      : dir_(std::move(dir)), options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      const std::vector<std::string>& flags, const std::string& name);
  absl::Status StartReplicas(int i);
  // --etcd, --job and --etcd_lease_s of a server; none without etcd.
  std::vector<std::string> EtcdServerFlags() const;

  std::string dir_;
  TestClusterOptions options_;
  std::unique_ptr<EtcdProcess> owned_etcd_;
  EtcdProcess* etcd_ = nullptr;  // owned_etcd_ or options_.running_etcd
  std::vector<Shard> shards_;
  int starts_ = 0;
  int admin_runs_ = 0;
  std::map<int, int> worker_starts_;  // by worker index
};

}  // namespace ps::testing

#endif  // PS_TESTS_TEST_CLUSTER_H_
