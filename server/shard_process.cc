#include "server/shard_process.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/exit_codes.h"
#include "base/status_macros.h"
#include "cluster/etcd_seen.h"
#include "cluster/etcd_store.h"
#include "cluster/primary_watch.h"
#include "cluster/shard_directory.h"
#include "cluster/shard_role.h"
#include "glog/logging.h"
#include "server/shard_server.h"

namespace ps::server {
namespace {

constexpr char kProgram[] = "ps_server";

// The process's part in its job under --etcd: the job's store, and either
// its registration as the primary (and, until then, a new shard's claim)
// or, as a replica, its watch of the primary.
struct EtcdPresence {
  std::unique_ptr<cluster::CoordinationStore> store;
  std::unique_ptr<cluster::LeasedKey> claim;
  std::unique_ptr<cluster::LeasedKey> registration;
  std::unique_ptr<cluster::PrimaryWatch> watch;

  // The registration this process serves under (its own, or the watch's
  // once promoted); null when none.
  const cluster::LeasedKey* serving_registration() const {
    if (registration != nullptr) return registration.get();
    return watch != nullptr ? watch->registration() : nullptr;
  }
};

// With --etcd: a client of the job's etcd, set in `options` so that the
// shard follows the job's slot map from its start.
absl::StatusOr<EtcdPresence> ConnectToEtcd(
    const EtcdMembershipOptions& membership, ServerOptions* options) {
  EtcdPresence presence;
  if (!membership.enabled()) return presence;
  ASSIGN_OR_RETURN(presence.store,
                   cluster::EtcdStore::Connect(membership.connection));
  options->etcd = presence.store.get();
  options->job = membership.job;
  // A replica outlasts its dead primary's lease, to be promoted.
  options->replica_follow_retry =
      std::max(options->replica_follow_retry, 3 * membership.lease);
  return presence;
}

// The address this process will register under, where the options say it
// before the server starts (empty for --listen on port 0).
std::string AdvertisedAddress(const ServerOptions& options,
                              const EtcdMembershipOptions& membership) {
  if (!membership.advertise_address.empty()) {
    return membership.advertise_address;
  }
  if (absl::EndsWith(options.listen_address, ":0")) return "";
  return options.listen_address;
}

// Under --replicas: the role etcd gives this process (cluster/shard_role.h),
// written into `membership` and `options`.
absl::Status ChooseRole(EtcdPresence& presence,
                        EtcdMembershipOptions* membership,
                        ServerOptions* options) {
  if (membership->replicas == 0) return absl::OkStatus();
  cluster::RoleOptions role_options;
  role_options.job = membership->job;
  role_options.shard_index = static_cast<int>(options->shard_index);
  role_options.data_dir = options->store.data_dir;
  role_options.replica_copy = IsReplicaDataDir(options->store.data_dir);
  role_options.own_address = AdvertisedAddress(*options, *membership);
  role_options.lease = membership->lease;
  role_options.join_wait = membership->join_wait;
  ASSIGN_OR_RETURN(cluster::ShardRole role,
                   cluster::ChooseRole(presence.store.get(), role_options));
  presence.claim = std::move(role.claim);
  if (role.replica_of_shard < 0) return absl::OkStatus();
  membership->replica_of_shard = role.replica_of_shard;
  options->discard_superseded_data_dir = role.discard_superseded_data_dir;
  if (!options->restore_from.empty()) {
    LOG(WARNING) << "shard " << role.replica_of_shard
                 << " is served: this replica copies it, not --restore_from";
    options->restore_from.clear();
  }
  return absl::OkStatus();
}

// --replica_of_shard=N under --etcd: the address shard N of the job is
// registered at (waiting up to --join_wait_s for it) and its count, for
// this replica.
absl::Status FindPrimary(const EtcdPresence& presence,
                         const EtcdMembershipOptions& membership,
                         ServerOptions* options) {
  if (membership.replica_of_shard < 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      const cluster::ShardRecord primary,
      cluster::WaitForShard(*presence.store, membership.job,
                            membership.replica_of_shard, membership.join_wait));
  options->replica_of = primary.address;
  options->shard_index = static_cast<uint32_t>(membership.replica_of_shard);
  options->num_shards = static_cast<uint32_t>(primary.num_shards);
  return absl::OkStatus();
}

// What this shard says of itself in etcd: its address, index and count.
cluster::ShardRecord OwnRecord(const ServerOptions& options,
                               const std::string& advertise_address, int port) {
  cluster::ShardRecord record;
  record.index = static_cast<int>(options.shard_index);
  record.num_shards =
      static_cast<int>(std::max(options.num_shards, options.shard_index + 1));
  // The flags' check made sure a wildcard --listen has --advertise_address.
  record.address = advertise_address;
  if (record.address.empty()) {
    record.address = absl::StrCat(
        options.listen_address.substr(0, options.listen_address.rfind(':')),
        ":", port);
  }
  return record;
}

// With --etcd: registers the shard as the primary, or, a replica, starts
// watching its primary's registration to take its place.
absl::Status JoinInEtcd(const ServerOptions& options,
                        const EtcdMembershipOptions& membership,
                        ShardServer& server, EtcdPresence& presence) {
  if (presence.store == nullptr) return absl::OkStatus();
  const cluster::ShardRecord record =
      OwnRecord(options, membership.advertise_address, server.port());
  if (!options.replica_of.empty()) {
    cluster::PromotionOptions promotion;
    promotion.job = membership.job;
    promotion.own = record;
    promotion.primary_address = options.replica_of;
    promotion.data_dir = options.store.data_dir;
    promotion.lease = membership.lease;
    promotion.finds_roles = membership.replicas > 0;
    promotion.allow_unclean_promotion = membership.allow_unclean_promotion;
    presence.watch = std::make_unique<cluster::PrimaryWatch>(
        presence.store.get(), &server, std::move(promotion));
    return absl::OkStatus();
  }
  cluster::RegistrationOptions registration;
  registration.job = membership.job;
  registration.record = record;
  registration.data_dir = options.store.data_dir;
  registration.lease = membership.lease;
  registration.join_wait = membership.join_wait;
  // On an error the process keeps the registration (and the shard stays
  // fenced by it) until the shard is gone.
  return cluster::RegisterAsPrimary(presence.store.get(), registration, server,
                                    &presence.registration, &presence.claim);
}

// Prints where the shard serves (the lines scripts and tests wait for) and
// logs it.
void AnnounceServing(const ServerOptions& options, const ShardServer& server) {
  const std::string& address = options.listen_address;
  const std::string host = address.substr(0, address.rfind(':'));
  std::printf("ps_server listening on %s:%d\n", host.c_str(), server.port());
  if (!options.health_listen.empty()) {
    std::printf(
        "ps_server health on %s:%d\n",
        options.health_listen.substr(0, options.health_listen.rfind(':'))
            .c_str(),
        server.health_port());
  }
  if (!options.metrics_listen.empty()) {
    std::printf("ps_server metrics on %s\n", server.metrics_address().c_str());
  }
  std::fflush(stdout);
  LOG(INFO) << "shard " << options.shard_index << " of " << options.num_shards
            << " serving " << options.store.data_dir << " on " << host << ":"
            << server.port() << " (durability="
            << (options.store.durability == embedding::Durability::kWal
                    ? "wal"
                    : "periodic")
            << ")";
}

// Why serving ends: a signal, an admin stop, or the cluster.
struct StopCause {
  std::string why;
  bool failed = false;
};

// Waits for one of `shutdown_signals`, a stop asked over the admin API
// (`stop_asked`), or until the cluster asks the shard to stop: a replica's
// watch asked it, or, under --replicas, the primary's registration is lost
// for good (another process serves the shard).
// Meanwhile, under --etcd, records where etcd is in the data dir every
// 10 s: a restore from a snapshot older than that is refused at the next
// start.
StopCause WaitForStop(const sigset_t& shutdown_signals,
                      const std::atomic<bool>& stop_asked,
                      const ServerProcessOptions& process,
                      const EtcdPresence& presence) {
  const absl::Duration tick = absl::Milliseconds(250);
  absl::Time record_at = absl::Now() + absl::Seconds(10);
  while (true) {
    const timespec wait = absl::ToTimespec(tick);
    const int signal_number = sigtimedwait(&shutdown_signals, nullptr, &wait);
    if (signal_number > 0) return {absl::StrCat("signal ", signal_number)};
    if (stop_asked.load()) return {"a stop asked over the admin API"};
    if (presence.store != nullptr && absl::Now() >= record_at) {
      cluster::RecordStoreSeen(process.server.store.data_dir, *presence.store,
                               /*unchecked=*/false);
      record_at = absl::Now() + absl::Seconds(10);
    }
    if (presence.watch != nullptr) {
      if (std::optional<absl::Status> asked = presence.watch->StopRequest()) {
        return {asked->ok() ? "the shard left the job"
                            : std::string(asked->message()),
                !asked->ok()};
      }
    }
    const cluster::LeasedKey* registration = presence.serving_registration();
    if (process.etcd.replicas > 0 && registration != nullptr &&
        registration->lost()) {
      LOG(ERROR) << "this shard's registration is lost for good (another "
                    "process serves the shard): stopping, to start again "
                    "as a replica";
      return {"the shard is lost", true};
    }
  }
}

// Serves until WaitForStop(), then hands over: still registered (and
// fenced by it) while pushes stop and the replicas catch up, so that one
// promoted once this shard lets go has every push it acknowledged; then
// leaves etcd and stops the server within --drain_seconds.
int ServeUntilStopped(const sigset_t& shutdown_signals,
                      const std::atomic<bool>& stop_asked,
                      const ServerProcessOptions& process,
                      std::unique_ptr<ShardServer> server,
                      EtcdPresence presence) {
  StopCause cause =
      WaitForStop(shutdown_signals, stop_asked, process, presence);
  if (presence.watch != nullptr) {
    // A promotion under way when the signal came finishes first; one that
    // failed makes the exit 70, as any failure does.
    presence.watch->Stop();
    presence.registration = presence.watch->TakeRegistration();
    if (std::optional<absl::Status> asked = presence.watch->StopRequest();
        asked.has_value() && !asked->ok()) {
      cause.failed = true;
    }
  }
  const absl::Duration drain = process.drain;
  LOG(INFO) << cause.why << ": draining for up to "
            << absl::ToDoubleSeconds(drain) << " s";
  server->HandOver(absl::Now() + drain / 2);
  absl::Status stopped = server->Shutdown(drain / 2);
  server->FenceBy(nullptr);
  // Workers that look the shards up from now on do not find this one.
  presence.registration.reset();
  // The store outlives the server, which follows the slot map with it.
  server.reset();
  if (!stopped.ok()) {
    LOG(ERROR) << "shutdown: " << stopped;
    return kExitFailed;
  }
  if (cause.failed) return kExitFailed;
  LOG(INFO) << "stopped cleanly";
  return kExitDone;
}

// Joins the job under --etcd before the shard starts: etcd went on since
// the data dir saw it, the role (--replicas), the primary to follow.
absl::Status PrepareInEtcd(EtcdPresence& presence,
                           EtcdMembershipOptions* membership,
                           ServerOptions* options) {
  if (presence.store == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(cluster::CheckStoreWentOn(options->store.data_dir,
                                            *presence.store,
                                            membership->accept_etcd_rollback));
  RETURN_IF_ERROR(ChooseRole(presence, membership, options));
  return FindPrimary(presence, *membership, options);
}

}  // namespace

int RunShardProcess(ServerProcessOptions process,
                    const sigset_t& shutdown_signals) {
  // A stop asked over the admin API takes the path SIGTERM takes, once
  // WaitForStop() sees it.
  auto stop_asked = std::make_shared<std::atomic<bool>>(false);
  process.server.stop = [stop_asked] { stop_asked->store(true); };
  ServerOptions& options = process.server;
  EtcdMembershipOptions& membership = process.etcd;
  absl::StatusOr<EtcdPresence> presence = ConnectToEtcd(membership, &options);
  if (!presence.ok()) return FailUsage(kProgram, presence.status().message());
  if (absl::Status prepared = PrepareInEtcd(*presence, &membership, &options);
      !prepared.ok()) {
    return FailWith(kProgram, prepared);
  }
  absl::StatusOr<std::unique_ptr<ShardServer>> server =
      ShardServer::Start(options);
  if (!server.ok()) {
    // A shard that cannot start is 70 even for UNAVAILABLE (69 means a
    // shard this binary needed did not answer, which is not this).
    if (absl::IsInvalidArgument(server.status())) {
      return FailUsage(kProgram, server.status().message());
    }
    FailWith(kProgram, server.status());
    return kExitFailed;
  }
  if (absl::Status joined =
          JoinInEtcd(options, membership, **server, *presence);
      !joined.ok()) {
    // Options that do not go together are a bad command (64), as flags are.
    return FailFor(kProgram, joined);
  }
  if (presence->store != nullptr) {
    cluster::RecordStoreSeen(options.store.data_dir, *presence->store,
                             /*unchecked=*/membership.accept_etcd_rollback);
  }
  AnnounceServing(options, **server);
  return ServeUntilStopped(shutdown_signals, *stop_asked, process,
                           *std::move(server), *std::move(presence));
}

}  // namespace ps::server
