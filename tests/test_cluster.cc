#include "tests/test_cluster.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tests/test_files.h"

namespace ps::testing {

std::vector<std::string> PsWorkerArgv(
    const std::vector<std::string>& cluster_flags,
    const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinaryPath("worker/ps_worker")};
  argv.insert(argv.end(), cluster_flags.begin(), cluster_flags.end());
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(
    const std::string& dir, TestClusterOptions options) {
  std::filesystem::create_directories(dir);
  auto cluster =
      std::unique_ptr<TestCluster>(new TestCluster(dir, std::move(options)));
  if (cluster->options_.running_etcd != nullptr) {
    cluster->etcd_ = cluster->options_.running_etcd;
  } else if (cluster->options_.etcd) {
    ASSIGN_OR_RETURN(cluster->owned_etcd_, EtcdProcess::Start(dir + "/etcd"));
    cluster->etcd_ = cluster->owned_etcd_.get();
  }
  for (int i = 0; i < cluster->options_.shards; ++i) {
    RETURN_IF_ERROR(cluster->AddShard(cluster->options_.shards));
  }
  return cluster;
}

std::vector<std::string> TestCluster::addresses() const {
  std::vector<std::string> addresses;
  for (const Shard& shard : shards_) {
    addresses.push_back(shard.primary->address());
  }
  return addresses;
}

absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>>
TestCluster::ConnectEtcd() const {
  if (etcd_ == nullptr) {
    return absl::FailedPreconditionError("the cluster runs without etcd");
  }
  return etcd_->Connect();
}

std::vector<std::string> TestCluster::ClientFlags() const {
  if (etcd_ != nullptr) {
    return {"--etcd=" + etcd_->endpoint(), "--job=" + options_.job};
  }
  return {"--servers=" + absl::StrJoin(addresses(), ",")};
}

std::vector<std::string> TestCluster::EtcdServerFlags() const {
  if (etcd_ == nullptr) return {};
  return {"--etcd=" + etcd_->endpoint(), "--job=" + options_.job,
          absl::StrCat("--etcd_lease_s=", options_.etcd_lease_s)};
}

std::string TestCluster::ShardDir(int i) const {
  return absl::StrCat(dir_, "/shard", i);
}

std::vector<std::string> TestCluster::ShardFlags(int i) const {
  std::vector<std::string> flags = {
      "--data_dir=" + ShardDir(i), absl::StrCat("--shard_index=", i),
      absl::StrCat("--num_shards=", shards_[i].job_shards)};
  const std::vector<std::string> etcd = EtcdServerFlags();
  flags.insert(flags.end(), etcd.begin(), etcd.end());
  flags.insert(flags.end(), options_.server_flags.begin(),
               options_.server_flags.end());
  flags.insert(flags.end(), options_.primary_flags.begin(),
               options_.primary_flags.end());
  flags.insert(flags.end(), shards_[i].more.begin(), shards_[i].more.end());
  return flags;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> TestCluster::StartServer(
    const std::vector<std::string>& flags, const std::string& name) {
  const std::string log = absl::StrCat(dir_, "/", name, ".log", ++starts_);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags, options_.start_timeout, log);
  if (!server.ok()) {
    return absl::UnavailableError(
        absl::StrCat(name, " did not start: ", server.status().message(), "\n",
                     ReadFile(log)));
  }
  return server;
}

absl::Status TestCluster::AddShard(int job_shards,
                                   const std::vector<std::string>& more) {
  const int i = num_shards();
  shards_.push_back({nullptr, {}, more, job_shards});
  absl::StatusOr<std::unique_ptr<ServerProcess>> primary =
      StartServer(ShardFlags(i), absl::StrCat("shard", i));
  if (!primary.ok()) {
    shards_.pop_back();
    return primary.status();
  }
  shards_[i].primary = *std::move(primary);
  return StartReplicas(i);
}

absl::Status TestCluster::StartReplicas(int i) {
  for (int r = 0; r < options_.replicas_per_shard; ++r) {
    std::vector<std::string> flags = EtcdServerFlags();
    flags.push_back(absl::StrCat("--data_dir=", ShardDir(i), "_replica", r));
    flags.push_back(etcd_ != nullptr
                        ? absl::StrCat("--replica_of_shard=", i)
                        : "--replica_of=" + shards_[i].primary->address());
    flags.insert(flags.end(), options_.server_flags.begin(),
                 options_.server_flags.end());
    flags.insert(flags.end(), options_.replica_flags.begin(),
                 options_.replica_flags.end());
    ASSIGN_OR_RETURN(
        auto replica,
        StartServer(flags, absl::StrCat("shard", i, "_replica", r)));
    shards_[i].replicas.push_back(std::move(replica));
  }
  return absl::OkStatus();
}

absl::Status TestCluster::RestartShard(int i,
                                       const std::vector<std::string>& more) {
  std::vector<std::string> flags = ShardFlags(i);
  // Its port again, so that its replicas and workers find it where it was.
  flags.push_back("--listen=" + shards_[i].primary->address());
  flags.insert(flags.end(), more.begin(), more.end());
  absl::StatusOr<std::unique_ptr<ServerProcess>> restarted =
      StartServer(flags, absl::StrCat("shard", i));
  if (!restarted.ok()) return restarted.status();
  shards_[i].primary = *std::move(restarted);
  return absl::OkStatus();
}

int TestCluster::StopShard(int i, int signal) {
  return shards_[i].primary->SignalAndWait(signal);
}

std::vector<std::string> TestCluster::AdminArgs(
    const std::vector<std::string>& args) const {
  return PsAdminArgv({ClientFlags()}, args);
}

AdminRun TestCluster::Admin(const std::vector<std::string>& args,
                            absl::Duration timeout) {
  return RunPsAdmin({ClientFlags()}, args,
                    absl::StrCat(dir_, "/admin", ++admin_runs_, ".log"),
                    timeout);
}

std::vector<std::string> TestCluster::WorkerArgs(
    int index, int count, const std::vector<std::string>& flags) const {
  std::vector<std::string> all = {absl::StrCat("--worker_index=", index),
                                  absl::StrCat("--num_workers=", count)};
  all.insert(all.end(), flags.begin(), flags.end());
  return PsWorkerArgv(ClientFlags(), all);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> TestCluster::StartWorker(
    int index, int count, const std::vector<std::string>& flags) {
  ++worker_starts_[index];
  return ChildProcess::Start(WorkerArgs(index, count, flags),
                             /*capture_stdout=*/false, WorkerLog(index));
}

int TestCluster::RunWorker(int index, int count,
                           const std::vector<std::string>& flags,
                           absl::Duration timeout) {
  ++worker_starts_[index];
  return RunToCompletion(WorkerArgs(index, count, flags), WorkerLog(index),
                         timeout);
}

std::string TestCluster::WorkerLog(int index) const {
  const auto starts = worker_starts_.find(index);
  return absl::StrCat(dir_, "/worker", index, ".log",
                      starts == worker_starts_.end() ? 0 : starts->second);
}

}  // namespace ps::testing
