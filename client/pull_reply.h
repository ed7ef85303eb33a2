// File: client/pull_reply.h
//
// Reads a pull's reply (a ps.PullResponse on the wire) where gRPC received
// it: ReadPullReply() parses every field but the rows, and notes where the
// rows lie; ForEachPulledRow() then hands out the rows from gRPC's own
// buffers, as many at a time as lie whole in one (a row that straddles two
// of them is copied whole first). The rows are never copied into a message
// first, as parsing a PullResponse would.

#ifndef PS_CLIENT_PULL_REPLY_H_
#define PS_CLIENT_PULL_REPLY_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"

namespace ps::client {

// A PullResponse's fields but its values, and where the values are.
struct PullReplyFields {
  uint32_t dim = 0;
  WireFormat format = WireFormat::FP32;
  uint32_t state_floats = 0;
  bool has_optimizer = false;
  OptimizerSpec optimizer;
  float learning_rate_multiplier = 0.0f;
  // The values' bytes and where they begin in the reply (0 bytes: none
  // sent).
  size_t values_offset = 0;
  size_t values_bytes = 0;
};

// The fields of `reply`; INTERNAL if it is not a PullResponse's wire format
// (as protobuf refuses it: a field number 0, a length of 2 GiB or more, a
// cut field). Fields may come in any order; of a field sent twice the last
// counts (the optimizer's are merged), as protobuf parses them.
absl::StatusOr<PullReplyFields> ReadPullReply(const grpc::ByteBuffer& reply);

// Calls on_rows(first, count, bytes) for runs of rows that together are
// rows 0 to rows - 1, in order, row_bytes bytes each, laid one after
// another from `offset` bytes into `reply`: `bytes` (count rows) points
// into gRPC's buffers, or, for a row that straddles two of them, into a copy
// of that row alone. INTERNAL, with on_rows called for the rows before, if
// `reply` ends first.
absl::Status ForEachPulledRow(
    const grpc::ByteBuffer& reply, size_t offset, size_t rows, size_t row_bytes,
    absl::FunctionRef<void(size_t first, size_t count, const char* bytes)>
        on_rows);

}  // namespace ps::client

#endif  // PS_CLIENT_PULL_REPLY_H_
