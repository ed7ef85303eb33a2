#include "base/initializer.h"

#include <cmath>

#include "xxhash.h"

namespace ps {
namespace {

// splitmix64: a small, well-mixed generator. Its state starts from an XXH3
// hash of the key, which is stable across processes and machines.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1): 24 random bits, offset by half a step so that log() in
// Box-Muller never sees 0.
float NextUniform(uint64_t* state) {
  return (static_cast<float>(NextRandom(state) >> 40) + 0.5f) * 0x1.0p-24f;
}

}  // namespace

void Initializer::Fill(uint64_t key, absl::Span<float> row) const {
  const float scale = spec_.scale();
  uint64_t state = XXH3_64bits_withSeed(&key, sizeof(key), spec_.seed());
  switch (spec_.kind()) {
    case InitializerSpec::UNIFORM:
      for (float& value : row)
        value = scale * (2.0f * NextUniform(&state) - 1.0f);
      return;
    case InitializerSpec::NORMAL:
      for (size_t i = 0; i < row.size(); i += 2) {
        const float radius = std::sqrt(-2.0f * std::log(NextUniform(&state)));
        const float angle = 6.28318530718f * NextUniform(&state);
        row[i] = scale * radius * std::cos(angle);
        if (i + 1 < row.size()) row[i + 1] = scale * radius * std::sin(angle);
      }
      return;
    case InitializerSpec::CONSTANT:
      for (float& value : row) value = scale;
      return;
    default:
      for (float& value : row) value = 0.0f;
      return;
  }
}

}  // namespace ps
