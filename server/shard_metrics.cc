#include "server/shard_metrics.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/build_info.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace ps::server {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "OTHER";
  }
}

prometheus::MetricFamily Single(const std::string& name,
                                const std::string& help,
                                prometheus::MetricType type, double value,
                                const std::string& shard) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  metric.label.push_back({"shard", shard});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

// The store's counters and sizes, read when Prometheus scrapes.
class ShardMetrics::StoreCollectable : public prometheus::Collectable {
 public:
  StoreCollectable(embedding::EmbeddingStore* store, uint32_t shard_index,
                   std::function<ReplicationGauges()> replication)
      : store_(store),
        shard_(absl::StrCat(shard_index)),
        replication_(std::move(replication)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const embedding::StoreStats stats = store_->Stats();
    const ReplicationGauges replication = replication_();
    using prometheus::MetricType;
    const auto counter = MetricType::Counter;
    const auto gauge = MetricType::Gauge;
    // The build, as labels of a constant 1 (Prometheus' *_build_info).
    prometheus::MetricFamily build =
        Single("ps_build_info", "The shard's build: its commit and build time.",
               gauge, 1, shard_);
    build.metric[0].label.push_back({"commit", std::string(BuildCommit())});
    build.metric[0].label.push_back({"built", std::string(BuildTime())});
    return {
        build,
        Single("ps_rows_pulled_total", "Rows served to pulls.", counter,
               stats.rows_pulled, shard_),
        Single("ps_rows_pushed_total", "Rows updated by pushes.", counter,
               stats.rows_pushed, shard_),
        Single("ps_hot_tier_bytes", "Bytes of rows held in memory.", gauge,
               stats.hot_tier_bytes, shard_),
        Single("ps_hot_tier_budget_bytes",
               "The hot tier's budget (--cache_mb).", gauge,
               stats.hot_tier_budget_bytes, shard_),
        Single("ps_hot_tier_allocated_bytes",
               "Memory of the hot tier's entries, holding rows or free.", gauge,
               stats.hot_tier_allocated_bytes, shard_),
        Single("ps_hot_tier_hits_total", "Row lookups the hot tier answered.",
               counter, stats.hot_tier_hits, shard_),
        Single("ps_hot_tier_misses_total",
               "Row lookups the hot tier did not hold.", counter,
               stats.hot_tier_misses, shard_),
        Single("ps_rocksdb_lookups_total",
               "Keys looked up in RocksDB on a hot-tier miss.", counter,
               stats.disk_lookups, shard_),
        Single("ps_rocksdb_bytes", "Bytes of RocksDB's files (rows on disk).",
               gauge, stats.disk_bytes, shard_),
        Single("ps_push_log_bytes",
               "Bytes of push-log segments on disk (--durability=wal).", gauge,
               stats.push_log_bytes, shard_),
        Single("ps_rows_admitted_total",
               "Keys stored at their admit_after-th push (admission).", counter,
               stats.rows_admitted, shard_),
        Single("ps_keys_held_back_total",
               "Pushed keys counted but not yet admitted (admission).", counter,
               stats.keys_held_back, shard_),
        Single("ps_rows_expired_in_memory_total",
               "Expired rows dropped from the hot tier (row_ttl_s).", counter,
               stats.rows_expired_in_memory, shard_),
        Single("ps_rows_expired_on_disk_total",
               "Expired rows RocksDB's compactions deleted (row_ttl_s).",
               counter, stats.rows_expired_on_disk, shard_),
        Single("ps_duplicate_pushes_total",
               "Retried pushes answered as applied before.", counter,
               stats.duplicate_pushes, shard_),
        Single("ps_replicas", "A primary's replicas following it.", gauge,
               replication.replicas, shard_),
        Single("ps_replicas_in_sync",
               "A primary's replicas that have caught up (those a sync push "
               "waits for).",
               gauge, replication.replicas_in_sync, shard_),
        Single("ps_replication_lag_entries",
               "Feed entries (pushes, table changes) the furthest-behind "
               "replica lacks; on a replica, those it lacks.",
               gauge, replication.lag_entries, shard_),
        Single("ps_replication_in_sync",
               "1 while a primary has at least --min_in_sync_replicas "
               "replicas in sync (it takes pushes), else 0.",
               gauge,
               replication.replicas_in_sync >= replication.min_in_sync_replicas
                   ? 1
                   : 0,
               shard_),
        Single("ps_replication_pushes_without_replica_total",
               "Pushes a sync primary acknowledged with no replica in sync "
               "(only with --min_in_sync_replicas=0): nobody else has them.",
               counter, replication.pushes_without_replica, shard_),
        Single("ps_replication_pushes_refused_total",
               "Pushes refused (transiently) because fewer replicas than "
               "--min_in_sync_replicas were in sync.",
               counter, replication.pushes_refused_too_few_in_sync, shard_),
        Single("ps_replication_feed_bytes",
               "Bytes of feed entries a primary keeps for replicas behind "
               "(bounded by --max_replication_lag_mb).",
               gauge, replication.feed_bytes, shard_),
        Single("ps_replication_replicas_dropped_behind_total",
               "Replicas a primary dropped (they copy again) because they fell "
               "more than --max_replication_lag_mb behind.",
               counter, replication.replicas_dropped_behind, shard_),
    };
  }

 private:
  embedding::EmbeddingStore* const store_;
  const std::string shard_;
  const std::function<ReplicationGauges()> replication_;
};

absl::StatusOr<std::unique_ptr<ShardMetrics>> ShardMetrics::Start(
    const std::string& listen, uint32_t shard_index,
    embedding::EmbeddingStore* store, const std::vector<std::string>& methods,
    std::function<ReplicationGauges()> replication) {
  auto metrics = std::unique_ptr<ShardMetrics>(new ShardMetrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  const std::map<std::string, std::string> shard = {
      {"shard", absl::StrCat(shard_index)}};
  metrics->calls_ = &prometheus::BuildCounter()
                         .Name("ps_grpc_requests_total")
                         .Help("gRPC calls served, by method and status code.")
                         .Labels(shard)
                         .Register(*metrics->registry_);
  metrics->latency_ =
      &prometheus::BuildHistogram()
           .Name("ps_grpc_request_duration_seconds")
           .Help(
               "Time from a call's start to its status, by method "
               "(SnapshotShard and ExportShard: checkpoints and exports).")
           .Labels(shard)
           .Register(*metrics->registry_);
  // From 100 us to about 1.9 h, doubling: pulls and pushes take
  // milliseconds, snapshots and exports minutes.
  prometheus::Histogram::BucketBoundaries buckets;
  for (double bound = 1e-4; bound < 8000; bound *= 2) buckets.push_back(bound);
  metrics->methods_ = std::vector<Method>(methods.size());
  for (size_t i = 0; i < methods.size(); ++i) {
    Method& method = metrics->methods_[i];
    method.name = methods[i];
    method.latency = &metrics->latency_->Add({{"method", methods[i]}}, buckets);
    for (auto& counter : method.calls_by_code) counter.store(nullptr);
  }
  metrics->store_collectable_ = std::make_shared<StoreCollectable>(
      store, shard_index, std::move(replication));
  auto endpoint = MetricsEndpoint::Start(listen);
  if (!endpoint.ok()) return endpoint.status();
  metrics->endpoint_ = std::move(endpoint).value();
  metrics->endpoint_->Register(metrics->registry_);
  metrics->endpoint_->Register(metrics->store_collectable_);
  return metrics;
}

void ShardMetrics::ObserveCall(int method_index, grpc::StatusCode code,
                               absl::Duration latency) {
  Method& method = methods_[method_index];
  const size_t slot = std::min<size_t>(static_cast<size_t>(code),
                                       method.calls_by_code.size() - 1);
  prometheus::Counter* counter = method.calls_by_code[slot].load();
  if (counter == nullptr) {
    // Family::Add returns the series a racing thread may have added.
    counter = &calls_->Add({{"method", method.name}, {"code", CodeName(code)}});
    method.calls_by_code[slot].store(counter);
  }
  counter->Increment();
  method.latency->Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace ps::server
