// File: worker/features.h
//
// From a click-log line's raw values to model inputs. A categorical value
// becomes a 64-bit key: XXH3 of the raw bytes, seeded by the field id, so
// that equal strings in different fields are different keys and every
// process and machine computes the same key (never absl::Hash or std::hash,
// which change between processes). A missing value is the empty string: it
// gets a key of its own per field. A dense value x becomes log(1 + max(x, 0)),
// and 0 when missing.

#ifndef PS_WORKER_FEATURES_H_
#define PS_WORKER_FEATURES_H_

#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "xxhash.h"

namespace ps::worker {

inline constexpr int kDenseFeatures = 13;
inline constexpr int kCategoricalFields = 26;

// One parsed example.
struct Example {
  float label = 0.0f;
  // False for a line without a label (scored, not trained on); label is 0.
  bool has_label = true;
  float dense[kDenseFeatures] = {};
  uint64_t keys[kCategoricalFields] = {};
};

inline uint64_t FeatureKey(uint32_t field, absl::string_view raw_value) {
  return XXH3_64bits_withSeed(raw_value.data(), raw_value.size(), field);
}

inline float DenseFeature(double raw_value) {
  return static_cast<float>(std::log1p(raw_value > 0.0 ? raw_value : 0.0));
}

}  // namespace ps::worker

#endif  // PS_WORKER_FEATURES_H_
