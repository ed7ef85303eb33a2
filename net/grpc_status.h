// File: net/grpc_status.h
//
// The one place where statuses cross the gRPC edge, both ways: a server's
// absl::Status becomes the grpc::Status it answers, and a client's
// grpc::Status becomes the absl::Status its callers see. The canonical codes
// coincide, so the code is cast; long messages are truncated so that a bad
// request cannot make the reply itself too large.

#ifndef PS_NET_GRPC_STATUS_H_
#define PS_NET_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace ps::net {

// Longest error message sent to a client.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// At a server's edge: the status to answer with.
grpc::Status ToGrpcStatus(const absl::Status& status);

// At a client: the call's status, its message prefixed with `what` (the
// call, e.g. "starting the cut") so that the error says what failed.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what);

}  // namespace ps::net

#endif  // PS_NET_GRPC_STATUS_H_
