// File: net/message_bytes.h
//
// Reads a protobuf message where gRPC received it, for messages whose bulk
// is one or two bytes fields (a pull's rows, a push's keys and gradients):
// SplitMessage() notes where those fields' bytes lie and hands every other
// field to the message's own parser; ForEachRun() then reads the bulk in
// place, as many items at a time as lie whole in one of gRPC's buffers. A
// parse of the whole message would first copy the bulk into strings.

#ifndef PS_NET_MESSAGE_BYTES_H_
#define PS_NET_MESSAGE_BYTES_H_

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"

namespace ps::net {

// Where a length-delimited field's bytes lie in a message on the wire.
struct FieldBytes {
  // From the message's first byte.
  size_t offset = 0;
  size_t size = 0;
};

// Splits `message` (one protobuf message on the wire) into the fields
// numbered `bulk_fields[i]` sent length-delimited, whose bytes it notes in
// `bulk[i]` (the last of a field sent twice, which is what protobuf keeps
// of a bytes field; {0, 0} for one not sent), and every other field, whose
// tags and values it appends to `rest` as they came: `rest` parsed by the
// message's ParseFromString() gives what parsing the whole would, but the
// bulk fields. INVALID_ARGUMENT if `message` is not a protobuf message on
// the wire as protobuf's parser reads one: a field number 0, a length of
// 2 GiB or more or spelled in more than 5 bytes, a field cut short.
// REQUIRES: bulk.size() == bulk_fields.size().
absl::Status SplitMessage(const grpc::ByteBuffer& message,
                          absl::Span<const int> bulk_fields,
                          absl::Span<FieldBytes> bulk, std::string* rest);

// Calls on_run(first, count, bytes) for runs of items that together are
// items 0 to items - 1, in order, item_bytes bytes each, laid one after
// another from `offset` bytes into `message`: `bytes` (count items) points
// into gRPC's buffers or, for an item that straddles two of them, into a
// copy of that item alone. OUT_OF_RANGE, with on_run called for the items
// before, if `message` ends first.
absl::Status ForEachRun(
    const grpc::ByteBuffer& message, size_t offset, size_t items,
    size_t item_bytes,
    absl::FunctionRef<void(size_t first, size_t count, const char* bytes)>
        on_run);

}  // namespace ps::net

#endif  // PS_NET_MESSAGE_BYTES_H_
