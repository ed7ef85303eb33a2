// File: tests/fuzz/fuzz_input.h
//
// FuzzInput hands out a fuzzer's bytes piece by piece (a choice, a length,
// a string, the rest), so that a target can build structured input from
// them; past the end it hands out zeros and empty strings. Not thread-safe.

#ifndef PS_TESTS_FUZZ_FUZZ_INPUT_H_
#define PS_TESTS_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ps::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // A number in [0, bound), from one byte. REQUIRES: bound in [1, 256].
  uint32_t Choose(uint32_t bound) {
    return size_ == 0 ? 0 : Take(1)[0] % bound;
  }

  // Up to `most` bytes, the count read first from one byte.
  std::string Bytes(size_t most) {
    const uint8_t* start = Take(std::min<size_t>(Choose(256), most));
    return std::string(reinterpret_cast<const char*>(start), consumed_last_);
  }

  // Everything not handed out yet.
  std::string Rest() {
    std::string rest(reinterpret_cast<const char*>(data_), size_);
    size_ = 0;
    return rest;
  }

  size_t left() const { return size_; }

 private:
  const uint8_t* Take(size_t count) {
    consumed_last_ = std::min(count, size_);
    const uint8_t* start = data_;
    data_ += consumed_last_;
    size_ -= consumed_last_;
    return start;
  }

  const uint8_t* data_;
  size_t size_;
  size_t consumed_last_ = 0;
};

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_FUZZ_INPUT_H_
