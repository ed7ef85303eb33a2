// File: server/received_push.h
//
// A push's request read where gRPC received it. Every field but the keys
// and the gradients is parsed; those two stay in gRPC's buffers until the
// push copies them, once, into what the store takes (parsing a PushRequest
// would first copy them into strings, a second pass over every pushed
// byte).

#ifndef PS_SERVER_RECEIVED_PUSH_H_
#define PS_SERVER_RECEIVED_PUSH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "net/message_bytes.h"
#include "proto/ps.pb.h"

namespace ps::server {

class ReceivedPush {
 public:
  // The push `wire` holds (shares its buffers); INVALID_ARGUMENT if it is
  // not a PushRequest on the wire.
  static absl::StatusOr<ReceivedPush> Read(const grpc::ByteBuffer& wire);
  // A push built in this process (tests, fuzzers), read from its wire form.
  static ReceivedPush FromRequest(const PushRequest& request);

  // Every field but keys and gradients, which are empty here.
  const PushRequest& fields() const { return fields_; }
  size_t keys_bytes() const { return keys_.size; }
  size_t gradients_bytes() const { return gradients_.size; }

  // The keys, packed little-endian uint64s. REQUIRES: keys_bytes() a
  // multiple of 8.
  void UnpackKeys(std::vector<uint64_t>* keys) const;
  // The gradients, each `format`'s WireValueBytes(), decoded and multiplied
  // by `scale` into `gradients`. REQUIRES: a known format, and
  // gradients.size() values in gradients_bytes().
  void DecodeGradients(WireFormat format, float scale,
                       absl::Span<float> gradients) const;

 private:
  ReceivedPush() = default;

  grpc::ByteBuffer wire_;
  PushRequest fields_;
  net::FieldBytes keys_;
  net::FieldBytes gradients_;
};

}  // namespace ps::server

#endif  // PS_SERVER_RECEIVED_PUSH_H_
