// File: kernels/cuda_backend.h
//
// The CUDA backend: own kernels for gather/concat, scatter-reduce by unique
// key, FM, activations and the loss; cuBLAS for the MLP's GEMMs. All work is
// queued on one CUDA stream owned by the backend, with one cuBLAS handle
// bound to it (cuBLAS advises against sharing handles across threads).
// Host-to-device copies go through a pinned staging buffer on a separate
// copy stream. A copy starts once the compute work queued before it is done
// (a kernel may still read the buffer it overwrites), and the compute
// stream waits for the copy; the host waits only for the previous upload
// to leave the staging buffer, never for the compute stream itself.
//
// The backend lives in a shared object of its own, libps_cuda_backend.so,
// the one file linked with CUDA's runtime and cuBLAS; the functions below
// open it with dlopen on first use, so a binary starts (and trains on the
// CPU) on a host without any CUDA library. The object is looked for at
// CudaOptions::library, else beside the executable: ../lib/ (the bundle's
// layout), the executable's own directory, then ../kernels/ (bazel-bin).
// Where it cannot be loaded (no CUDA libraries, or a build without the
// toolkit), NewCudaBackend() returns kUnavailable with one line naming what
// is missing, and CudaDeviceCount() says 0 GPUs.

#ifndef PS_KERNELS_CUDA_BACKEND_H_
#define PS_KERNELS_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/status.h"

namespace ps::kernels {

struct CudaOptions {
  // Which GPU. Default: 0.
  int device = 0;
  // kFp32 or kTf32 (kBf16 is the CPU backend's).
  GemmPrecision precision = GemmPrecision::kFp32;
  // The backend's shared object. Default: "" (looked for beside the
  // executable, as above).
  std::string library;
};

// Sets *count to the GPUs visible to this process: 0, OK, when there is
// none (no device, no driver, or a build without CUDA). An error when there
// is a GPU this build cannot use, e.g. a driver older than the CUDA runtime:
// that must not read as "no GPU" (tests fail on it rather than skip).
// `library` is CudaOptions::library.
Status CudaDeviceCount(int* count, const std::string& library = "");

// Creates the backend on options.device. kUnavailable, with the reason, when
// there is no usable GPU, the CUDA libraries cannot be loaded or the build
// has no CUDA; kInvalidArgument for kBf16 or a GPU that does not exist.
Status NewCudaBackend(const CudaOptions& options,
                      std::unique_ptr<Backend>* backend);

}  // namespace ps::kernels

#endif  // PS_KERNELS_CUDA_BACKEND_H_
