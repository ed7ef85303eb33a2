#include "base/initializer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
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

absl::Status Initializer::Check(const InitializerSpec& spec, int dim) {
  auto check_scale = [](const InitializerSpec& one) {
    if (!std::isfinite(one.scale()) || one.scale() < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initializer scale must be finite and >= 0, got ", one.scale()));
    }
    return absl::OkStatus();
  };
  if (absl::Status scale = check_scale(spec); !scale.ok()) return scale;
  uint32_t before = 0;
  for (const LaterColumnsInitializer& later : spec.later_columns()) {
    if (later.first_column() <= before ||
        later.first_column() >= static_cast<uint32_t>(std::max(dim, 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an initializer's later columns from column ", later.first_column(),
          ": each group's first column must be above the one before (", before,
          ") and below the row's dim ", dim));
    }
    if (!later.initializer().later_columns().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the initializer of the later columns from column ",
                       later.first_column(), " has later columns of its own"));
    }
    if (absl::Status scale = check_scale(later.initializer()); !scale.ok()) {
      return scale;
    }
    before = later.first_column();
  }
  return absl::OkStatus();
}

void Initializer::Fill(uint64_t key, absl::Span<float> row) const {
  if (spec_.later_columns().empty()) return FillOne(spec_, key, row);
  size_t begin = 0;
  const InitializerSpec* group = &spec_;
  for (const LaterColumnsInitializer& later : spec_.later_columns()) {
    const size_t end = std::min<size_t>(later.first_column(), row.size());
    if (end > begin) FillOne(*group, key, row.subspan(begin, end - begin));
    begin = std::max(begin, end);
    group = &later.initializer();
  }
  FillOne(*group, key, row.subspan(begin));
}

void Initializer::FillOne(const InitializerSpec& spec, uint64_t key,
                          absl::Span<float> row) {
  const float scale = spec.scale();
  uint64_t state = XXH3_64bits_withSeed(&key, sizeof(key), spec.seed());
  switch (spec.kind()) {
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
