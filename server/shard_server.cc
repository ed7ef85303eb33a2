#include "server/shard_server.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "embedding/restore.h"
#include "glog/logging.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "net/tls_credentials.h"
#include "server/shard_identity.h"

namespace ps::server {

namespace {

// A primary's replication feed as the in-sync recorder sees it.
class FeedInSync : public cluster::InSyncFeed {
 public:
  explicit FeedInSync(embedding::ReplicationFeed* feed) : feed_(feed) {}
  uint64_t id() const override { return feed_->id(); }
  std::vector<uint64_t> InSyncFollowers() override {
    return feed_->InSyncFollowers();
  }
  void SetRecordedInSync(
      std::vector<uint64_t> followers,
      std::optional<std::vector<uint64_t>> counted) override {
    feed_->SetRecordedInSync(std::move(followers), std::move(counted));
  }

 private:
  embedding::ReplicationFeed* const feed_;
};

// A restore marks the data dir RESTORING before it writes a row and removes
// the mark once the dir is whole: a dir with the mark was interrupted. The
// next --restore_from starts it again; a start without one is refused.
constexpr char kRestoringFile[] = "/RESTORING";
constexpr char kRestoredFromFile[] = "/RESTORED_FROM";

// Restores options.store.data_dir from options.restore_from, unless it was
// restored from that checkpoint before (recorded in RESTORED_FROM); whether
// it restored now.
absl::StatusOr<bool> RestoreFromCheckpoint(const ServerOptions& options,
                                           const ShardIdentity& identity) {
  ASSIGN_OR_RETURN(CheckpointManifest manifest,
                   ReadManifest(options.restore_from));
  const std::string& data_dir = options.store.data_dir;
  std::error_code error;
  const std::string checkpoint =
      std::filesystem::weakly_canonical(options.restore_from, error).string();
  const std::string stamp = absl::StrCat(checkpoint, " ", manifest.created_at(),
                                         " cut ", manifest.cut(), "\n");
  if (std::filesystem::exists(data_dir + kRestoringFile, error)) {
    LOG(WARNING) << "a restore into " << data_dir
                 << " was interrupted: starting it again";
    for (const auto& entry :
         std::filesystem::directory_iterator(data_dir, error)) {
      std::filesystem::remove_all(entry.path(), error);
      if (error) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot remove ", entry.path().string(), ": ", error.message()));
      }
    }
  } else if (std::filesystem::exists(data_dir, error) &&
             !std::filesystem::is_empty(data_dir, error)) {
    std::ifstream recorded(data_dir + kRestoredFromFile);
    std::stringstream text;
    text << recorded.rdbuf();
    if (recorded && text.str() == stamp) return false;  // done before
    return absl::FailedPreconditionError(absl::StrCat(
        "--restore_from needs an empty --data_dir: ", data_dir,
        recorded ? absl::StrCat(" was restored from another checkpoint (",
                                text.str(), ")")
                 : std::string(" holds a shard already")));
  }
  std::filesystem::create_directories(data_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", data_dir, ": ", error.message()));
  }
  RETURN_IF_ERROR(WriteFileDurably(data_dir + kRestoringFile, stamp));
  embedding::RestoreOptions restore;
  for (const auto& shard : manifest.shards())
    restore.parts.push_back(options.restore_from + "/" + shard.path());
  restore.tables.assign(manifest.tables().begin(), manifest.tables().end());
  // The checkpoint's map when it is restored onto as many shards, so that
  // every row stays where it was; else the initial map of the new count.
  const SlotMap recorded = RecordedSlotMap(manifest);
  auto map = std::make_shared<const SlotMap>(
      manifest.num_shards() == identity.num_shards
          ? recorded
          : SlotMap::Initial(identity.num_shards));
  RETURN_IF_ERROR(cluster::SlotOwnership::Create(data_dir, *map));
  // A part holds the rows its shard owned at the cut, and may hold rows of
  // slots that moved away from it before (stale): each key comes from the
  // part of its owner by the checkpoint's map.
  std::vector<uint32_t> part_shards;
  for (const auto& shard : manifest.shards())
    part_shards.push_back(shard.index());
  restore.keep = [identity, map, recorded, part_shards](uint64_t key,
                                                        size_t part) {
    return map->ShardForKey(key) == identity.shard_index &&
           recorded.ShardForKey(key) == part_shards[part];
  };
  restore.store = options.store;
  LOG(INFO) << "restoring shard " << identity.shard_index << " of "
            << identity.num_shards << " from " << checkpoint << " (cut "
            << manifest.cut() << ", " << manifest.num_shards() << " shards)";
  RETURN_IF_ERROR(embedding::RestoreRows(restore).status());
  RETURN_IF_ERROR(WriteShardIdentity(data_dir, identity));
  RETURN_IF_ERROR(WriteFileDurably(data_dir + kRestoredFromFile, stamp));
  RETURN_IF_ERROR(RemoveFileDurably(data_dir + kRestoringFile));
  return true;
}

// INVALID_ARGUMENT for options that do not go together, or a listen address
// beyond loopback that the options do not allow.
absl::Status CheckServingOptions(const ServerOptions& options) {
  if (options.num_shards == 0 ||
      (options.shard_index >= options.num_shards && options.etcd == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index ", options.shard_index,
                     " must be below num_shards ", options.num_shards,
                     " (a shard joins a running job only under --etcd)"));
  }
  if (options.max_keys_per_request == 0 || options.max_message_bytes == 0) {
    return absl::InvalidArgumentError(
        "max_keys_per_request and max_message_bytes must be positive");
  }
  RETURN_IF_ERROR(CheckListenSecurity(
      options.listen_address, options.tls, options.allow_insecure_remote,
      options.allow_unauthenticated_clients,
      "read and change the model, stop the shard or drop its tables"));
  if (options.admin_token.empty() && !options.allow_unauthenticated_admin &&
      !IsLoopbackAddress(options.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to listen on ", options.listen_address,
        " without --admin_token_file: every client that reaches it (each "
        "worker among them) could drain the shard, drop tables, move its "
        "slots or copy its rows. Give --admin_token_file (and "
        "--worker_token_file), or --allow_unauthenticated_admin on a network "
        "you trust"));
  }
  return absl::OkStatus();
}

// The file that makes a data dir a replica's, which a replica may empty
// and copy into again; it holds the primary's address.
constexpr char kReplicaMarkerFile[] = "/REPLICA_OF";

// Restores the data dir from options.restore_from if given; without it,
// refuses a data dir whose restore was interrupted. Then checks that the
// data dir is not another shard's. Whether it restored now.
absl::StatusOr<bool> PrepareDataDir(const ServerOptions& options,
                                    const ShardIdentity& identity) {
  bool restored = false;
  if (!options.restore_from.empty()) {
    ASSIGN_OR_RETURN(restored, RestoreFromCheckpoint(options, identity));
  } else if (std::filesystem::exists(options.store.data_dir + kRestoringFile)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a restore into ", options.store.data_dir,
        " was interrupted (it holds RESTORING): start it again with "
        "--restore_from, or remove the dir"));
  }
  // A replica's data dir started as a primary: promoted, never to be
  // emptied for a copy again.
  if (options.replica_of.empty() &&
      std::filesystem::exists(options.store.data_dir + kReplicaMarkerFile)) {
    LOG(WARNING) << options.store.data_dir
                 << " was a replica's: it serves as a primary from now on";
    RETURN_IF_ERROR(
        RemoveFileDurably(options.store.data_dir + kReplicaMarkerFile));
  }
  // Checked before the store opens (a replay can take a while), recorded
  // once it has (RocksDB's lock makes the dir this process's). Under etcd
  // --num_shards may have changed since: it is only the job's first count.
  RETURN_IF_ERROR(
      CheckShardIdentity(options.store.data_dir, identity,
                         /*compare_count=*/options.etcd == nullptr));
  return restored;
}

// Empties a replica's data dir (or makes it), refusing one that holds
// anything but a replica's copy, and marks it a replica's.
absl::Status PrepareReplicaDataDir(const ServerOptions& options) {
  const std::string& dir = options.store.data_dir;
  std::error_code error;
  const bool replica = std::filesystem::exists(dir + kReplicaMarkerFile);
  if (!replica && options.discard_superseded_data_dir) {
    LOG(WARNING) << dir
                 << " holds rows of an older generation of the shard (a "
                    "replica took its place since): emptied for a copy";
  } else if (!replica && std::filesystem::exists(dir) &&
             !std::filesystem::is_empty(dir, error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--replica_of copies the primary into --data_dir, but ", dir,
        " holds something else than a replica's copy (no REPLICA_OF file): "
        "give an empty dir"));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::filesystem::remove_all(entry.path(), error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("emptying ", dir, " for a new copy: ", error.message()));
    }
  }
  std::filesystem::create_directories(dir, error);
  return WriteFileDurably(dir + kReplicaMarkerFile, options.replica_of + "\n");
}

// A channel to the primary, with the shard's own TLS files as a client's.
absl::StatusOr<std::shared_ptr<grpc::Channel>> PrimaryChannel(
    const ServerOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls));
  grpc::ChannelArguments arguments;
  AddTlsChannelArguments(options.tls, &arguments);
  arguments.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(
      options.max_message_bytes, std::numeric_limits<int>::max())));
  return grpc::CreateCustomChannel(options.replica_of, credentials, arguments);
}

DataServiceOptions DataServiceOptionsFor(const ServerOptions& options) {
  DataServiceOptions data_options;
  data_options.shard_index = options.shard_index;
  data_options.max_keys_per_request = options.max_keys_per_request;
  data_options.max_message_bytes = options.max_message_bytes;
  data_options.max_inflight_bytes = options.max_inflight_bytes;
  data_options.worker_token = options.worker_token;
  if (!options.replica_of.empty()) {
    data_options.read_only =
        absl::StrCat("this shard is a replica of ", options.replica_of,
                     ": it serves pulls; push to its primary");
  }
  data_options.fenced_until_registered = options.etcd != nullptr;
  data_options.sync_replication = options.sync_replication;
  data_options.max_replication_lag = options.max_replication_lag_records;
  data_options.min_in_sync_replicas = options.min_in_sync_replicas;
  data_options.replication_wait = options.replica_timeout;
  return data_options;
}

AdminServiceOptions AdminServiceOptionsFor(const ServerOptions& options) {
  AdminServiceOptions admin_options;
  admin_options.shard_index = options.shard_index;
  admin_options.admin_token = options.admin_token;
  admin_options.stop = options.stop;
  if (!options.replica_of.empty()) {
    admin_options.read_only =
        absl::StrCat("this shard is a replica of ", options.replica_of,
                     ": change its primary");
  }
  return admin_options;
}

}  // namespace

namespace {

// A replica's start: opens `*primary_channel`, copies the primary's data
// over it into the data dir and takes the shard's index and count from it.
absl::StatusOr<ReplicaStart> CopyAsReplica(
    ServerOptions* options, std::shared_ptr<grpc::Channel>* primary_channel) {
  if (options->store.durability != embedding::Durability::kWal ||
      !options->restore_from.empty()) {
    return absl::InvalidArgumentError(
        "--replica_of needs --durability=wal, and no --restore_from");
  }
  RETURN_IF_ERROR(PrepareReplicaDataDir(*options));
  ASSIGN_OR_RETURN(*primary_channel, PrimaryChannel(*options));
  const absl::Time began = absl::Now();
  CopyOptions copy = options->replica_copy;
  copy.token = options->admin_token;
  ASSIGN_OR_RETURN(
      ReplicaStart start,
      CopyFromPrimary(*primary_channel, options->store.data_dir, copy));
  LOG(INFO) << "copied shard " << start.shard_index << " of "
            << start.num_shards << " from " << options->replica_of << ": "
            << start.bytes_copied << " bytes in "
            << absl::FormatDuration(absl::Now() - began)
            << "; following its feed from entry " << start.start_sequence;
  options->shard_index = start.shard_index;
  options->num_shards = start.num_shards;
  return start;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(
    const ServerOptions& given) {
  ServerOptions options = given;
  RETURN_IF_ERROR(CheckServingOptions(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentials(options.tls));
  std::optional<ReplicaStart> replica_start;
  std::shared_ptr<grpc::Channel> primary_channel;
  if (!options.replica_of.empty()) {
    ASSIGN_OR_RETURN(replica_start, CopyAsReplica(&options, &primary_channel));
  }
  // A shard that joined a job under etcd counts itself among its shards.
  const ShardIdentity identity{
      options.shard_index,
      std::max(options.num_shards, options.shard_index + 1), kRoutingVersion};
  ASSIGN_OR_RETURN(const bool restored, PrepareDataDir(options, identity));
  auto server = std::unique_ptr<ShardServer>(new ShardServer());
  server->replica_of_ = options.replica_of;
  server->sync_replication_ = options.sync_replication;
  server->min_in_sync_replicas_ = options.min_in_sync_replicas;
  RETURN_IF_ERROR(server->OpenStoreAndCoordinator(options, identity, restored));
  server->data_dir_ = options.store.data_dir;
  if (options.store.durability == embedding::Durability::kWal) {
    // A replica's feeds nobody until it is promoted.
    embedding::ReplicationFeedOptions feed_options;
    feed_options.follower_timeout = options.replica_timeout;
    feed_options.max_bytes_kept = options.max_replication_lag_bytes;
    server->feed_ = std::make_unique<embedding::ReplicationFeed>(feed_options);
  }
  if (replica_start.has_value()) {
    RETURN_IF_ERROR(
        server->store_->ledger().MergeLedger(replica_start->ledger));
    server->replica_start_ = replica_start;
    server->primary_channel_ = primary_channel;
  } else if (server->feed_ != nullptr) {
    RETURN_IF_ERROR(
        server->store_->replication().SetReplicationFeed(server->feed_.get()));
  }
  if (server->replica_start_.has_value()) {
    ReplicaFollowerOptions follower_options;
    follower_options.primary = options.replica_of;
    follower_options.token = options.admin_token;
    follower_options.retry_for = options.replica_follow_retry;
    follower_options.slot_map_mismatch_grace = options.replica_slot_map_grace;
    follower_options.slot_map_epoch = [slots = server->slots_.get()] {
      return slots->current()->epoch();
    };
    server->follower_ = std::make_unique<ReplicaFollower>(
        follower_options, server->primary_channel_, server->store_.get(),
        *server->replica_start_);
    server->follower_->Start();
  }
  server->CreateServices(options);
  ASSIGN_OR_RETURN(CallStats::Observer observer, server->StartMetrics(options));
  RETURN_IF_ERROR(server->StartGrpcServer(options, std::move(credentials),
                                          std::move(observer)));
  if (!options.health_listen.empty()) {
    RETURN_IF_ERROR(server->StartHealthServer(options.health_listen));
  }
  // Not one of the job's shards until JoinJob().
  if (server->etcd_slot_map_ != nullptr &&
      options.shard_index >= server->slots_->num_shards()) {
    server->joining_ = true;
    server->SetServing(false);
  }
  server->health_watcher_ = std::thread([server = server.get(), options] {
    server->WatchHealth(options.health_check_interval);
  });
  return server;
}

absl::Status ShardServer::OpenStoreAndCoordinator(const ServerOptions& options,
                                                  const ShardIdentity& identity,
                                                  bool restored) {
  ASSIGN_OR_RETURN(store_, embedding::EmbeddingStore::Open(options.store));
  etcd_ = options.etcd;
  job_ = options.job;
  shard_index_ = options.shard_index;
  // The count of a map written before maps held theirs: the one the dir was
  // created with (under etcd --num_shards may have changed since); a new
  // dir's initial map is of --num_shards.
  uint32_t count_if_unset = options.num_shards;
  absl::StatusOr<ShardIdentity> recorded =
      ReadShardIdentity(options.store.data_dir);
  if (recorded.ok()) {
    count_if_unset = recorded->num_shards;
  } else if (absl::IsNotFound(recorded.status())) {
    RETURN_IF_ERROR(WriteShardIdentity(options.store.data_dir, identity));
  } else {
    return recorded.status();
  }
  CoordinatorOptions coordinator = options.coordinator;
  coordinator.state_path = options.store.data_dir + "/coordinator.state";
  coordinator.elected = options.etcd != nullptr;
  ASSIGN_OR_RETURN(clocks_, ClockCoordinator::Open(coordinator));
  ASSIGN_OR_RETURN(slots_, cluster::SlotOwnership::Open(options.store.data_dir,
                                                        count_if_unset));
  if (options.etcd != nullptr) {
    using OwnMap = cluster::EtcdSlotMap::OwnMap;
    const OwnMap own_map = restored ? OwnMap::kRestored
                           : store_->tables().ListTables().empty()
                               ? OwnMap::kEmptyDataDir
                               : OwnMap::kDataDirWithTables;
    ASSIGN_OR_RETURN(etcd_slot_map_,
                     cluster::EtcdSlotMap::Start(options.etcd, options.job,
                                                 slots_.get(), own_map));
  }
  return absl::OkStatus();
}

namespace {

// What a slot move waits for at a shard with replicas: that they applied
// the moved rows before the move switches (await_replicas), and that the
// feed has room for them (await_feed_room).
void AddReplicaWaits(const ServerOptions& options,
                     embedding::ReplicationFeed* feed,
                     AdminServiceOptions* admin_options) {
  admin_options->await_replicas = [feed, sync = options.sync_replication,
                                   min_in_sync = options.min_in_sync_replicas,
                                   max_lag =
                                       options.max_replication_lag_records,
                                   wait = options.replica_timeout] {
    using Replicated = embedding::ReplicationFeed::Replicated;
    const Replicated replicated = feed->WaitReplicated(
        feed->head(), sync, min_in_sync, max_lag, absl::Now() + wait);
    if (replicated == Replicated::kTimedOut) {
      return absl::UnavailableError(absl::StrCat(
          "this shard's replicas did not apply the moved rows within ",
          absl::FormatDuration(wait), "; the move does not switch"));
    }
    if (replicated == Replicated::kTooFewInSync && min_in_sync > 0) {
      return absl::UnavailableError(absl::StrCat(
          "fewer than ", min_in_sync,
          " of this shard's replicas (--min_in_sync_replicas) are in sync "
          "to hold the moved rows; the move does not switch"));
    }
    return absl::OkStatus();
  };
  admin_options->await_feed_room =
      [feed, max_lag = options.max_replication_lag_records,
       wait = options.replica_timeout](std::function<void(absl::Status)> done) {
        using Replicated = embedding::ReplicationFeed::Replicated;
        // Not sync: only the bounds, as for a push of an async shard.
        feed->WhenReplicated(
            feed->head(), /*sync=*/false, /*min_in_sync=*/0, max_lag,
            absl::Now() + wait,
            [done = std::move(done), wait](Replicated replicated) {
              if (replicated != Replicated::kTimedOut) {
                done(absl::OkStatus());
                return;
              }
              done(absl::UnavailableError(absl::StrCat(
                  "this shard's replicas did not read the moved rows "
                  "within ",
                  absl::FormatDuration(wait),
                  " (the replication feed is full); the move does not "
                  "switch")));
            });
      };
}

}  // namespace

void ShardServer::CreateServices(const ServerOptions& options) {
  slot_moves_ = std::make_unique<SlotMoveSource>(store_.get(), slots_.get(),
                                                 options.shard_index,
                                                 options.max_move_changed_keys);
  DataServiceOptions data_options = DataServiceOptionsFor(options);
  data_options.feed = feed_.get();
  data_service_ =
      std::make_unique<DataService>(data_options, store_.get(), clocks_.get(),
                                    slots_.get(), slot_moves_.get());
  if (feed_ != nullptr) {
    ReplicationServiceOptions replication_options;
    replication_options.data_dir = options.store.data_dir;
    replication_options.shard_index = options.shard_index;
    replication_options.num_shards = slots_->num_shards();
    replication_options.admin_token = options.admin_token;
    replication_options.write_slot_map =
        [slots = slots_.get()](const std::string& dir) {
          return cluster::SlotOwnership::Create(dir, *slots->current());
        };
    replication_options.slot_map_epoch = [slots = slots_.get()] {
      return slots->current()->epoch();
    };
    replication_service_ = std::make_unique<ReplicationService>(
        replication_options, store_.get(), feed_.get());
  }
  call_stats_ = std::make_unique<CallStats>();
  AdminServiceOptions admin_options = AdminServiceOptionsFor(options);
  if (etcd_slot_map_ != nullptr) {
    admin_options.set_slot_map = [map = etcd_slot_map_.get()](
                                     uint64_t expected_epoch,
                                     const SlotMap& next) {
      return map->Propose(expected_epoch, next);
    };
  }
  admin_options.replication_stats =
      [this](ShardStatsResponse::Replication* replication) {
        FillReplicationStats(replication);
      };
  if (feed_ != nullptr) AddReplicaWaits(options, feed_.get(), &admin_options);
  admin_service_ = std::make_unique<AdminService>(
      admin_options, store_.get(), &data_service_->counters(),
      call_stats_.get(), clocks_.get(), slots_.get(), slot_moves_.get());
}

absl::StatusOr<CallStats::Observer> ShardServer::StartMetrics(
    const ServerOptions& options) {
  CallStats::Observer observer;
  if (options.metrics_listen.empty()) return observer;
  ASSIGN_OR_RETURN(
      metrics_, ShardMetrics::Start(
                    options.metrics_listen, options.shard_index, store_.get(),
                    options.store.data_dir, call_stats_->methods(), [this] {
                      ShardStatsResponse::Replication replication;
                      FillReplicationStats(&replication);
                      ReplicationGauges gauges;
                      gauges.replicas = replication.replicas();
                      gauges.replicas_in_sync = replication.replicas_in_sync();
                      gauges.lag_entries = replication.lag_entries();
                      gauges.min_in_sync_replicas =
                          replication.min_in_sync_replicas();
                      gauges.pushes_without_replica =
                          replication.pushes_without_replica();
                      gauges.pushes_refused_too_few_in_sync =
                          replication.pushes_refused_too_few_in_sync();
                      gauges.feed_bytes = replication.feed_bytes();
                      gauges.replicas_dropped_behind =
                          replication.replicas_dropped_behind();
                      return gauges;
                    }));
  observer = [metrics = metrics_.get()](int method, grpc::StatusCode code,
                                        absl::Duration latency) {
    metrics->ObserveCall(method, code, latency);
  };
  return observer;
}

absl::Status ShardServer::StartGrpcServer(
    const ServerOptions& options,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    CallStats::Observer observer) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, std::move(credentials),
                           &port_);
  const int max_message = static_cast<int>(std::min<size_t>(
      options.max_message_bytes, std::numeric_limits<int>::max()));
  // gRPC sets SO_REUSEPORT by default: a second shard started on the same
  // port would bind it too and take half the calls meant for the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  builder.experimental().SetInterceptorCreators(
      call_stats_->Interceptors(std::move(observer)));
  builder.RegisterService(data_service_.get());
  builder.RegisterService(admin_service_.get());
  if (replication_service_ != nullptr) {
    builder.RegisterService(replication_service_.get());
  }
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address));
  }
  return absl::OkStatus();
}

absl::Status ShardServer::StartHealthServer(const std::string& health_listen) {
  // The default health service (and gRPC reflection, which the process
  // enables for every server): nothing here reads or changes data.
  grpc::ServerBuilder health;
  health.AddListeningPort(health_listen, grpc::InsecureServerCredentials(),
                          &health_port_);
  health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  health_server_ = health.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", health_listen));
  }
  return absl::OkStatus();
}

void ShardServer::WatchHealth(absl::Duration interval) {
  // Ticks often enough for the coordinator to notice a pause of this
  // process; the push log is looked at every `interval`.
  const absl::Duration tick = std::min(interval, absl::Milliseconds(100));
  absl::Time next_check = absl::Now() + interval;
  bool serving = true;
  clocks_->NoticePause();
  while (!stop_health_.WaitForNotificationWithTimeout(tick)) {
    const absl::Time now = absl::Now();
    clocks_->NoticePause();
    if (!serving || now < next_check) continue;
    next_check = now + interval;
    if (follower_ != nullptr && !promoted_.load() && !follower_->error().ok()) {
      LOG(ERROR) << "this replica stopped following its primary ("
                 << follower_->error()
                 << "); health says NOT_SERVING so that it is restarted "
                    "(and copies the primary again)";
      SetServing(false);
      serving = false;
      continue;
    }
    const absl::Status health = store_->PushLogHealth();
    if (health.ok() || IsTransient(health)) continue;
    LOG(ERROR) << "the push log stopped (" << health
               << "); health says NOT_SERVING so that the shard is restarted";
    SetServing(false);
    serving = false;
  }
}

bool IsReplicaDataDir(const std::string& data_dir) {
  return std::filesystem::exists(data_dir + kReplicaMarkerFile);
}

absl::Status ShardServer::FollowingError() const {
  if (follower_ == nullptr || promoted_.load()) return absl::OkStatus();
  return follower_->error();
}

absl::Status ShardServer::StopFollowing() {
  if (follower_ == nullptr || promoted_.load()) {
    return absl::FailedPreconditionError("this shard is not a replica");
  }
  follower_->Stop();
  if (absl::Status error = follower_->error(); !error.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this replica stopped following before (", error.message(),
                     "): it may lack what its primary acknowledged"));
  }
  return absl::OkStatus();
}

void ShardServer::HandOver(absl::Time deadline) {
  data_service_->SetStopping();
  // No push is acknowledged from here on: the record stays as it is, so
  // that replicas timing out while this shard stops do not leave it (and
  // lose their right to take over).
  in_sync_recorder_.reset();
  // A replica that was never promoted feeds nobody.
  if (feed_ == nullptr || (follower_ != nullptr && !promoted_.load())) return;
  const uint64_t head = feed_->head();
  if (feed_->WaitReplicated(head, /*sync=*/false, /*min_in_sync=*/0,
                            /*max_lag=*/0, deadline) !=
      embedding::ReplicationFeed::Replicated::kYes) {
    LOG(WARNING) << "stopping before every replica has the feed up to entry "
                 << head;
  }
}

absl::Status ShardServer::Promote() {
  if (follower_ == nullptr || promoted_.load()) {
    return absl::FailedPreconditionError("this shard is not a replica");
  }
  follower_->Stop();
  // The map this replica followed may be a moment behind the job's (it
  // read etcd at its own pace): the job's, before a push is taken.
  // etcd out of reach for a moment is waited out (the generation is
  // raised and the registration taken: only this process may serve now).
  if (etcd_slot_map_ != nullptr) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    absl::Status caught_up;
    while (true) {
      caught_up = etcd_slot_map_->CatchUp();
      const bool transient =
          absl::IsUnavailable(caught_up) || absl::IsDeadlineExceeded(caught_up);
      if (!transient || absl::Now() >= give_up) break;
      LOG(WARNING) << "reading the job's slot map: " << caught_up
                   << "; retrying";
      absl::SleepFor(absl::Milliseconds(250));
    }
    RETURN_IF_ERROR(caught_up);
  }
  if (feed_ != nullptr)
    RETURN_IF_ERROR(store_->replication().SetReplicationFeed(feed_.get()));
  RETURN_IF_ERROR(RemoveFileDurably(data_dir_ + kReplicaMarkerFile));
  data_service_->SetWritable();
  admin_service_->Promote();
  promoted_ = true;
  LOG(WARNING) << "this replica of " << replica_of_
               << " is a primary now, with every entry of its feed up to "
               << follower_->applied();
  return absl::OkStatus();
}

void ShardServer::FenceBy(const cluster::LeasedKey* lease) {
  data_service_->FenceBy(lease);
}

absl::Status ShardServer::RecordInSyncSet() {
  if (etcd_ == nullptr) {
    return absl::FailedPreconditionError(
        "an in-sync set is recorded only under --etcd");
  }
  if (feed_ == nullptr) return absl::OkStatus();  // no replicas to record
  cluster::InSyncRecorderOptions options;
  options.job = job_;
  options.index = static_cast<int>(shard_index_);
  options.min_in_sync = min_in_sync_replicas_;
  in_sync_recorder_.reset();
  in_sync_feed_ = std::make_unique<FeedInSync>(feed_.get());
  ASSIGN_OR_RETURN(in_sync_recorder_, cluster::InSyncRecorder::Start(
                                          etcd_, in_sync_feed_.get(), options));
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> ShardServer::FeedAndFollower()
    const {
  if (!replica_start_.has_value()) {
    return absl::FailedPreconditionError("this shard is not a replica");
  }
  return std::make_pair(replica_start_->feed_id, replica_start_->follower_id);
}

void ShardServer::FillReplicationStats(
    ShardStatsResponse::Replication* replication) {
  if (!replica_of_.empty() && !promoted_.load()) {
    replication->set_role(absl::StrCat("replica of ", replica_of_));
    replication->set_head_sequence(follower_->primary_head());
    replication->set_applied_sequence(follower_->applied());
    replication->set_lag_entries(
        follower_->primary_head() > follower_->applied()
            ? follower_->primary_head() - follower_->applied()
            : 0);
    replication->set_error(follower_->error().ToString());
    if (follower_->error().ok()) replication->clear_error();
    return;
  }
  replication->set_role("primary");
  replication->set_mode(sync_replication_ ? "sync" : "async");
  if (feed_ == nullptr) return;
  const embedding::ReplicationFeed::Stats stats = feed_->GetStats();
  replication->set_replicas(stats.followers);
  replication->set_replicas_in_sync(stats.in_sync);
  replication->set_head_sequence(stats.head);
  replication->set_applied_sequence(stats.applied);
  replication->set_lag_entries(stats.head - stats.applied);
  replication->set_pushes_without_replica(
      data_service_->counters().pushes_without_replica.load());
  replication->set_pushes_replication_timed_out(
      data_service_->counters().pushes_replication_timed_out.load());
  replication->set_min_in_sync_replicas(min_in_sync_replicas_);
  replication->set_pushes_refused_too_few_in_sync(
      data_service_->counters().pushes_refused_too_few_in_sync.load());
  replication->set_feed_bytes(stats.bytes_kept);
  replication->set_replicas_dropped_behind(stats.followers_dropped_behind);
}

void ShardServer::SetServing(bool serving) {
  grpc_server_->GetHealthCheckService()->SetServingStatus(serving);
  if (health_server_ != nullptr)
    health_server_->GetHealthCheckService()->SetServingStatus(serving);
}

ShardServer::~ShardServer() { Shutdown(absl::ZeroDuration()).IgnoreError(); }

absl::Status ShardServer::Shutdown(absl::Duration drain) {
  if (shut_down_.exchange(true)) return absl::OkStatus();
  // A replica stops applying before the store is written back.
  if (follower_ != nullptr) follower_->Stop();
  // Pushes waiting for replicas get until the drain ends, then are
  // answered, so that the gRPC server can finish them.
  if (feed_ != nullptr) feed_->CancelWaits(absl::Now() + drain);
  // Another shard coordinates while this one drains.
  election_.reset();
  if (health_watcher_.joinable()) {
    stop_health_.Notify();
    health_watcher_.join();
  }
  // A server whose Start() failed half-way may lack either part.
  if (grpc_server_ != nullptr) {
    // Load balancers and orchestrators stop sending work first.
    SetServing(false);
    const absl::Time deadline = absl::Now() + drain;
    // gRPC's Shutdown() also waits, up to the deadline, for every client to
    // close its connection, which an idle C++ client does only at its next
    // backup poll (5 s). Once no data-plane call is left (after a moment for
    // calls received just before the shutdown to start), the connections
    // are closed from this side instead; only read-only admin and health
    // calls can still be cut short then.
    std::thread closer([this, deadline] {
      absl::SleepFor(absl::Milliseconds(50));
      while (data_service_->calls_in_flight() > 0 && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      grpc_server_cancel_all_calls(grpc_server_->c_server());
    });
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
    closer.join();
    grpc_server_->Wait();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    health_server_->Wait();
  }
  if (clocks_ != nullptr) {
    if (absl::Status saved = clocks_->Save(); !saved.ok())
      LOG(ERROR) << "saving the coordinator's state: " << saved;
  }
  return store_ != nullptr ? store_->Flush() : absl::OkStatus();
}

void ShardServer::Wait() { grpc_server_->Wait(); }

absl::Status ShardServer::JoinJob(absl::Duration wait) {
  if (etcd_slot_map_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(etcd_slot_map_->Join(shard_index_, wait));
  if (joining_) SetServing(true);
  return absl::OkStatus();
}

absl::Status ShardServer::CampaignForCoordinator(const std::string& address,
                                                 absl::Duration ttl) {
  if (etcd_ == nullptr) {
    return absl::FailedPreconditionError(
        "a shard campaigns for the coordinator only under --etcd");
  }
  cluster::ElectionOptions election;
  election.job = job_;
  election.shard_index = shard_index_;
  election.address = address;
  election.ttl = ttl;
  ASSIGN_OR_RETURN(election_, cluster::CoordinatorElection::Start(
                                  etcd_, clocks_.get(), election));
  return absl::OkStatus();
}

}  // namespace ps::server
