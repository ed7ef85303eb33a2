// parity_main: runs kernels/parity_checks.h with the CPU backend as the
// reference against the CUDA backend (FP32, then TF32) and prints one line
// per check. Exits 1 if any check fails, 2 if there is no GPU. Built by
// kernels/gpu_check.sh with plain nvcc.

#include <cstdio>

#include "kernels/backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/parity_checks.h"

int main() {
  using namespace ps::kernels;
  auto cpu = NewCpuBackend();
  int failed = 0, total = 0;
  for (GemmPrecision precision : {GemmPrecision::kFp32, GemmPrecision::kTf32}) {
    const bool tf32 = precision == GemmPrecision::kTf32;
    CudaOptions options;
    options.precision = precision;
    std::unique_ptr<Backend> cuda;
    Status created = NewCudaBackend(options, &cuda);
    if (!created.ok()) {
      std::printf("no CUDA backend: %s\n", created.message().c_str());
      return 2;
    }
    for (const ParityResult& r :
         RunParityChecks(*cpu, *cuda, tf32 ? 1e-2 : 1e-4)) {
      ++total;
      failed += r.passed() ? 0 : 1;
      std::printf("%-4s %-5s %-32s max error %.2e (tolerance %.0e) %s\n",
                  r.passed() ? "ok" : "FAIL", tf32 ? "tf32" : "fp32",
                  r.name.c_str(), r.max_error, r.tolerance, r.failure.c_str());
    }
  }
  std::printf("parity: %d of %d checks passed\n", total - failed, total);
  return failed == 0 ? 0 : 1;
}
