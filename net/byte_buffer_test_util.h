// File: net/byte_buffer_test_util.h
//
// Tests' messages as gRPC may hand them over: cut into slices.

#ifndef PS_NET_BYTE_BUFFER_TEST_UTIL_H_
#define PS_NET_BYTE_BUFFER_TEST_UTIL_H_

#include <algorithm>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace ps::net {

// `bytes` in slices of `size` bytes (the last may be shorter).
inline grpc::ByteBuffer InSlices(const std::string& bytes, size_t size) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += size) {
    slices.emplace_back(bytes.data() + i, std::min(size, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace ps::net

#endif  // PS_NET_BYTE_BUFFER_TEST_UTIL_H_
