// File: net/metrics_endpoint.h
//
// MetricsEndpoint serves Prometheus metrics: GET http://HOST:PORT/metrics in
// the text exposition format, through prometheus-cpp's exposer (an embedded
// civetweb server with its own threads). What it serves is whatever
// collectables (a prometheus::Registry, or a custom Collectable computed at
// scrape time) are registered; they must outlive the endpoint or be
// unregistered by dropping their last shared_ptr. Every endpoint also
// serves the process's own figures (process_metrics.h: CPU seconds, memory,
// open files, start time).
//
// Thread-safe.

#ifndef PS_NET_METRICS_ENDPOINT_H_
#define PS_NET_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "net/process_metrics.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace ps {

class MetricsEndpoint {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks a free one). UNAVAILABLE if
  // it cannot bind; INVALID_ARGUMENT for an address without a port.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen);

  void Register(const std::weak_ptr<prometheus::Collectable>& collectable);

  // The port it listens on, and HOST:PORT.
  int port() const { return port_; }
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint() = default;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<ProcessMetrics> process_ = std::make_shared<ProcessMetrics>();
  int port_ = 0;
  std::string address_;
};

}  // namespace ps

#endif  // PS_NET_METRICS_ENDPOINT_H_
