// File: base/latency_quantile.h
//
// Quantiles of a latency histogram with fixed bucket bounds, as shards
// count their calls (server/call_stats.h) and ps_admin prints them.

#ifndef PS_BASE_LATENCY_QUANTILE_H_
#define PS_BASE_LATENCY_QUANTILE_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ps {

// The value that estimates the `quantile` (0..1) of the latencies counted
// in `buckets`, whose upper bounds are `bounds` (one fewer: the last bucket
// has none), interpolated linearly within its bucket; 0 for no call. The
// last bucket answers with its lower bound.
double LatencyQuantileSeconds(absl::Span<const double> bounds,
                              absl::Span<const uint64_t> buckets,
                              double quantile);

}  // namespace ps

#endif  // PS_BASE_LATENCY_QUANTILE_H_
