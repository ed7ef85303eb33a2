#include "model/kernel_status.h"

namespace ps::model {

absl::Status FromKernels(const kernels::Status& status) {
  if (status.ok()) return absl::OkStatus();
  switch (status.code()) {
    case kernels::StatusCode::kInvalidArgument:
      return absl::InvalidArgumentError(status.message());
    case kernels::StatusCode::kUnavailable:
      return absl::UnavailableError(status.message());
    case kernels::StatusCode::kOutOfMemory:
      return absl::ResourceExhaustedError(status.message());
    default:
      return absl::InternalError(status.message());
  }
}

}  // namespace ps::model
