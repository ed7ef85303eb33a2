// File: net/metrics_scrape.h
//
// For tests: GET /metrics from a MetricsEndpoint on loopback, over a plain
// socket (no HTTP library), as Prometheus would scrape it.

#ifndef PS_NET_METRICS_SCRAPE_H_
#define PS_NET_METRICS_SCRAPE_H_

#include <string>

namespace ps {

// The whole HTTP response (status line, headers and the exposition text)
// to GET /metrics at `address` (HOST:PORT; the port is dialed on
// 127.0.0.1), or "" if it cannot be read.
std::string ScrapeMetrics(const std::string& address);

}  // namespace ps

#endif  // PS_NET_METRICS_SCRAPE_H_
