// File: base/packed.h
//
// Keys and rows cross the wire packed: little-endian uint64 keys and float32
// values, back to back in a `bytes` field. These helpers copy between such
// strings and typed vectors (a copy, because a std::string's bytes need not
// be aligned for uint64). The project targets little-endian machines only.

#ifndef PS_BASE_PACKED_H_
#define PS_BASE_PACKED_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian");

// Appends the bytes of `values` to `out`.
template <typename T>
void AppendPacked(absl::Span<const T> values, std::string* out) {
  out->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(T));
}

template <typename T>
std::string Pack(absl::Span<const T> values) {
  std::string out;
  AppendPacked(values, &out);
  return out;
}

// Copies `bytes` into `out`, resized to bytes.size() / sizeof(T). Returns
// false (and leaves `out` unspecified) when bytes.size() is not a multiple of
// sizeof(T).
template <typename T>
bool Unpack(const std::string& bytes, std::vector<T>* out) {
  if (bytes.size() % sizeof(T) != 0) return false;
  out->resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace ps

#endif  // PS_BASE_PACKED_H_
