// File: tests/fuzz/example_checks.h
//
// What every parsed example must be, whatever bytes it came from: aborts
// (the fuzzer's crash) unless its labels are 0 or 1, its dense values are
// the layout's count and finite, and its slots are the layout's, each with
// a key, covering every key.

#ifndef PS_TESTS_FUZZ_EXAMPLE_CHECKS_H_
#define PS_TESTS_FUZZ_EXAMPLE_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "model/input/features.h"
#include "model/input/input_layout.h"

namespace ps::fuzz {

inline void CheckParsedExample(const model::Example& example,
                               const model::InputLayout& layout) {
  for (float label : example.labels) {
    if (label != 0.0f && label != 1.0f) std::abort();
  }
  if (example.label != 0.0f && example.label != 1.0f) std::abort();
  if (static_cast<int>(example.dense.size()) != layout.dense_features())
    std::abort();
  for (double value : example.dense) {
    if (!std::isfinite(value)) std::abort();
  }
  if (example.slots() != layout.slots()) std::abort();
  uint32_t previous = 0;
  for (uint32_t end : example.slot_end) {
    if (end <= previous) std::abort();  // every slot holds a key
    previous = end;
  }
  if (previous != example.keys.size()) std::abort();
}

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_EXAMPLE_CHECKS_H_
