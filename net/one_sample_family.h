// File: net/one_sample_family.h
//
// OneSampleFamily() is a Prometheus metric family of one sample, for the
// collectables that compute their figures when scraped (a shard's store
// counters, the process's /proc figures) rather than keep live series.

#ifndef PS_NET_ONE_SAMPLE_FAMILY_H_
#define PS_NET_ONE_SAMPLE_FAMILY_H_

#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace ps {

// A counter or a gauge named `name`, of one sample `value` with `labels`.
inline prometheus::MetricFamily OneSampleFamily(
    std::string name, std::string help, prometheus::MetricType type,
    double value, std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace ps

#endif  // PS_NET_ONE_SAMPLE_FAMILY_H_
