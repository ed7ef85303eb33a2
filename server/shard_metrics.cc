#include "server/shard_metrics.h"

#include <sys/statvfs.h>

#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "net/one_sample_family.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace ps::server {
namespace {

prometheus::MetricFamily Single(const std::string& name,
                                const std::string& help,
                                prometheus::MetricType type, double value,
                                const std::string& shard) {
  return OneSampleFamily(name, help, type, value, {{"shard", shard}});
}

}  // namespace

// The store's counters and sizes, read when Prometheus scrapes.
class ShardMetrics::StoreCollectable : public prometheus::Collectable {
 public:
  StoreCollectable(const ShardMetrics* metrics,
                   embedding::EmbeddingStore* store, uint32_t shard_index,
                   std::string data_dir,
                   std::function<ReplicationGauges()> replication)
      : metrics_(metrics),
        store_(store),
        shard_(absl::StrCat(shard_index)),
        data_dir_(std::move(data_dir)),
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
    // The data directory's file system; none if it cannot be asked.
    struct statvfs disk {};
    const bool disk_known = statvfs(data_dir_.c_str(), &disk) == 0;
    std::vector<prometheus::MetricFamily> families = {
        build,
        Single("ps_last_snapshot_timestamp_seconds",
               "When this process last wrote its part of a checkpoint "
               "(SnapshotShard answered OK), in seconds since the epoch; 0: "
               "none since it started.",
               gauge, metrics_->last_snapshot_seconds_.load(), shard_),
        Single("ps_last_export_timestamp_seconds",
               "When this process last wrote its part of an export "
               "(ExportShard answered OK), in seconds since the epoch; 0: none "
               "since it started.",
               gauge, metrics_->last_export_seconds_.load(), shard_),
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
        Single("ps_hot_tier_mapped_bytes",
               "Memory of the huge-page regions the hot tier's entries lie "
               "in, used or partly free.",
               gauge, stats.hot_tier_mapped_bytes, shard_),
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
    if (disk_known) {
      families.push_back(Single(
          "ps_data_dir_available_bytes",
          "Bytes the data directory's file system has free for this "
          "process (--data_dir: RocksDB, the push log).",
          gauge, static_cast<double>(disk.f_bavail) * disk.f_frsize, shard_));
      families.push_back(
          Single("ps_data_dir_capacity_bytes",
                 "Bytes of the data directory's file system in all.", gauge,
                 static_cast<double>(disk.f_blocks) * disk.f_frsize, shard_));
    }
    return families;
  }

 private:
  const ShardMetrics* const metrics_;
  embedding::EmbeddingStore* const store_;
  const std::string shard_;
  const std::string data_dir_;
  const std::function<ReplicationGauges()> replication_;
};

absl::StatusOr<std::unique_ptr<ShardMetrics>> ShardMetrics::Start(
    const std::string& listen, uint32_t shard_index,
    embedding::EmbeddingStore* store, const std::string& data_dir,
    const std::vector<std::string>& methods,
    std::function<ReplicationGauges()> replication) {
  auto metrics = std::unique_ptr<ShardMetrics>(new ShardMetrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  metrics->calls_ = std::make_unique<GrpcServerMetrics>(
      metrics->registry_.get(),
      std::map<std::string, std::string>{{"shard", absl::StrCat(shard_index)}},
      methods);
  for (size_t i = 0; i < methods.size(); ++i) {
    if (methods[i] == "/ps.Admin/SnapshotShard")
      metrics->snapshot_method_ = static_cast<int>(i);
    if (methods[i] == "/ps.Admin/ExportShard")
      metrics->export_method_ = static_cast<int>(i);
  }
  metrics->store_collectable_ = std::make_shared<StoreCollectable>(
      metrics.get(), store, shard_index, data_dir, std::move(replication));
  auto endpoint = MetricsEndpoint::Start(listen);
  if (!endpoint.ok()) return endpoint.status();
  metrics->endpoint_ = std::move(endpoint).value();
  metrics->endpoint_->Register(metrics->registry_);
  metrics->endpoint_->Register(metrics->store_collectable_);
  return metrics;
}

void ShardMetrics::ObserveCall(int method, grpc::StatusCode code,
                               absl::Duration latency) {
  calls_->Observe(method, code, latency);
  if (code != grpc::StatusCode::OK) return;
  if (method == snapshot_method_) {
    last_snapshot_seconds_.store(absl::ToUnixSeconds(absl::Now()));
  } else if (method == export_method_) {
    last_export_seconds_.store(absl::ToUnixSeconds(absl::Now()));
  }
}

}  // namespace ps::server
