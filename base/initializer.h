// File: base/initializer.h
//
// Deterministic initial values for rows that were never pushed. A row's value
// is a pure function of (seed, key, column): every shard, every restart and
// every process computes the same numbers, so a pulled-but-never-pushed key
// needs no storage. A spec with later_columns starts each group of columns
// as its own spec would start a row of the group's width. Thread-safe
// (stateless after construction).

#ifndef PS_BASE_INITIALIZER_H_
#define PS_BASE_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace ps {

class Initializer {
 public:
  explicit Initializer(const InitializerSpec& spec) : spec_(spec) {}

  // OK when `spec` can start rows of `dim` weights: its scale and its
  // groups' finite and >= 0, each group's first column above the one
  // before and below `dim`, no group with groups of its own.
  // INVALID_ARGUMENT saying which otherwise.
  static absl::Status Check(const InitializerSpec& spec, int dim);

  // Fills `row` (the row's weights, any length) with the initial value of
  // `key`.
  void Fill(uint64_t key, absl::Span<float> row) const;

 private:
  // Fills `row` by `spec`'s own fields, its later_columns ignored.
  static void FillOne(const InitializerSpec& spec, uint64_t key,
                      absl::Span<float> row);

  const InitializerSpec spec_;
};

}  // namespace ps

#endif  // PS_BASE_INITIALIZER_H_
