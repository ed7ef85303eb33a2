// File: server/call_stats.h
//
// CallStats counts a shard's gRPC calls by method: calls, failed calls, and
// a histogram of their latency with fixed bounds fine enough for p50 and
// p99 (ps_admin stats reads it through ShardStats, with no metrics port
// needed). A gRPC server interceptor feeds it, and hands every call on to an
// optional observer (the Prometheus metrics, shard_metrics.h), so that one
// interceptor times each call once.
//
// Methods are those of the services compiled in (ps.*) and the health
// check and reflection; a path a client makes up is counted as "unknown", so
// that what a client sends cannot grow the table. Thread-safe.

#ifndef PS_SERVER_CALL_STATS_H_
#define PS_SERVER_CALL_STATS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/latency_quantile.h"
#include "grpcpp/support/server_interceptor.h"

namespace ps::server {

class CallStats {
 public:
  CallStats();

  // Every method counted, in a fixed order; the last is "unknown".
  const std::vector<std::string>& methods() const { return methods_; }

  // The index of the method whose path (e.g. "/ps.Admin/GetRow") is
  // `path`, or of "unknown".
  int MethodIndex(const char* path) const;

  // Upper bounds of the latency buckets, in seconds; one more bucket holds
  // everything slower. Each bound is 2^(1/4) (about 1.19) times the one
  // before, from 10 us to about 3 h.
  static const std::vector<double>& LatencyBoundsSeconds();

  // Counts one finished call of method `method` (an index).
  void Observe(int method, bool ok, absl::Duration latency);

  struct Method {
    std::string name;
    uint64_t calls = 0;
    uint64_t errors = 0;
    // LatencyBoundsSeconds().size() + 1 counts.
    std::vector<uint64_t> latency_buckets;
  };
  // The methods called at least once, with their counts so far.
  std::vector<Method> Snapshot() const;

  // What each finished call is also reported to (e.g. Prometheus).
  using Observer =
      std::function<void(int method, grpc::StatusCode, absl::Duration)>;

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators(): one
  // interceptor that feeds this and then `observer` (if set). This must
  // outlive the server.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors(Observer observer);

 private:
  struct Counts {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> errors{0};
    std::unique_ptr<std::atomic<uint64_t>[]> buckets;
  };

  std::vector<std::string> methods_;
  // Every method but "unknown", by path.
  absl::flat_hash_map<std::string, int> index_;
  std::vector<Counts> counts_;
};

}  // namespace ps::server

#endif  // PS_SERVER_CALL_STATS_H_
