#include "server/grpc_status.h"

#include <string>

namespace ps::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    message.resize(kMaxStatusMessageBytes - 3);
    message += "...";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace ps::server
