#include "base/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(HalfTest, KnownValues) {
  // Bit patterns from the IEEE 754 binary16 format.
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(FloatToHalf(65536.0f), 0x7c00);  // overflows to infinity
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(6.103515625e-05f), 0x0400);  // the smallest normal
  EXPECT_EQ(FloatToHalf(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(1e-9f), 0x0000);
  EXPECT_EQ(FloatToHalf(0.333251953125f), 0x3555);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
}

TEST(HalfTest, EveryHalfComesBackExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), half) << bits;
  }
}

TEST(HalfTest, RelativeErrorOfNormalsIsAtMostHalfAnUlp) {
  for (float value = 1e-4f; value < 6e4f; value *= 1.001f) {
    const float back = HalfToFloat(FloatToHalf(value));
    EXPECT_LE(std::fabs(back - value) / value, std::ldexp(1.0f, -11) * 1.0001f)
        << value;
  }
}

TEST(Bfloat16Test, KnownValuesAndRounding) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even.
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Above halfway rounds up.
  EXPECT_EQ(
      FloatToBfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
      0x3f81);
  // The largest float rounds to infinity, as the tie goes up to even.
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
  // Tiny values keep their exponent, unlike a half.
  EXPECT_NEAR(Bfloat16ToFloat(FloatToBfloat16(3e-9f)), 3e-9f, 3e-9f / 128);
}

TEST(Bfloat16Test, RoundTripsWithinHalfAUnitInTheLastPlace) {
  for (float value = -1000.0f; value < 1000.0f; value += 0.37f) {
    const float back = Bfloat16ToFloat(FloatToBfloat16(value));
    EXPECT_LE(std::fabs(back - value), std::fabs(value) * std::ldexp(1.0f, -8))
        << value;
  }
}

}  // namespace
}  // namespace ps
