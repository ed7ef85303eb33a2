// File: model/input/features.h
//
// From a click-log line's raw values to model inputs. A categorical value
// becomes a 64-bit key: XXH3 of the raw bytes, seeded by the field id (its
// position among the cat and multi columns), so that equal strings in
// different fields are different keys and every process and machine computes
// the same key (never absl::Hash or std::hash, which change between
// processes). A missing value is the empty string: it gets a key of its own
// per field. A cross's key hashes the pair of its fields' keys, seeded by
// the cross's position. A dense value is kept as read (0 when missing); the
// model transforms it (today's default: log(1 + max(x, 0)), DenseFeature()).

#ifndef PS_MODEL_INPUT_FEATURES_H_
#define PS_MODEL_INPUT_FEATURES_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "xxhash.h"

namespace ps::model {

// One parsed example. Its categorical slots are the layout's fields (cat and
// multi columns in file order) and then its crosses; slot s holds keys
// [slot_end[s - 1], slot_end[s]) (from 0 for slot 0), one key for a cat
// field, one or more for a multi field or a cross of one. Sized inline for
// Criteo's 13 dense values and 26 single-key fields, so that parsing such a
// line allocates nothing.
struct Example {
  // The first label (labels[0]; 0 when unknown).
  float label = 0.0f;
  // False for a line without its labels (scored, not trained on): label is
  // 0 and labels is empty.
  bool has_label = true;
  // Per label column of the layout, in file order: the label (0 when
  // unknown) and whether it is known (a named label's empty column is not).
  absl::InlinedVector<float, 2> labels;
  absl::InlinedVector<bool, 2> label_known;
  // The weight column's value (positive); 1 when the layout has none.
  float weight = 1.0f;
  // The dense columns' values as read, in file order (not transformed).
  absl::InlinedVector<double, 16> dense;
  absl::InlinedVector<uint64_t, 32> keys;
  absl::InlinedVector<uint32_t, 32> slot_end;
  // The id column's value, verbatim (empty when the layout has none).
  std::string id;

  int slots() const { return static_cast<int>(slot_end.size()); }
  uint32_t slot_begin(int slot) const {
    return slot == 0 ? 0 : slot_end[slot - 1];
  }
};

inline uint64_t FeatureKey(uint32_t field, absl::string_view raw_value) {
  return XXH3_64bits_withSeed(raw_value.data(), raw_value.size(), field);
}

inline uint64_t CrossKey(uint32_t cross, uint64_t first_key,
                         uint64_t second_key) {
  const uint64_t pair[2] = {first_key, second_key};
  // Seeds apart from the fields' so a cross never shares a field's hash.
  return XXH3_64bits_withSeed(pair, sizeof(pair), 0x63726f7373ULL + cross);
}

// A dense bucket's key: XXH3 of the bucket's index, seeded apart from the
// fields' and crosses' by the dense column's position among the dense columns.
inline uint64_t BucketKey(uint32_t dense_column, int32_t bucket) {
  return XXH3_64bits_withSeed(&bucket, sizeof(bucket),
                              0x6275636b6574ULL + dense_column);
}

namespace features_internal {

// DenseFeature() of the whole numbers below this, computed once: dense
// click-log columns hold mostly small counts, and a table lookup costs a
// fraction of std::log1p.
inline constexpr int kTabledCounts = 1024;

inline float LogOnePlus(double raw_value) {
  return static_cast<float>(std::log1p(raw_value > 0.0 ? raw_value : 0.0));
}

inline const std::array<float, kTabledCounts>& TabledCounts() {
  static const std::array<float, kTabledCounts> table = [] {
    std::array<float, kTabledCounts> values;
    for (int i = 0; i < kTabledCounts; ++i) values[i] = LogOnePlus(i);
    return values;
  }();
  return table;
}

}  // namespace features_internal

// log(1 + max(x, 0)) as a float; the same bits for a tabled count as for
// any other value.
inline float DenseFeature(double raw_value) {
  if (raw_value >= 0.0 && raw_value < features_internal::kTabledCounts) {
    const int count = static_cast<int>(raw_value);
    if (count == raw_value) return features_internal::TabledCounts()[count];
  }
  return features_internal::LogOnePlus(raw_value);
}

}  // namespace ps::model

#endif  // PS_MODEL_INPUT_FEATURES_H_
