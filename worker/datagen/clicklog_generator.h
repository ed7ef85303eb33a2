// File: worker/datagen/clicklog_generator.h
//
// Synthetic click logs with a known ground truth, so that the best AUC and
// logloss any model can reach on the data are known; Criteo's layout, or any
// other (FormatLine).
//
// Each line's click probability is sigmoid(bias + sum of per-value effects of
// its 26 categorical values + effects of log1p of its 13 integers + pairwise
// interactions between chosen field pairs, as dot products of per-value latent
// vectors + the summed effects of every value of its multi-valued fields, if
// asked for any: 1 to 8 values each, like a user's tags). Categorical
// vocabularies range from tens to millions of values, drawn with power-law
// (Zipf-like) frequencies, so most values are rare; integers are heavy-tailed
// counts; values are missing at per-field rates. Effects are pure functions of
// (seed, field, value), so no table of the vocabulary is kept in memory.
// Everything is deterministic given `seed`. Not thread-safe: one generator per
// thread.
//
// With sequence_length = L > 0 a line also carries a user's recent items (0
// to L values of the first categorical field's vocabulary, oldest first),
// and its click depends on how related its first categorical value (the
// candidate) is to them: the logit adds, per item, the positive part of the
// dot product of the candidate's and the item's latent vectors (a few items
// like the candidate matter, many unlike it do not: what attention pooling
// sees and a sum of the items does not). Drawn from a stream of their own.
//
// With tasks = 2 a line also says whether a conversion followed: only a
// click converts, with probability sigmoid(bias of its own + effects of its
// own of the same categorical values), so that the conversion's truth is
// P(click and convert) = the click's probability times that. Drawn from a
// stream of its own: the lines' other columns are those of tasks = 1.

#ifndef PS_WORKER_DATAGEN_CLICKLOG_GENERATOR_H_
#define PS_WORKER_DATAGEN_CLICKLOG_GENERATOR_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/input/input_layout.h"

namespace ps::worker {

struct GeneratorOptions {
  // Fixes the hidden model and the sampled lines. Default: 1.
  uint64_t seed = 1;
  // Largest categorical vocabulary (the smallest is 10). Default: 2,000,000.
  int64_t max_vocabulary = 2000000;
  // Zipf exponent of value frequencies. Default: 1.1.
  double zipf_exponent = 1.1;
  // Added to every logit; sets the click rate (about 0.25 at the default).
  // Default: -1.6.
  double bias = -1.6;
  // Multi-valued fields per line. Default: 0.
  int multi_fields = 0;
  // Labels per line: 1 (a click) or 2 (a click, then a conversion).
  // Default: 1.
  int tasks = 1;
  // The most recent items a line carries (0: none). Default: 0.
  int sequence_length = 0;
  // Drift: new values per categorical field per 1000 lines. Each new value
  // enters as the field's most frequent one and fades down the power law as
  // newer ones arrive, until it leaves the vocabulary for good: the stream's
  // values keep changing, as trending items and ads do. 0: no drift (a
  // value's rank is fixed). Default: 0.
  double drift = 0.0;
  // The stream position of the first line drawn, for drift: a test file of
  // the most recent data starts where its training stream ended. Default: 0.
  int64_t first_line = 0;
};

inline constexpr int kGeneratedDense = 13;
inline constexpr int kGeneratedCategorical = 26;

// One drawn line's values, before they are laid out.
struct GeneratedExample {
  bool click = false;
  // tasks = 2: whether a conversion followed the click (never without one).
  bool convert = false;
  // Empty when missing.
  std::string dense[kGeneratedDense];
  std::string categorical[kGeneratedCategorical];
  // multi_fields lists of values.
  std::vector<std::vector<std::string>> multi;
  // sequence_length > 0: the user's recent items, oldest first.
  std::vector<std::string> sequence;
  // What a weight column says: 1, or the inverse of the rate a line of its
  // kind was kept at when negatives are down-sampled.
  double weight = 1.0;
};

// Writes `example` as a line of `layout` (no newline): the first label
// column gets the click, a second one the conversion, the k-th dense, cat and
// multi columns the example's k-th such values (empty past the ones it has),
// the first seq column its sequence (others empty), a skip or id column
// `id`, a weight column its weight. With a header, the column names (the
// labels' names, I1.., C1.., M1.., S1.., id, weight).
void FormatLine(const GeneratedExample& example,
                const model::InputLayout& layout, int64_t id,
                std::string* line);
std::string HeaderLine(const model::InputLayout& layout);

class ClickLogGenerator {
 public:
  // `model_seed` fixes the hidden model (share it between train and test
  // files); `sample_seed` fixes which lines are drawn.
  ClickLogGenerator(const GeneratorOptions& options, uint64_t sample_seed);

  // Draws the next example and its true click probability; with tasks = 2
  // and `convert_probability`, the true probability of a conversion.
  void Next(GeneratedExample* example, double* probability,
            double* convert_probability = nullptr);
  // The same, as a line of Criteo's layout (no newline).
  void Next(std::string* line, double* probability);

  // Vocabulary size of categorical field `field`.
  int64_t vocabulary(int field) const { return vocabulary_[field]; }

 private:
  // A standard normal that is a pure function of its arguments.
  double HashNormal(uint64_t a, uint64_t b, uint64_t c) const;
  // A value id with power-law frequencies, drawn from `rng`: in [0,
  // vocabulary) without drift, in the window the drift has moved to with it.
  int64_t DrawValue(int field, std::mt19937_64& rng);

  const GeneratorOptions options_;
  std::mt19937_64 rng_;
  std::mt19937_64 multi_rng_;
  std::mt19937_64 convert_rng_;
  std::mt19937_64 sequence_rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::normal_distribution<double> normal_{0.0, 1.0};
  int64_t vocabulary_[kGeneratedCategorical];
  double missing_rate_[kGeneratedCategorical];
  double effect_scale_[kGeneratedCategorical];
  double dense_weight_[kGeneratedDense];
  double dense_log_mean_[kGeneratedDense];
  double dense_missing_rate_[kGeneratedDense];
  GeneratedExample example_;
  // Stream position of the next line.
  int64_t line_;
  const model::InputLayout criteo_ = model::InputLayout::Criteo();
};

}  // namespace ps::worker

#endif  // PS_WORKER_DATAGEN_CLICKLOG_GENERATOR_H_
