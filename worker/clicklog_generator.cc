#include "worker/clicklog_generator.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace ps::worker {
namespace {

// Field pairs whose values interact (a latent dot product in the logit).
constexpr int kInteractions[][2] = {{0, 1},  {2, 5},  {3, 7},   {4, 9},
                                    {6, 12}, {8, 15}, {10, 20}, {13, 22}};
constexpr int kLatentDim = 4;

uint64_t Hash3(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t words[3] = {a, b, c};
  return XXH3_64bits(words, sizeof(words));
}

double ToUnit(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

ClickLogGenerator::ClickLogGenerator(const GeneratorOptions& options,
                                     uint64_t sample_seed)
    : options_(options), rng_(Hash3(options.seed, sample_seed, 0x5eed)) {
  // The hidden model's shape comes from the model seed alone.
  std::mt19937_64 model_rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_max =
      std::log(static_cast<double>(options.max_vocabulary) / 10.0);
  for (int f = 0; f < kCategoricalFields; ++f) {
    // Vocabularies from 10 to max_vocabulary, spread evenly in log scale and
    // shuffled over the fields by the seed.
    const double position =
        static_cast<double>((f * 7 + options.seed) % kCategoricalFields) /
        (kCategoricalFields - 1);
    vocabulary_[f] = static_cast<int64_t>(10.0 * std::exp(log_max * position));
    missing_rate_[f] =
        unit(model_rng) < 0.4 ? 0.05 + 0.4 * unit(model_rng) : 0.0;
    effect_scale_[f] = 0.15 + 0.45 * unit(model_rng);
  }
  for (int i = 0; i < kDenseFeatures; ++i) {
    dense_weight_[i] = (unit(model_rng) - 0.5) * 0.6;
    dense_log_mean_[i] = 0.5 + 3.0 * unit(model_rng);
    dense_missing_rate_[i] =
        unit(model_rng) < 0.5 ? 0.3 * unit(model_rng) : 0.0;
  }
}

double ClickLogGenerator::HashNormal(uint64_t a, uint64_t b, uint64_t c) const {
  const uint64_t h = Hash3(a ^ options_.seed, b, c);
  const double u1 = ToUnit(h);
  const double u2 = ToUnit(h * 0x9E3779B97F4A7C15ULL + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

int64_t ClickLogGenerator::DrawValue(int field) {
  // Inverse CDF of a continuous power law on [1, V + 1): value ranks with
  // frequencies roughly proportional to rank^-zipf_exponent.
  const double s = options_.zipf_exponent;
  const double v = static_cast<double>(vocabulary_[field]);
  const double u = uniform_(rng_);
  const double x =
      std::pow(1.0 + u * (std::pow(v + 1.0, 1.0 - s) - 1.0), 1.0 / (1.0 - s));
  const int64_t rank = static_cast<int64_t>(x) - 1;
  return std::min<int64_t>(std::max<int64_t>(rank, 0), vocabulary_[field] - 1);
}

void ClickLogGenerator::Next(std::string* line, double* probability) {
  double logit = options_.bias;
  int64_t values[kCategoricalFields];
  line->clear();
  char buffer[32];
  std::string dense_columns;
  for (int i = 0; i < kDenseFeatures; ++i) {
    dense_columns.push_back('\t');
    if (uniform_(rng_) < dense_missing_rate_[i]) continue;
    // Heavy-tailed counts: a log-normal, floored.
    const double raw = std::exp(dense_log_mean_[i] + 1.2 * normal_(rng_)) - 1.0;
    const int64_t count = static_cast<int64_t>(std::max(raw, 0.0));
    // Centred so that the integers do not shift the base rate much.
    logit += dense_weight_[i] *
             (std::log1p(static_cast<double>(count)) - dense_log_mean_[i]);
    const int length = std::snprintf(buffer, sizeof(buffer), "%lld",
                                     static_cast<long long>(count));
    dense_columns.append(buffer, length);
  }
  std::string categorical_columns;
  for (int f = 0; f < kCategoricalFields; ++f) {
    categorical_columns.push_back('\t');
    if (uniform_(rng_) < missing_rate_[f]) {
      values[f] = -1;
      continue;
    }
    values[f] = DrawValue(f);
    logit += effect_scale_[f] * HashNormal(f, values[f], 1);
    const uint32_t hex =
        static_cast<uint32_t>(Hash3(options_.seed, f, values[f]));
    const int length = std::snprintf(buffer, sizeof(buffer), "%08x", hex);
    categorical_columns.append(buffer, length);
  }
  for (const auto& pair : kInteractions) {
    const int64_t a = values[pair[0]], b = values[pair[1]];
    if (a < 0 || b < 0) continue;
    double dot = 0.0;
    for (int d = 0; d < kLatentDim; ++d) {
      dot += HashNormal(pair[0], a, 100 + d) * HashNormal(pair[1], b, 100 + d);
    }
    logit += 0.35 * dot;
  }
  *probability = 1.0 / (1.0 + std::exp(-logit));
  const bool click = uniform_(rng_) < *probability;
  line->push_back(click ? '1' : '0');
  line->append(dense_columns);
  line->append(categorical_columns);
}

}  // namespace ps::worker
