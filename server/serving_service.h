// File: server/serving_service.h
//
// ps_serve's gRPC Serving service (proto/serving.proto) over a
// ModelDirectory: each call scores or looks up with the model serving when
// it starts, and its answer names that model. Errors become gRPC statuses
// here and nowhere else. Synchronous handlers: a call that waits for a
// free scorer holds one of gRPC's threads, not an event loop.
//
// Thread-safe. Does not own the directory.

#ifndef PS_SERVER_SERVING_SERVICE_H_
#define PS_SERVER_SERVING_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"
#include "server/model_directory.h"

namespace ps::server {

struct ServingServiceOptions {
  // The most lines one Predict may score, and keys one Lookup may ask
  // for. Defaults: 65536, 1048576.
  int64_t max_lines_per_request = 65536;
  int64_t max_keys_per_request = 1 << 20;
  // The largest answer (ps_serve --max_message_bytes): a Lookup of more
  // rows' bytes is refused. Default: 64 MiB.
  int64_t max_answer_bytes = 64 << 20;
  // Called once per call with its method, status and time (metrics); may be
  // empty.
  std::function<void(absl::string_view method, grpc::StatusCode code,
                     absl::Duration time)>
      observe;
};

class ServingService final : public Serving::Service {
 public:
  ServingService(const ServingServiceOptions& options,
                 const ModelDirectory* models)
      : options_(options), models_(models) {}

  grpc::Status Predict(grpc::ServerContext* context,
                       const PredictRequest* request,
                       PredictResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context,
                      const LookupRequest* request,
                      LookupResponse* response) override;

 private:
  grpc::Status Observed(absl::string_view method, absl::Time start,
                        grpc::Status status) const;

  const ServingServiceOptions options_;
  const ModelDirectory* const models_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVING_SERVICE_H_
