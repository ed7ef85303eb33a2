// File: server/shard_server.h
//
// ShardServer is one parameter-server shard: the gRPC data plane
// (ps.ParameterServer) and admin service (ps.Admin) over an EmbeddingStore,
// plus standard gRPC health checking and server reflection. The services are
// thin: validate the request as a whole, call the store, convert the status.
//
//   ServerOptions options;
//   options.store.data_dir = "/var/lib/ps/shard0";
//   auto server = ShardServer::Start(options);   // listening on return
//   ... (*server)->port() ...
//   (*server)->Shutdown(absl::Seconds(10));      // drain, then flush
//
// Thread-safe; Shutdown() may be called from any thread, once.

#ifndef PS_SERVER_SHARD_SERVER_H_
#define PS_SERVER_SHARD_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "cluster/coordinator_election.h"
#include "cluster/etcd_slot_map.h"
#include "cluster/in_sync_recorder.h"
#include "cluster/shard_control.h"
#include "cluster/slot_ownership.h"
#include "embedding/embedding_store.h"
#include "net/tls_credentials.h"
#include "server/admin_service.h"
#include "server/call_stats.h"
#include "server/clock_coordinator.h"
#include "server/data_service.h"
#include "server/replication_service.h"
#include "server/shard_metrics.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace ps::server {

struct ShardIdentity;

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see port()).
  // Default: 127.0.0.1:50051 (loopback only unless told otherwise).
  std::string listen_address = "127.0.0.1:50051";
  // This shard's index and the cluster's shard count: a key is served here
  // only if the slot map gives its slot to shard_index (server/
  // slot_ownership.h; at first, SlotForKey(key) % num_shards).
  // Defaults: 0 of 1. REQUIRES: shard_index < num_shards, except under
  // `etcd`, where num_shards is the job's initial count, and a shard
  // beyond it joins a running job (JoinJob()).
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  // Most keys one Pull or Push may carry. Default: 65536.
  uint32_t max_keys_per_request = 65536;
  // During a slot move out of this shard, most changed keys recorded
  // (server/slot_move.h). Default: 1 << 20.
  size_t max_move_changed_keys = size_t{1} << 20;
  // Largest gRPC message either way. Default: 64 MiB.
  size_t max_message_bytes = 64 << 20;
  // Bytes of pulls and pushes in flight at once (data_service.h).
  // Default: 1 GiB.
  size_t max_inflight_bytes = size_t{1} << 30;
  // The tables' storage.
  embedding::StoreOptions store;
  // The clock coordinator; its state is kept in the store's data_dir
  // (state_path is set from it).
  CoordinatorOptions coordinator;
  // TLS for both services (see net/tls_credentials.h). Default: none.
  TlsFiles tls;
  // Without TLS, a listen address other than loopback is refused unless
  // this is set. Default: false.
  bool allow_insecure_remote = false;
  // Bearer token for admin calls that change state. Default: none needed.
  std::string admin_token;
  // Bearer token for the data plane's Clock and DeclareTable. Default: none
  // needed.
  std::string worker_token;
  // With TLS but no CA to check clients against (tls.ca), a listen address
  // other than loopback is refused unless this is set: such a shard
  // authenticates nobody. Default: false.
  bool allow_unauthenticated_clients = false;
  // Without an admin_token, a listen address other than loopback is refused
  // unless this is set: every client that reaches such a shard (each
  // worker among them) may stop it, drop tables or copy its rows.
  // Default: false.
  bool allow_unauthenticated_admin = false;
  // What the admin Stop call does (ps_server: what SIGTERM does). Default:
  // not set (Stop is refused).
  std::function<void()> stop;
  // A checkpoint to start from (ops/checkpoint.h): on an empty
  // data dir, this shard loads the rows that route to it from every part,
  // whatever shard count took it; a data dir restored from the same
  // checkpoint before just opens. Default: none.
  std::string restore_from;
  // HOST:PORT to serve Prometheus metrics on (GET /metrics; port 0 picks a
  // free one); empty: none. See shard_metrics.h.
  std::string metrics_listen;
  // HOST:PORT of a second, plaintext gRPC server holding only the health
  // service (for probes that cannot speak TLS, such as Kubernetes' gRPC
  // probe); it answers SERVING until a drain starts. Empty: none.
  std::string health_listen;
  // Under --etcd: a client of the job's etcd (not owned; it must outlive the
  // server) and the job. The slot map is then the job's in etcd
  // (cluster/etcd_slot_map.h), read before the shard serves. Default: none
  // (the map is the data dir's alone).
  cluster::CoordinationStore* etcd = nullptr;
  std::string job;
  // How often the shard checks that it can still acknowledge pushes; once
  // its push log stopped for good (a failed write or sync, not a full
  // disk), both health services answer NOT_SERVING, so that a liveness
  // probe restarts it. Default: 1 s.
  absl::Duration health_check_interval = absl::Seconds(1);
  // HOST:PORT of the primary shard this one replicates
  // (server/replication_service.h): it copies the primary's store into its
  // data dir, which must be empty or a replica's (a REPLICA_OF file), then
  // applies the primary's feed. It serves pulls and refuses pushes, and
  // takes the primary's shard index. The admin token, if set, is the
  // primary's too. Empty (the default): not a replica.
  std::string replica_of;
  // With replica_of: the data dir holds a primary's rows that a newer
  // generation of the shard superseded (ps_server --replicas checked it in
  // etcd); it is emptied for the copy as a replica's would be. Default:
  // false (such a dir is refused).
  bool discard_superseded_data_dir = false;
  // With replica_of: how long the replica retries a primary that does not
  // answer before it stops following (under etcd, longer than the lease,
  // so that it is promoted first). Default: 30 s.
  absl::Duration replica_follow_retry = absl::Seconds(30);
  // With replica_of: how long the replica's slot map may differ from the
  // primary's before it stops following. Default: 10 s.
  absl::Duration replica_slot_map_grace = absl::Seconds(10);
  // A primary under kWal feeds its replicas. With `sync_replication` a push
  // is answered once every replica in sync (caught up once) has applied it;
  // either way, once no replica is more than `max_replication_lag_records`
  // entries behind. Defaults: async, 100000.
  bool sync_replication = false;
  uint64_t max_replication_lag_records = 100000;
  // Pushes are refused (UNAVAILABLE, transient) while fewer replicas than
  // this are in sync (DataServiceOptions::min_in_sync_replicas). Default: 0
  // (ps_server's flag: 1 under sync, 0 under async).
  uint32_t min_in_sync_replicas = 0;
  // A replica that does not read the feed for this long is dropped (it must
  // copy again), and no push waits longer for one. Default: 10 s.
  absl::Duration replica_timeout = absl::Seconds(10);
  // The bytes of feed entries kept for replicas behind; past it the one
  // furthest behind is dropped (ReplicationFeedOptions::max_bytes_kept).
  // Default: 256 MiB (ps_server's flag: 1/32 of the machine's memory).
  uint64_t max_replication_lag_bytes = uint64_t{256} << 20;
  // With replica_of: how the copy is taken (deadlines, attempts; the token
  // is admin_token's).
  CopyOptions replica_copy;
};

// Whether `data_dir` holds a replica's copy (a REPLICA_OF file): one that
// started as a primary would be promoted.
bool IsReplicaDataDir(const std::string& data_dir);

class ShardServer final : public cluster::ShardControl {
 public:
  // Restores (see restore_from), opens the store and starts serving.
  // FAILED_PRECONDITION for a data dir of another shard, or one that holds
  // something else than a restore of restore_from. INVALID_ARGUMENT for
  // inconsistent
  // options, TLS files that do not go together, or a listen address beyond
  // loopback without TLS (and without allow_insecure_remote); UNAVAILABLE
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(
      const ServerOptions& given);

  // Shuts down (with no drain time) if Shutdown() was not called.
  ~ShardServer() override;

  // The port actually bound.
  int port() const { return port_; }
  // The health_listen server's port (0 without one).
  int health_port() const { return health_port_; }
  // Where metrics are served (HOST:PORT), or "" without metrics_listen.
  std::string metrics_address() const {
    return metrics_ == nullptr ? "" : metrics_->address();
  }

  // Says NOT_SERVING to health checks, stops accepting calls, lets
  // in-flight calls finish for up to `drain` (then cancels them), and
  // writes back every dirty row.
  absl::Status Shutdown(absl::Duration drain);

  // Blocks until Shutdown() has been called and the server has stopped.
  void Wait();

  // Under options.etcd: runs for the job's clock coordinator
  // (cluster/coordinator_election.h), as `address` (what workers dial) under
  // a lease of `ttl`; until elected, this shard's coordinator answers
  // UNAVAILABLE. FAILED_PRECONDITION without etcd.
  absl::Status CampaignForCoordinator(const std::string& address,
                                      absl::Duration ttl) override;

  // Under options.etcd: makes this shard one of the job's (a shard started
  // beyond the job's count joins it, owning no slot until a rebalance),
  // waiting up to `wait` for lower indexes to join first. Call once the
  // shard is registered. Nothing without etcd. A joining shard's health
  // says NOT_SERVING from its start until it has joined, so that an
  // orchestrator's readiness means one of the job's shards.
  absl::Status JoinJob(absl::Duration wait) override;

  // A replica stops following its primary (keeping every entry it applied,
  // and cancelling a Follow in flight): the first step of its promotion.
  // FAILED_PRECONDITION unless a replica that was following until now (one
  // that stopped on an error may lack what its primary acknowledged).
  absl::Status StopFollowing() override;

  // Why a replica stopped following its primary; OK while it follows, and
  // for a primary.
  absl::Status FollowingError() const override;

  // A replica becomes its shard's primary: feeds replicas of its own,
  // takes pushes, and its data dir is a primary's from now on. The caller
  // (under --etcd, ps_server's watch of the primary's registration) stops
  // it following first and makes it the one workers find. Under --etcd it
  // reads the job's slot map first. FAILED_PRECONDITION unless a replica;
  // etcd's errors.
  absl::Status Promote() override;

  // A shard about to stop: refuses pushes from now on (transiently) and
  // waits until `deadline` for its replicas to apply its whole feed, so
  // that one promoted after it lets go has every push it acknowledged.
  void HandOver(absl::Time deadline);

  // Under --etcd: pushes are fenced by the shard's registration
  // (DataService::FenceBy()); null lifts it.
  void FenceBy(const cluster::LeasedKey* lease) override;

  // Under --etcd, a primary (or a replica just promoted): keeps the
  // shard's in-sync set in etcd in step with its feed
  // (cluster/in_sync_recorder.h); nothing without a feed (no
  // --durability=wal). FAILED_PRECONDITION when the shard's generation
  // moved.
  absl::Status RecordInSyncSet() override;

  // A replica's place in its primary's feed: the feed's id and the
  // follower id its copy was given. FAILED_PRECONDITION for a primary.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> FeedAndFollower()
      const override;

 private:
  ShardServer() = default;

  // The stages of Start(), in order. Each fills members; on an error Start()
  // destroys the server, which shuts down what has started.
  // Opens the store, records `identity` in a data dir without one, opens
  // the clock coordinator (its state in the data dir) and the slot map
  // (under --etcd the job's; `restored`: the data dir was restored from a
  // checkpoint at this start).
  absl::Status OpenStoreAndCoordinator(const ServerOptions& options,
                                       const ShardIdentity& identity,
                                       bool restored);
  // The data and admin services, and the call statistics the admin service
  // reports.
  void CreateServices(const ServerOptions& options);
  // The metrics server, if options.metrics_listen is set; returns what
  // records each call in it (empty without one).
  absl::StatusOr<CallStats::Observer> StartMetrics(
      const ServerOptions& options);
  // The gRPC server of both services on options.listen_address, each call
  // reported to `observer`. UNAVAILABLE when the address cannot be bound.
  absl::Status StartGrpcServer(
      const ServerOptions& options,
      std::shared_ptr<grpc::ServerCredentials> credentials,
      CallStats::Observer observer);
  // The plaintext health-only server on `health_listen`. UNAVAILABLE when
  // the address cannot be bound.
  absl::Status StartHealthServer(const std::string& health_listen);

  // A primary's feed (under kWal), which the store appends to: outlives it.
  std::unique_ptr<embedding::ReplicationFeed> feed_;
  std::unique_ptr<embedding::EmbeddingStore> store_;
  // A replica's: where its copy started, and what applies the feed (stops
  // before the store goes).
  std::optional<ReplicaStart> replica_start_;
  std::shared_ptr<grpc::Channel> primary_channel_;
  std::unique_ptr<ReplicaFollower> follower_;
  std::string replica_of_;
  bool sync_replication_ = false;
  uint32_t min_in_sync_replicas_ = 0;
  std::string data_dir_;
  // A replica that Promote() made a primary.
  std::atomic<bool> promoted_{false};
  // Reads store_, and grpc_server_'s interceptors call it: between them in
  // destruction order.
  std::unique_ptr<ShardMetrics> metrics_;
  // grpc_server_'s interceptors feed it and the admin service reads it.
  std::unique_ptr<CallStats> call_stats_;
  std::unique_ptr<ClockCoordinator> clocks_;
  std::unique_ptr<cluster::SlotOwnership> slots_;
  std::unique_ptr<SlotMoveSource> slot_moves_;
  // Under --etcd: keeps slots_ in step with the job's map, and makes
  // clocks_ the job's coordinator while this shard is elected.
  std::unique_ptr<cluster::EtcdSlotMap> etcd_slot_map_;
  std::unique_ptr<cluster::CoordinatorElection> election_;
  // Under --etcd, a primary's: feed_ as the recorder sees it, and the
  // in-sync set kept in etcd (both before feed_ goes; the recorder first).
  std::unique_ptr<cluster::InSyncFeed> in_sync_feed_;
  std::unique_ptr<cluster::InSyncRecorder> in_sync_recorder_;
  cluster::CoordinationStore* etcd_ = nullptr;
  std::string job_;
  uint32_t shard_index_ = 0;
  std::unique_ptr<DataService> data_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<ReplicationService> replication_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
  // Set by the first Shutdown(); the destructor may run on another thread.
  std::atomic<bool> shut_down_{false};
  // Until stop_health_: checks the store's push log every `interval`, and
  // lets the coordinator notice pauses of this process (NoticePause).
  void WatchHealth(absl::Duration interval);
  // What both health services (the data port's, --health_listen's) say.
  void SetServing(bool serving);
  // ShardStats' replication section.
  void FillReplicationStats(ShardStatsResponse::Replication* replication);
  // Started beyond the job's shard count: NOT_SERVING until JoinJob().
  bool joining_ = false;
  absl::Notification stop_health_;
  std::thread health_watcher_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SERVER_H_
