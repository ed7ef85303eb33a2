#include "server/call_stats.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(CallStatsTest, KnownMethodsAreCountedByNameAndOthersAsUnknown) {
  CallStats stats;
  const int pull = stats.MethodIndex("/ps.ParameterServer/Pull");
  const int drop = stats.MethodIndex("/ps.Admin/DropTable");
  const int health = stats.MethodIndex("/grpc.health.v1.Health/Check");
  const int made_up = stats.MethodIndex("/ps.Admin/NoSuchMethod");
  EXPECT_EQ(stats.methods()[pull], "/ps.ParameterServer/Pull");
  EXPECT_EQ(stats.methods()[drop], "/ps.Admin/DropTable");
  EXPECT_EQ(stats.methods()[health], "/grpc.health.v1.Health/Check");
  EXPECT_EQ(stats.methods()[made_up], "unknown");
  EXPECT_EQ(stats.MethodIndex(nullptr), made_up);

  stats.Observe(pull, /*ok=*/true, absl::Milliseconds(1));
  stats.Observe(pull, /*ok=*/false, absl::Milliseconds(2));
  stats.Observe(made_up, /*ok=*/true, absl::Milliseconds(1));
  const std::vector<CallStats::Method> snapshot = stats.Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  const auto& pulls = *std::find_if(
      snapshot.begin(), snapshot.end(), [](const CallStats::Method& m) {
        return m.name == "/ps.ParameterServer/Pull";
      });
  EXPECT_EQ(pulls.calls, 2u);
  EXPECT_EQ(pulls.errors, 1u);
  uint64_t counted = 0;
  for (uint64_t count : pulls.latency_buckets) counted += count;
  EXPECT_EQ(counted, 2u);
  EXPECT_EQ(pulls.latency_buckets.size(),
            CallStats::LatencyBoundsSeconds().size() + 1);
}

TEST(CallStatsTest, QuantilesComeWithinABucketOfTheTruth) {
  CallStats stats;
  const int push = stats.MethodIndex("/ps.ParameterServer/Push");
  // 1000 calls of 1..1000 us: p50 is 500 us, p99 990 us.
  for (int us = 1; us <= 1000; ++us)
    stats.Observe(push, true, absl::Microseconds(us));
  const std::vector<uint64_t> buckets = stats.Snapshot()[0].latency_buckets;
  const std::vector<double>& bounds = CallStats::LatencyBoundsSeconds();
  // A bucket spans a factor of 2^(1/4), about 19%.
  EXPECT_NEAR(LatencyQuantileSeconds(bounds, buckets, 0.5), 500e-6,
              500e-6 * 0.19);
  EXPECT_NEAR(LatencyQuantileSeconds(bounds, buckets, 0.99), 990e-6,
              990e-6 * 0.19);
  EXPECT_LT(LatencyQuantileSeconds(bounds, buckets, 0.5),
            LatencyQuantileSeconds(bounds, buckets, 0.99));
  EXPECT_EQ(LatencyQuantileSeconds(
                bounds, std::vector<uint64_t>(buckets.size(), 0), 0.5),
            0.0);
}

TEST(CallStatsTest, TheSlowestBucketAnswersWithItsLowerBound) {
  CallStats stats;
  stats.Observe(0, true, absl::Hours(10));
  const std::vector<uint64_t> buckets = stats.Snapshot()[0].latency_buckets;
  const std::vector<double>& bounds = CallStats::LatencyBoundsSeconds();
  EXPECT_EQ(buckets.back(), 1u);
  EXPECT_EQ(LatencyQuantileSeconds(bounds, buckets, 0.99),
            CallStats::LatencyBoundsSeconds().back());
}

}  // namespace
}  // namespace ps::server
