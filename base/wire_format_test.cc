#include "base/wire_format.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<float> RoundTrip(WireFormat format, const std::vector<float>& in,
                             float scale = 1.0f) {
  std::string bytes(in.size() * WireValueBytes(format), '\0');
  EncodeWireValues(format, in, bytes.data());
  std::vector<float> out(in.size());
  DecodeWireValues(format, bytes.data(), absl::MakeSpan(out), scale);
  return out;
}

TEST(WireFormatTest, EachFormatKeepsItsPrecision) {
  const std::vector<float> values = {0.0f, 1.0f, -0.3f, 1234.5f, 1e-3f};
  EXPECT_EQ(RoundTrip(WireFormat::FP32, values), values);
  const std::vector<float> half = RoundTrip(WireFormat::FP16, values);
  const std::vector<float> bfloat = RoundTrip(WireFormat::BF16, values);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_NEAR(half[i], values[i], std::fabs(values[i]) / 2048) << i;
    EXPECT_NEAR(bfloat[i], values[i], std::fabs(values[i]) / 256) << i;
  }
  EXPECT_NE(half[2], values[2]) << "-0.3 is not a half";
  EXPECT_EQ(WireValueBytes(WireFormat::FP32), 4u);
  EXPECT_EQ(WireValueBytes(WireFormat::FP16), 2u);
  EXPECT_EQ(WireValueBytes(WireFormat::BF16), 2u);
  EXPECT_EQ(WireValueBytes(static_cast<WireFormat>(7)), 0u);
}

TEST(WireFormatTest, AScaledHalfPushKeepsSmallGradients) {
  // Gradients of ~3e-6, below half's smallest normal (6.1e-5): unscaled
  // they keep a few bits at most; scaled by a power of two they keep 11.
  std::vector<float> gradients;
  for (int i = 1; i <= 100; ++i) gradients.push_back(3e-6f * i / 100);
  const float scale = HalfPrecisionScale(gradients);
  EXPECT_EQ(scale, std::ldexp(1.0f, std::ilogb(scale)));  // a power of two
  std::vector<float> scaled = gradients;
  for (float& g : scaled) g *= scale;
  const std::vector<float> back =
      RoundTrip(WireFormat::FP16, scaled, 1 / scale);
  const std::vector<float> unscaled = RoundTrip(WireFormat::FP16, gradients);
  double error = 0, unscaled_error = 0;
  for (size_t i = 0; i < gradients.size(); ++i) {
    EXPECT_NEAR(back[i], gradients[i], gradients[i] / 1024) << i;
    error += std::fabs(back[i] - gradients[i]);
    unscaled_error += std::fabs(unscaled[i] - gradients[i]);
  }
  EXPECT_LT(error * 50, unscaled_error);
  // The largest scaled value stays well inside half's range.
  EXPECT_LT(gradients.back() * scale, 65504.0f / 2);
  EXPECT_EQ(HalfPrecisionScale(std::vector<float>(4, 0.0f)), 1.0f);
}

TEST(WireFormatTest, TheVectorPathGivesTheScalarPathsBits) {
  if (!wire_internal::HasF16c())
    GTEST_SKIP() << "this CPU has no F16C: only the scalar path runs";
  // Normal, subnormal, tiny, huge, halfway and negative values, in a span
  // whose length is not a multiple of the 8 values a vector takes.
  std::vector<float> values;
  for (int e = -30; e <= 17; ++e) {
    for (float m : {1.0f, 1.00048828125f, 1.5f, 1.99951171875f, 1.3f}) {
      values.push_back(std::ldexp(m, e));
      values.push_back(-std::ldexp(m, e));
    }
  }
  values.push_back(0.0f);
  values.push_back(65520.0f);  // past the largest half: saturates
  values.push_back(-1e9f);
  values.push_back(std::numeric_limits<float>::infinity());
  std::string bytes(values.size() * 2, '\0');
  wire_internal::EncodeHalfF16c(values.data(), values.size(), bytes.data());
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, sizeof(half));
    ASSERT_EQ(half, FloatToHalf(wire_internal::SaturateToHalf(values[i])))
        << values[i];
  }
  std::vector<float> back(values.size());
  wire_internal::DecodeHalfF16c(bytes.data(), back.size(), 0.5f, back.data());
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, sizeof(half));
    ASSERT_EQ(back[i], HalfToFloat(half) * 0.5f) << values[i];
  }
}

TEST(WireFormatTest, HalfPrecisionSaturatesInsteadOfOverflowing) {
  std::vector<float> values(11, 1e6f);  // both paths: 8 + 3
  values[9] = -3e5f;
  values[10] = std::nanf("");
  const std::vector<float> back = RoundTrip(WireFormat::FP16, values);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(back[i], 65504.0f) << i;
  EXPECT_EQ(back[9], -65504.0f);
  EXPECT_TRUE(std::isnan(back[10]));
  values[3] = std::nanf("");  // in the vector path
  EXPECT_TRUE(std::isnan(RoundTrip(WireFormat::FP16, values)[3]));
}

}  // namespace
}  // namespace ps
