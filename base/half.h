// File: base/half.h
//
// IEEE 754 half precision (binary16) to and from float: FloatToHalf rounds
// to nearest even, overflows to infinity, keeps NaN a NaN and makes
// subnormals of what is too small; HalfToFloat is exact. For exports in
// fp16 (their writer in the shard, their reader in ps_predict) and rows on
// the wire (wire_format.h). bfloat16 (float's sign and exponent, 7 mantissa
// bits) likewise: FloatToBfloat16 rounds to nearest even and keeps NaN a
// NaN; Bfloat16ToFloat is exact. Pure.

#ifndef PS_BASE_HALF_H_
#define PS_BASE_HALF_H_

#include <cstdint>
#include <cstring>

namespace ps {

inline uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) {  // infinity or NaN (kept a quiet NaN)
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  }
  // The half's exponent, rebiased from 127 to 15.
  const int half_exponent = static_cast<int>(exponent) - 127 + 15;
  if (half_exponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (half_exponent <= 0) {
    // A subnormal half (or zero): shift the mantissa, with its implicit
    // leading 1, right by what the exponent lacks.
    if (half_exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - half_exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half =
      (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  // Round to nearest even; a carry into the exponent is right (up to inf).
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise it
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) |
             (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint16_t FloatToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  // Round to nearest even; a carry into the exponent is right (up to inf).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bfloat16ToFloat(uint16_t bfloat16) {
  const uint32_t bits = static_cast<uint32_t>(bfloat16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace ps

#endif  // PS_BASE_HALF_H_
