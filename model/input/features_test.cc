#include "model/input/features.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace ps::model {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// log(1 + max(x, 0)) in double, then to float: what DenseFeature() is,
// whether it looks a count up or computes it.
float Expected(double x) {
  return static_cast<float>(std::log1p(x > 0.0 ? x : 0.0));
}

TEST(FeaturesTest, DenseFeatureGivesTheSameBitsInAndOutOfItsTable) {
  std::vector<double> values;
  for (int i = 0; i < 3000; ++i) values.push_back(i);
  for (double x : {0.5, 1.25, 1023.5, 1023.999, 1024.0, 1e9, -1.0, -0.0, -1e9,
                   std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    values.push_back(x);
  }
  for (double x : values) {
    EXPECT_EQ(Bits(DenseFeature(x)), Bits(Expected(x))) << x;
  }
  EXPECT_FLOAT_EQ(DenseFeature(std::exp(2.0) - 1.0), 2.0f);
}

}  // namespace
}  // namespace ps::model
