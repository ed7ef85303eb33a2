// File: base/wire_format.h
//
// Rows and gradients travel as float32, float16 or bfloat16 values
// (ps.WireFormat); storage is float32 whatever travels. These convert a
// span of floats to the packed bytes of a format and back: the shard for
// pulls, the worker for pushes, and each the other way round. Half
// precision keeps 11 significant bits over a narrow range (gradients are
// scaled into it by the sender, see PushRequest.gradient_scale);
// bfloat16 keeps float's range with 8 significant bits. Pure.

#ifndef PS_BASE_WIRE_FORMAT_H_
#define PS_BASE_WIRE_FORMAT_H_

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/types/span.h"
#include "base/half.h"
#include "proto/ps.pb.h"

namespace ps {

namespace wire_internal {

// Half precision's largest finite value. On the wire a float beyond it
// saturates there instead of becoming infinite (a weight of 1e5 would
// otherwise reach a worker as inf); NaN stays NaN.
inline constexpr float kLargestHalf = 65504.0f;

inline float SaturateToHalf(float value) {
  if (value > kLargestHalf) return kLargestHalf;
  if (value < -kLargestHalf) return -kLargestHalf;
  return value;
}

// Half-precision conversions with the F16C instructions, 8 values at a time,
// for CPUs that have them (x86 since 2012); bit for bit what FloatToHalf and
// HalfToFloat give, NaN payloads aside.
__attribute__((target("avx,f16c"))) inline void EncodeHalfF16c(const float* in,
                                                               size_t count,
                                                               char* out) {
  size_t i = 0;
  const __m256 largest = _mm256_set1_ps(kLargestHalf);
  const __m256 smallest = _mm256_set1_ps(-kLargestHalf);
  for (; i + 8 <= count; i += 8) {
    // min/max return their second operand for a NaN: NaN stays NaN.
    const __m256 clamped = _mm256_max_ps(
        smallest, _mm256_min_ps(largest, _mm256_loadu_ps(in + i)));
    const __m128i half = _mm256_cvtps_ph(clamped, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), half);
  }
  for (; i < count; ++i) {
    const uint16_t half = FloatToHalf(SaturateToHalf(in[i]));
    std::memcpy(out + 2 * i, &half, sizeof(half));
  }
}

__attribute__((target("avx,f16c"))) inline void DecodeHalfF16c(const char* in,
                                                               size_t count,
                                                               float scale,
                                                               float* out) {
  size_t i = 0;
  const __m256 factor = _mm256_set1_ps(scale);
  for (; i + 8 <= count; i += 8) {
    const __m128i half =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtph_ps(half), factor));
  }
  for (; i < count; ++i) {
    uint16_t half;
    std::memcpy(&half, in + 2 * i, sizeof(half));
    out[i] = HalfToFloat(half) * scale;
  }
}

// F16C is CPUID leaf 1's ECX bit 29 (read directly: clang's
// __builtin_cpu_supports does not know "f16c"); its instructions are VEX
// encoded, so they also need AVX enabled by the OS, which "avx" checks.
inline bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & (1u << 29)) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
}

}  // namespace wire_internal

// Bytes of one value in `format`; 0 for a format this build does not know.
inline size_t WireValueBytes(WireFormat format) {
  switch (format) {
    case WireFormat::FP32:
      return 4;
    case WireFormat::FP16:
    case WireFormat::BF16:
      return 2;
    default:
      return 0;
  }
}

// Writes `values` in `format` at `out` (values.size() *
// WireValueBytes(format) bytes). REQUIRES: a known format.
inline void EncodeWireValues(WireFormat format, absl::Span<const float> values,
                             char* out) {
  if (format == WireFormat::FP32) {
    std::memcpy(out, values.data(), values.size() * sizeof(float));
    return;
  }
  if (format == WireFormat::FP16 && wire_internal::HasF16c()) {
    wire_internal::EncodeHalfF16c(values.data(), values.size(), out);
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t packed =
        format == WireFormat::FP16
            ? FloatToHalf(wire_internal::SaturateToHalf(values[i]))
            : FloatToBfloat16(values[i]);
    std::memcpy(out + 2 * i, &packed, sizeof(packed));
  }
}

// Reads values.size() values in `format` from `in` into `values`, each
// multiplied by `scale`. REQUIRES: a known format.
inline void DecodeWireValues(WireFormat format, const char* in,
                             absl::Span<float> values, float scale = 1.0f) {
  if (format == WireFormat::FP32) {
    std::memcpy(values.data(), in, values.size() * sizeof(float));
    if (scale != 1.0f)
      for (float& value : values) value *= scale;
    return;
  }
  if (format == WireFormat::FP16 && wire_internal::HasF16c()) {
    wire_internal::DecodeHalfF16c(in, values.size(), scale, values.data());
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t packed;
    std::memcpy(&packed, in + 2 * i, sizeof(packed));
    const float value = format == WireFormat::FP16 ? HalfToFloat(packed)
                                                   : Bfloat16ToFloat(packed);
    values[i] = value * scale;
  }
}

// The power of two that brings the largest magnitude in `values` near the
// top of half precision's range (without overflowing it), so that small
// gradients keep their significant bits: what an FP16 push multiplies its
// gradients by (and the shard divides by). 1 for all zeros.
inline float HalfPrecisionScale(absl::Span<const float> values) {
  float largest = 0.0f;
  for (float value : values) largest = std::fmax(largest, std::fabs(value));
  if (!(largest > 0.0f) || !std::isfinite(largest)) return 1.0f;
  // 2^14 leaves a factor of 4 below half's largest value, 65504.
  const int exponent = 14 - std::ilogb(largest);
  return std::ldexp(1.0f, std::clamp(exponent, -100, 100));
}

}  // namespace ps

#endif  // PS_BASE_WIRE_FORMAT_H_
