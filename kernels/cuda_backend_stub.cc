// The CUDA backend in a build without the CUDA toolkit: never available.

#include "kernels/cuda_backend.h"

namespace ps::kernels {

Status CudaDeviceCount(int* count) {
  *count = 0;
  return Status::Ok();
}

Status NewCudaBackend(const CudaOptions&, std::unique_ptr<Backend>*) {
  return Status(
      StatusCode::kUnavailable,
      "this build has no CUDA backend (nvcc was not found when it was built)");
}

}  // namespace ps::kernels
