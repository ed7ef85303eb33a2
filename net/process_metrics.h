// File: net/process_metrics.h
//
// ProcessMetrics is the process itself as Prometheus' client libraries
// describe one, read from /proc when scraped: process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds. Every
// MetricsEndpoint serves it, so shards, workers and ps_serve show them with
// no code of their own, and stock dashboards and alerts (a process restarted,
// memory near its limit) work unchanged.
//
// Linux only. Thread-safe: Collect() reads files and keeps no state.

#ifndef PS_NET_PROCESS_METRICS_H_
#define PS_NET_PROCESS_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace ps {

// The figures, as read from /proc/self now.
struct ProcessFigures {
  double cpu_seconds = 0;  // user and system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;           // the soft limit (RLIMIT_NOFILE)
  double start_time_seconds = 0;  // since the Unix epoch
};

// INTERNAL when /proc cannot be read or parsed.
absl::StatusOr<ProcessFigures> ReadProcessFigures();

class ProcessMetrics : public prometheus::Collectable {
 public:
  // No families when /proc cannot be read.
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace ps

#endif  // PS_NET_PROCESS_METRICS_H_
