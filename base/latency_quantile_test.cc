#include "base/latency_quantile.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// Buckets (0, 1], (1, 2], (2, 4], (4, inf).
const std::vector<double> kBounds = {1.0, 2.0, 4.0};

TEST(LatencyQuantileTest, InterpolatesWithinTheBucketThatHoldsTheRank) {
  // 10 calls in (1, 2] and 10 in (2, 4]: the 5th is halfway through the
  // first, the 15th halfway through the second.
  const std::vector<uint64_t> buckets = {0, 10, 10, 0};
  EXPECT_DOUBLE_EQ(LatencyQuantileSeconds(kBounds, buckets, 0.25), 1.5);
  EXPECT_DOUBLE_EQ(LatencyQuantileSeconds(kBounds, buckets, 0.75), 3.0);
  EXPECT_DOUBLE_EQ(LatencyQuantileSeconds(kBounds, buckets, 1.0), 4.0);
  // The smallest quantile still names the first call's bucket.
  EXPECT_DOUBLE_EQ(LatencyQuantileSeconds(kBounds, buckets, 0.0), 1.1);
}

TEST(LatencyQuantileTest, NoCallsGiveZeroAndTheOpenBucketItsLowerBound) {
  EXPECT_EQ(LatencyQuantileSeconds(kBounds, {0, 0, 0, 0}, 0.5), 0.0);
  EXPECT_EQ(LatencyQuantileSeconds(kBounds, {0, 0, 0, 3}, 0.5), 4.0);
  EXPECT_EQ(LatencyQuantileSeconds({}, {5}, 0.5), 0.0);
}

}  // namespace
}  // namespace ps
