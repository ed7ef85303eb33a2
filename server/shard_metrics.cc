#include "server/shard_metrics.h"

#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/interceptor.h"
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

// Times one call from its start to the status it sends.
class CallInterceptor : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(ShardMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->ObserveCall(method_, methods->GetSendStatus().error_code(),
                            absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  ShardMetrics* const metrics_;
  const std::string method_;
  const absl::Time start_;
};

class CallInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallInterceptorFactory(ShardMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallInterceptor(metrics_, KnownMethod(info->method()));
  }

 private:
  // The method's path if this server has it, else "unknown": a client
  // picks the path it sends, and each label value is a series kept forever.
  static std::string KnownMethod(const char* path) {
    static constexpr absl::string_view kOthers[] = {
        "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"};
    const absl::string_view method = path == nullptr ? "" : path;
    for (absl::string_view other : kOthers) {
      if (method == other) return std::string(method);
    }
    // "/ps.Admin/GetRow" is "ps.Admin.GetRow" among the compiled services.
    if (absl::StartsWith(method, "/ps.")) {
      std::string name(method.substr(1));
      const size_t slash = name.find('/');
      if (slash != std::string::npos) {
        name[slash] = '.';
        if (google::protobuf::DescriptorPool::generated_pool()
                ->FindMethodByName(name) != nullptr) {
          return std::string(method);
        }
      }
    }
    return "unknown";
  }

 public:
 private:
  ShardMetrics* const metrics_;
};

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
  StoreCollectable(embedding::EmbeddingStore* store, uint32_t shard_index)
      : store_(store), shard_(absl::StrCat(shard_index)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const embedding::StoreStats stats = store_->Stats();
    using prometheus::MetricType;
    const auto counter = MetricType::Counter;
    const auto gauge = MetricType::Gauge;
    return {
        Single("ps_rows_pulled_total", "Rows served to pulls.", counter,
               stats.rows_pulled, shard_),
        Single("ps_rows_pushed_total", "Rows updated by pushes.", counter,
               stats.rows_pushed, shard_),
        Single("ps_hot_tier_bytes", "Bytes of rows held in memory.", gauge,
               stats.hot_tier_bytes, shard_),
        Single("ps_hot_tier_budget_bytes",
               "The hot tier's budget (--cache_mb).", gauge,
               stats.hot_tier_budget_bytes, shard_),
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
        Single("ps_duplicate_pushes_total",
               "Retried pushes answered as applied before.", counter,
               stats.duplicate_pushes, shard_),
    };
  }

 private:
  embedding::EmbeddingStore* const store_;
  const std::string shard_;
};

absl::StatusOr<std::unique_ptr<ShardMetrics>> ShardMetrics::Start(
    const std::string& listen, uint32_t shard_index,
    embedding::EmbeddingStore* store) {
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
  for (double bound = 1e-4; bound < 8000; bound *= 2)
    metrics->latency_buckets_.push_back(bound);
  metrics->store_collectable_ =
      std::make_shared<StoreCollectable>(store, shard_index);
  auto endpoint = MetricsEndpoint::Start(listen);
  if (!endpoint.ok()) return endpoint.status();
  metrics->endpoint_ = std::move(endpoint).value();
  metrics->endpoint_->Register(metrics->registry_);
  metrics->endpoint_->Register(metrics->store_collectable_);
  return metrics;
}

std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ShardMetrics::Interceptors() {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(std::make_unique<CallInterceptorFactory>(this));
  return creators;
}

void ShardMetrics::ObserveCall(const std::string& method, grpc::StatusCode code,
                               absl::Duration latency) {
  calls_->Add({{"method", method}, {"code", CodeName(code)}}).Increment();
  latency_->Add({{"method", method}}, latency_buckets_)
      .Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace ps::server
