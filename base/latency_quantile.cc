#include "base/latency_quantile.h"

#include <algorithm>
#include <cmath>

namespace ps {

double LatencyQuantileSeconds(absl::Span<const double> bounds,
                              absl::Span<const uint64_t> buckets,
                              double quantile) {
  uint64_t total = 0;
  for (uint64_t count : buckets) total += count;
  if (total == 0 || bounds.empty()) return 0.0;
  // The rank of the call sought, 1-based, and the bucket that holds it.
  const double rank = std::max(1.0, std::ceil(quantile * total));
  uint64_t below = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (below + buckets[b] >= rank) {
      const double lower = b == 0 ? 0.0 : bounds[b - 1];
      if (b >= bounds.size()) return lower;
      const double fraction = (rank - below) / buckets[b];
      return lower + fraction * (bounds[b] - lower);
    }
    below += buckets[b];
  }
  return bounds.back();
}

}  // namespace ps
