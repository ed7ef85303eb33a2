// File: server/grpc_status.h
//
// The one place where absl::Status becomes grpc::Status, at the server's
// edge. The canonical codes coincide, so the code is cast; long messages are
// truncated so that a bad request cannot make the reply itself too large.

#ifndef PS_SERVER_GRPC_STATUS_H_
#define PS_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ps::server {

// Longest error message sent to a client.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ps::server

#endif  // PS_SERVER_GRPC_STATUS_H_
