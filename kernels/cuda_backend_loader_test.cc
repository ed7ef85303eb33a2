// The CUDA backend's loader (cuda_backend_loader.cc): what a binary says when
// the shared object, or the CUDA libraries it needs, are not there, and that
// a build with the toolkit finds its object beside the executable.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {
namespace {

std::string TestDirectory() {
  const char* directory = std::getenv("TEST_TMPDIR");
  return directory != nullptr ? directory : "/tmp";
}

TEST(CudaBackendLoaderTest, AMissingLibraryIsUnavailableAndNamesIt) {
  CudaOptions options;
  options.library = TestDirectory() + "/nowhere/libps_cuda_backend.so";
  std::unique_ptr<Backend> backend;
  const Status created = NewCudaBackend(options, &backend);
  EXPECT_EQ(created.code(), StatusCode::kUnavailable);
  EXPECT_NE(created.message().find(options.library), std::string::npos)
      << created.message();
  EXPECT_EQ(backend, nullptr);
  int count = -1;
  EXPECT_TRUE(CudaDeviceCount(&count, options.library).ok());
  EXPECT_EQ(count, 0);
}

TEST(CudaBackendLoaderTest, ALibraryThatCannotBeLoadedSaysWhyInOneLine) {
  CudaOptions options;
  options.library = TestDirectory() + "/libnot_an_object.so";
  std::ofstream(options.library) << "not an ELF file\n";
  std::unique_ptr<Backend> backend;
  const Status created = NewCudaBackend(options, &backend);
  EXPECT_EQ(created.code(), StatusCode::kUnavailable);
  EXPECT_NE(created.message().find("cannot be loaded"), std::string::npos)
      << created.message();
  EXPECT_EQ(created.message().find('\n'), std::string::npos)
      << created.message();
  EXPECT_EQ(backend, nullptr);
}

TEST(CudaBackendLoaderTest, Bf16IsRefusedBeforeAnyLoading) {
  CudaOptions options;
  options.precision = GemmPrecision::kBf16;
  options.library = TestDirectory() + "/nowhere/libps_cuda_backend.so";
  std::unique_ptr<Backend> backend;
  EXPECT_EQ(NewCudaBackend(options, &backend).code(),
            StatusCode::kInvalidArgument);
}

TEST(CudaBackendLoaderTest, TheBuildsOwnLibraryIsFoundBesideTheExecutable) {
#if PS_KERNELS_CUDA_BUILT
  // Found and loaded: what remains can only be about the GPU (none here, or
  // one that works), never about the object.
  std::unique_ptr<Backend> backend;
  const Status created = NewCudaBackend(CudaOptions(), &backend);
  EXPECT_EQ(created.message().find("no libps_cuda_backend.so"),
            std::string::npos)
      << created.message();
  EXPECT_EQ(created.message().find("cannot be loaded"), std::string::npos)
      << created.message();
#else
  std::unique_ptr<Backend> backend;
  const Status created = NewCudaBackend(CudaOptions(), &backend);
  EXPECT_EQ(created.code(), StatusCode::kUnavailable);
  EXPECT_NE(created.message().find("this build has no CUDA backend"),
            std::string::npos)
      << created.message();
#endif
}

}  // namespace
}  // namespace ps::kernels
