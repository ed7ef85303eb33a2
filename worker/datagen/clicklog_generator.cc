#include "worker/datagen/clicklog_generator.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "xxhash.h"

namespace ps::worker {
namespace {

// Field pairs whose values interact (a latent dot product in the logit).
constexpr int kInteractions[][2] = {{0, 1},  {2, 5},  {3, 7},   {4, 9},
                                    {6, 12}, {8, 15}, {10, 20}, {13, 22}};
constexpr int kLatentDim = 4;
// The effect of one value of a multi-valued field.
constexpr double kMultiEffectScale = 0.35;
// A conversion's logit after a click: its bias (about 1 click in 4
// converts), and the scale of its values' effects against the click's.
constexpr double kConvertBias = -1.2;
constexpr double kConvertEffectScale = 0.8;
// A recent item's pull on the click: the positive part of its latent dot
// product with the candidate's, times this.
constexpr double kSequenceEffectScale = 0.6;
// Latent dimensions of the items' relatedness.
constexpr int kItemDim = 4;

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
    : options_(options),
      rng_(Hash3(options.seed, sample_seed, 0x5eed)),
      multi_rng_(Hash3(options.seed, sample_seed, 0x3017)),
      convert_rng_(Hash3(options.seed, sample_seed, 0xc0de)),
      sequence_rng_(Hash3(options.seed, sample_seed, 0x5e9)),
      line_(options.first_line) {
  // The hidden model's shape comes from the model seed alone.
  std::mt19937_64 model_rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_max =
      std::log(static_cast<double>(options.max_vocabulary) / 10.0);
  for (int f = 0; f < kGeneratedCategorical; ++f) {
    // Vocabularies from 10 to max_vocabulary, spread evenly in log scale and
    // shuffled over the fields by the seed.
    const double position =
        static_cast<double>((f * 7 + options.seed) % kGeneratedCategorical) /
        (kGeneratedCategorical - 1);
    vocabulary_[f] = static_cast<int64_t>(10.0 * std::exp(log_max * position));
    missing_rate_[f] =
        unit(model_rng) < 0.4 ? 0.05 + 0.4 * unit(model_rng) : 0.0;
    effect_scale_[f] = 0.15 + 0.45 * unit(model_rng);
  }
  for (int i = 0; i < kGeneratedDense; ++i) {
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

int64_t ClickLogGenerator::DrawValue(int field, std::mt19937_64& rng) {
  // Inverse CDF of a continuous power law on [1, V + 1): value ranks with
  // frequencies roughly proportional to rank^-zipf_exponent.
  const double s = options_.zipf_exponent;
  const double v = static_cast<double>(vocabulary_[field]);
  const double u = uniform_(rng);
  const double x =
      std::pow(1.0 + u * (std::pow(v + 1.0, 1.0 - s) - 1.0), 1.0 / (1.0 - s));
  const int64_t rank =
      std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(x) - 1, 0),
                        vocabulary_[field] - 1);
  if (options_.drift <= 0.0) return rank;
  // The newest value (the largest id yet) is rank 0; a value's rank grows
  // by one with every newer value, until it passes the vocabulary's end.
  const int64_t newest = vocabulary_[field] - 1 +
                         static_cast<int64_t>(line_ * options_.drift / 1000.0);
  return newest - rank;
}

void ClickLogGenerator::Next(GeneratedExample* example, double* probability,
                             double* convert_probability) {
  example->weight = 1.0;
  double logit = options_.bias;
  int64_t values[kGeneratedCategorical];
  char buffer[32];
  for (int i = 0; i < kGeneratedDense; ++i) {
    example->dense[i].clear();
    if (uniform_(rng_) < dense_missing_rate_[i]) continue;
    // Heavy-tailed counts: a log-normal, floored.
    const double raw = std::exp(dense_log_mean_[i] + 1.2 * normal_(rng_)) - 1.0;
    const int64_t count = static_cast<int64_t>(std::max(raw, 0.0));
    // Centred so that the integers do not shift the base rate much.
    logit += dense_weight_[i] *
             (std::log1p(static_cast<double>(count)) - dense_log_mean_[i]);
    const int length = std::snprintf(buffer, sizeof(buffer), "%lld",
                                     static_cast<long long>(count));
    example->dense[i].assign(buffer, length);
  }
  for (int f = 0; f < kGeneratedCategorical; ++f) {
    example->categorical[f].clear();
    if (uniform_(rng_) < missing_rate_[f]) {
      values[f] = -1;
      continue;
    }
    values[f] = DrawValue(f, rng_);
    logit += effect_scale_[f] * HashNormal(f, values[f], 1);
    const uint32_t hex =
        static_cast<uint32_t>(Hash3(options_.seed, f, values[f]));
    const int length = std::snprintf(buffer, sizeof(buffer), "%08x", hex);
    example->categorical[f].assign(buffer, length);
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
  // Multi-valued fields: 1 to 8 values from a vocabulary of a few thousand,
  // each with an effect of its own; drawn from a stream of their own, so
  // that the other columns are those of the same seeds without them.
  example->multi.resize(options_.multi_fields);
  for (int m = 0; m < options_.multi_fields; ++m) {
    std::vector<std::string>& list = example->multi[m];
    list.clear();
    const int count = 1 + static_cast<int>(uniform_(multi_rng_) * 8);
    for (int v = 0; v < count; ++v) {
      const int64_t value = static_cast<int64_t>(
          std::pow(5000.0, uniform_(multi_rng_)));  // log-uniform on [1, 5000)
      logit += kMultiEffectScale * HashNormal(1000 + m, value, 1);
      const uint32_t hex =
          static_cast<uint32_t>(Hash3(options_.seed, 1000 + m, value));
      const int length = std::snprintf(buffer, sizeof(buffer), "%08x", hex);
      list.emplace_back(buffer, length);
    }
  }
  example->sequence.clear();
  if (options_.sequence_length > 0) {
    // 0 to L items of the candidate's vocabulary, oldest first.
    const int length = static_cast<int>(uniform_(sequence_rng_) *
                                        (options_.sequence_length + 1));
    for (int i = 0; i < std::min(length, options_.sequence_length); ++i) {
      const int64_t item = DrawValue(0, sequence_rng_);
      if (values[0] >= 0) {
        double dot = 0.0;
        for (int d = 0; d < kItemDim; ++d) {
          dot +=
              HashNormal(0, values[0], 300 + d) * HashNormal(0, item, 300 + d);
        }
        logit += kSequenceEffectScale * std::max(dot, 0.0);
      }
      const uint32_t hex = static_cast<uint32_t>(Hash3(options_.seed, 0, item));
      const int written = std::snprintf(buffer, sizeof(buffer), "%08x", hex);
      example->sequence.emplace_back(buffer, written);
    }
    // About the mean pull of a sequence, so that the click rate stays.
    logit -= kSequenceEffectScale * 0.8 * options_.sequence_length / 2.0;
  }
  *probability = 1.0 / (1.0 + std::exp(-logit));
  example->click = uniform_(rng_) < *probability;
  example->convert = false;
  if (options_.tasks > 1) {
    double convert_logit = kConvertBias;
    for (int f = 0; f < kGeneratedCategorical; ++f) {
      if (values[f] < 0) continue;
      convert_logit +=
          kConvertEffectScale * effect_scale_[f] * HashNormal(f, values[f], 2);
    }
    const double after_click = 1.0 / (1.0 + std::exp(-convert_logit));
    if (convert_probability != nullptr)
      *convert_probability = *probability * after_click;
    example->convert = example->click && uniform_(convert_rng_) < after_click;
  }
  ++line_;
}

void ClickLogGenerator::Next(std::string* line, double* probability) {
  Next(&example_, probability);
  FormatLine(example_, criteo_, 0, line);
}

void FormatLine(const GeneratedExample& example,
                const model::InputLayout& layout, int64_t id,
                std::string* line) {
  line->clear();
  int dense = 0, categorical = 0, multi = 0, label = 0, sequence = 0;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    if (c > 0) line->push_back(layout.delimiter);
    switch (layout.columns[c]) {
      case model::ColumnKind::kLabel:
        if (label < 2) {
          line->push_back((label == 0 ? example.click : example.convert) ? '1'
                                                                         : '0');
        }
        ++label;
        break;
      case model::ColumnKind::kDense:
        if (dense < kGeneratedDense) line->append(example.dense[dense]);
        ++dense;
        break;
      case model::ColumnKind::kCategorical:
        if (categorical < kGeneratedCategorical)
          line->append(example.categorical[categorical]);
        ++categorical;
        break;
      case model::ColumnKind::kMulti:
        if (multi < static_cast<int>(example.multi.size())) {
          line->append(absl::StrJoin(example.multi[multi],
                                     std::string(1, layout.multi_separator)));
        }
        ++multi;
        break;
      case model::ColumnKind::kSequence:
        if (sequence++ == 0) {
          line->append(absl::StrJoin(example.sequence,
                                     std::string(1, layout.multi_separator)));
        }
        break;
      case model::ColumnKind::kSkip:
      case model::ColumnKind::kId:
        absl::StrAppend(line, id);
        break;
      case model::ColumnKind::kWeight:
        absl::StrAppend(line, example.weight);
        break;
    }
  }
}

std::string HeaderLine(const model::InputLayout& layout) {
  std::vector<std::string> names;
  int dense = 0, categorical = 0, multi = 0, label = 0, sequence = 0;
  for (model::ColumnKind kind : layout.columns) {
    switch (kind) {
      case model::ColumnKind::kLabel:
        names.push_back(label < static_cast<int>(layout.label_names.size())
                            ? layout.label_names[label]
                            : "label");
        ++label;
        break;
      case model::ColumnKind::kDense:
        names.push_back(absl::StrCat("I", ++dense));
        break;
      case model::ColumnKind::kCategorical:
        names.push_back(absl::StrCat("C", ++categorical));
        break;
      case model::ColumnKind::kMulti:
        names.push_back(absl::StrCat("M", ++multi));
        break;
      case model::ColumnKind::kSequence:
        names.push_back(absl::StrCat("S", ++sequence));
        break;
      case model::ColumnKind::kSkip:
      case model::ColumnKind::kId:
        names.push_back("id");
        break;
      case model::ColumnKind::kWeight:
        names.push_back("weight");
        break;
    }
  }
  return absl::StrJoin(names, std::string(1, layout.delimiter));
}

}  // namespace ps::worker
