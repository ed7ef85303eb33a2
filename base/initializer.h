// File: base/initializer.h
//
// Deterministic initial values for rows that were never pushed. A row's value
// is a pure function of (seed, key, column): every shard, every restart and
// every process computes the same numbers, so a pulled-but-never-pushed key
// needs no storage. Thread-safe (stateless after construction).

#ifndef PS_BASE_INITIALIZER_H_
#define PS_BASE_INITIALIZER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace ps {

class Initializer {
 public:
  explicit Initializer(const InitializerSpec& spec) : spec_(spec) {}

  // Fills `row` (the row's weights, any length) with the initial value of
  // `key`.
  void Fill(uint64_t key, absl::Span<float> row) const;

 private:
  const InitializerSpec spec_;
};

}  // namespace ps

#endif  // PS_BASE_INITIALIZER_H_
