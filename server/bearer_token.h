// File: server/bearer_token.h
//
// The shard's check of a call's token: `authorization: Bearer <token>` in
// its metadata, compared in constant time. Admin calls that change a shard
// need the admin token (--admin_token_file); the data plane's Clock and
// DeclareTable need the worker token (--worker_token_file), so that nobody
// without it can move a cut or lock a worker out with a forged clock report.

#ifndef PS_SERVER_BEARER_TOKEN_H_
#define PS_SERVER_BEARER_TOKEN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace ps::server {

// OK when `expected` is empty or the call carries it; else UNAUTHENTICATED,
// saying that the call needs `what` (e.g. "the admin token (ps_admin
// --token_file)").
absl::Status CheckBearerToken(const grpc::CallbackServerContext& context,
                              const std::string& expected,
                              absl::string_view what);

}  // namespace ps::server

#endif  // PS_SERVER_BEARER_TOKEN_H_
