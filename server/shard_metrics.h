// File: server/shard_metrics.h
//
// ShardMetrics is what a shard exports for Prometheus (ps_server
// --metrics_listen): every gRPC call counted by method and status code and
// timed per method (a histogram; SnapshotShard and ExportShard's are the
// checkpoint and export durations), and the store's own counters read at
// scrape time: rows pulled and pushed, hot-tier bytes, hits and misses,
// RocksDB bytes and lookups, push-log bytes, duplicate pushes. Calls are
// counted by a gRPC server interceptor, so every service (data plane,
// admin, health) is, with no code in the handlers.
//
// Thread-safe. `store` must outlive it.

#ifndef PS_SERVER_SHARD_METRICS_H_
#define PS_SERVER_SHARD_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/metrics_endpoint.h"
#include "embedding/embedding_store.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps::server {

class ShardMetrics {
 public:
  // Serves GET /metrics on `listen` (HOST:PORT; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<ShardMetrics>> Start(
      const std::string& listen, uint32_t shard_index,
      embedding::EmbeddingStore* store);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators().
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors();

  // Counts one finished call.
  void ObserveCall(const std::string& method, grpc::StatusCode code,
                   absl::Duration latency);

  const std::string& address() const { return endpoint_->address(); }

 private:
  class StoreCollectable;
  ShardMetrics() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StoreCollectable> store_collectable_;
  prometheus::Family<prometheus::Counter>* calls_ = nullptr;
  prometheus::Family<prometheus::Histogram>* latency_ = nullptr;
  prometheus::Histogram::BucketBoundaries latency_buckets_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_METRICS_H_
