// File: kernels/cuda_backend_library.h
//
// The contract between the CUDA backend's shared object
// (libps_cuda_backend.so, built from cuda_backend.cu and linked with CUDA's
// runtime and cuBLAS) and the binaries that load it at run time
// (cuda_backend_loader.cc). Binaries link no CUDA library, so they start on
// hosts without one; the object is opened with dlopen only when a backend is
// asked for, and is never closed.
//
// Both sides are built from the same sources (one bundle, one commit): the
// object and the binary pass C++ types (Status, CudaOptions,
// std::unique_ptr<Backend>) through the entry points, and the ABI version
// below refuses an object built from another layout of those types.

#ifndef PS_KERNELS_CUDA_BACKEND_LIBRARY_H_
#define PS_KERNELS_CUDA_BACKEND_LIBRARY_H_

#include <memory>

#include "kernels/backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/status.h"

namespace ps::kernels {

// The file name the loader looks for (see cuda_backend.h for where).
inline constexpr char kCudaBackendLibraryName[] = "libps_cuda_backend.so";

// Changes whenever CudaOptions, Status, Backend or the table below change.
inline constexpr int kCudaBackendAbiVersion = 4;

// What the shared object exports, through one C symbol.
struct CudaBackendEntryPoints {
  int abi_version;
  // CudaDeviceCount() and NewCudaBackend() of cuda_backend.h, in-process.
  Status (*device_count)(int* count);
  Status (*new_backend)(const CudaOptions& options,
                        std::unique_ptr<Backend>* backend);
};

}  // namespace ps::kernels

// The one symbol the shared object exports; its table lives as long as the
// process.
extern "C" const ps::kernels::CudaBackendEntryPoints*
PsKernelsCudaBackendEntryPoints();

// Its name, for dlsym.
inline constexpr char kCudaBackendEntryPointsSymbol[] =
    "PsKernelsCudaBackendEntryPoints";

#endif  // PS_KERNELS_CUDA_BACKEND_LIBRARY_H_
