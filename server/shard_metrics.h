// File: server/shard_metrics.h
//
// ShardMetrics is what a shard exports for Prometheus (ps_server
// --metrics_listen): every gRPC call counted by service, method and status
// code and timed per method (net/grpc_server_metrics.h; SnapshotShard and
// ExportShard's times are the checkpoint and export durations), and the store's
// own counters read at scrape time: rows pulled and pushed, hot-tier bytes,
// hits and misses, RocksDB bytes and lookups, push-log bytes, duplicate pushes;
// the data directory's free and total bytes; and when this process last wrote
// its part of a checkpoint and of an export (for alerts on either overdue).
// Calls come from the server's interceptor (call_stats.h), so every service
// (data plane, admin, health) is counted, with no code in the handlers.
//
// Thread-safe. `store` must outlive it.

#ifndef PS_SERVER_SHARD_METRICS_H_
#define PS_SERVER_SHARD_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "embedding/embedding_store.h"
#include "grpcpp/support/status.h"
#include "net/grpc_server_metrics.h"
#include "net/metrics_endpoint.h"
#include "prometheus/registry.h"

namespace ps::server {

// What a shard's replication looks like now (ShardStatsResponse's
// replication section, as numbers).
struct ReplicationGauges {
  // A primary: replicas following it, and those in sync.
  uint64_t replicas = 0;
  uint64_t replicas_in_sync = 0;
  // Feed entries the furthest-behind replica (or this replica) lacks.
  uint64_t lag_entries = 0;
  // A primary's --min_in_sync_replicas; its pushes acknowledged with no
  // replica in sync (under sync, with --min_in_sync_replicas=0) and those
  // refused because fewer were in sync than the least.
  uint64_t min_in_sync_replicas = 0;
  uint64_t pushes_without_replica = 0;
  uint64_t pushes_refused_too_few_in_sync = 0;
  // A primary: the bytes its feed keeps for replicas behind, and the
  // replicas it dropped for passing --max_replication_lag_mb.
  uint64_t feed_bytes = 0;
  uint64_t replicas_dropped_behind = 0;
};

class ShardMetrics {
 public:
  // Serves GET /metrics on `listen` (HOST:PORT; port 0 picks one).
  // `methods` names the method of each index ObserveCall() is given
  // (CallStats::methods()).
  static absl::StatusOr<std::unique_ptr<ShardMetrics>> Start(
      const std::string& listen, uint32_t shard_index,
      embedding::EmbeddingStore* store, const std::string& data_dir,
      const std::vector<std::string>& methods,
      std::function<ReplicationGauges()> replication);

  // Counts one finished call of methods[method] (a CallStats::Observer).
  void ObserveCall(int method, grpc::StatusCode code, absl::Duration latency);

  const std::string& address() const { return endpoint_->address(); }

 private:
  class StoreCollectable;
  ShardMetrics() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StoreCollectable> store_collectable_;
  std::unique_ptr<GrpcServerMetrics> calls_;
  // SnapshotShard's and ExportShard's indices in `methods`, and the Unix
  // time each last answered OK (0: never).
  int snapshot_method_ = -1;
  int export_method_ = -1;
  std::atomic<int64_t> last_snapshot_seconds_{0};
  std::atomic<int64_t> last_export_seconds_{0};
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_METRICS_H_
