// The CUDA backend against the CPU backend (kernels/parity_checks.h). Without
// a GPU the CUDA checks skip, saying why; the harness itself is still tested
// by running it CPU against CPU.

#include <cstdio>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/parity_checks.h"

namespace ps::kernels {
namespace {

void ExpectAllPass(const std::vector<ParityResult>& results) {
  ASSERT_FALSE(results.empty());
  for (const ParityResult& result : results) {
    EXPECT_TRUE(result.passed())
        << result.name << ": error " << result.max_error << " > tolerance "
        << result.tolerance << " " << result.failure;
  }
}

TEST(ParityChecksTest, CpuAgainstItselfIsExact) {
  auto a = NewCpuBackend();
  auto b = NewCpuBackend();
  const std::vector<ParityResult> results = RunParityChecks(*a, *b);
  ExpectAllPass(results);
  for (const ParityResult& result : results)
    EXPECT_EQ(result.max_error, 0.0) << result.name;
}

// The GPUs this machine has; a driver CUDA cannot use fails the test (it is
// not "no GPU").
int GpusOrFail() {
  int count = 0;
  const Status status = CudaDeviceCount(&count);
  EXPECT_TRUE(status.ok()) << status.message();
  return count;
}

TEST(CudaParityTest, EveryKernelAndTrainingStepMatchesTheCpu) {
  if (GpusOrFail() == 0)
    GTEST_SKIP() << "no CUDA GPU on this machine (or a CPU-only build)";
  auto cpu = NewCpuBackend();
  std::unique_ptr<Backend> cuda;
  const Status created = NewCudaBackend(CudaOptions(), &cuda);
  ASSERT_TRUE(created.ok()) << created.message();
  ExpectAllPass(RunParityChecks(*cpu, *cuda));
}

TEST(CudaParityTest, Tf32MatchesWithinItsLooserTolerance) {
  if (GpusOrFail() == 0)
    GTEST_SKIP() << "no CUDA GPU on this machine (or a CPU-only build)";
  auto cpu = NewCpuBackend();
  std::unique_ptr<Backend> cuda;
  CudaOptions options;
  options.precision = GemmPrecision::kTf32;
  ASSERT_TRUE(NewCudaBackend(options, &cuda).ok());
  ExpectAllPass(RunParityChecks(*cpu, *cuda, /*gemm_tolerance=*/1e-2));
}

TEST(CudaBackendTest, WithoutAGpuCreationFailsClearly) {
  if (GpusOrFail() > 0) GTEST_SKIP() << "this machine has a GPU";
  std::unique_ptr<Backend> cuda;
  const Status created = NewCudaBackend(CudaOptions(), &cuda);
  EXPECT_EQ(created.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(created.message().empty());
  EXPECT_EQ(cuda, nullptr);
}

}  // namespace
}  // namespace ps::kernels
