// CudaDeviceCount() and NewCudaBackend() by loading the CUDA backend's
// shared object at run time (cuda_backend_library.h says why).

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_backend_library.h"

namespace ps::kernels {
namespace {

// The directory of this process's executable, symlinks resolved ("" if
// /proc is not there).
std::string ExecutableDirectory() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "";
  std::string executable(path, static_cast<size_t>(length));
  const size_t slash = executable.rfind('/');
  return slash == std::string::npos ? "" : executable.substr(0, slash);
}

std::vector<std::string> CandidatePaths(const std::string& library) {
  if (!library.empty()) return {library};
  const std::string directory = ExecutableDirectory();
  if (directory.empty()) return {kCudaBackendLibraryName};
  return {
      directory + "/../lib/" + kCudaBackendLibraryName,      // the bundle
      directory + "/" + kCudaBackendLibraryName,             // beside it
      directory + "/../kernels/" + kCudaBackendLibraryName,  // bazel-bin
  };
}

// A loaded library's entry points, or why there are none.
struct Loaded {
  const CudaBackendEntryPoints* entry_points = nullptr;
  Status status;
};

Loaded Load(const std::string& library) {
  Loaded loaded;
  std::string tried;
  for (const std::string& path : CandidatePaths(library)) {
    if (access(path.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_LOCAL: its symbols stay its own. Never closed: backends it made
    // run its code until the process ends.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      loaded.status =
          Status(StatusCode::kUnavailable,
                 "the CUDA backend (" + path + ") cannot be loaded: " +
                     (error != nullptr ? error : "unknown dlopen error") +
                     " (is the CUDA toolkit's lib64 on the library path?)");
      return loaded;
    }
    using EntryPointsFunction = const CudaBackendEntryPoints* (*)();
    auto function = reinterpret_cast<EntryPointsFunction>(
        dlsym(handle, kCudaBackendEntryPointsSymbol));
    if (function == nullptr || function() == nullptr) {
      loaded.status = Status(StatusCode::kUnavailable,
                             path + " has no " + kCudaBackendEntryPointsSymbol);
      return loaded;
    }
    if (function()->abi_version != kCudaBackendAbiVersion) {
      loaded.status =
          Status(StatusCode::kUnavailable,
                 path + " was built for another version of this program (ABI " +
                     std::to_string(function()->abi_version) + ", expected " +
                     std::to_string(kCudaBackendAbiVersion) + ")");
      return loaded;
    }
    loaded.entry_points = function();
    return loaded;
  }
#if PS_KERNELS_CUDA_BUILT
  const char* reason = "";
#else
  const char* reason =
      "this build has no CUDA backend (nvcc was not found "
      "when it was built); ";
#endif
  loaded.status = Status(
      StatusCode::kUnavailable,
      std::string(reason) + "no " + kCudaBackendLibraryName + " at " + tried);
  return loaded;
}

// Each library path is loaded once (a process asks for one); the results
// live as long as the process, as the libraries do.
const Loaded& LoadOnce(const std::string& library) {
  static std::mutex mutex;
  static std::map<std::string, Loaded>& loaded =
      *new std::map<std::string, Loaded>();
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find(library);
  if (found == loaded.end())
    found = loaded.emplace(library, Load(library)).first;
  return found->second;
}

}  // namespace

Status CudaDeviceCount(int* count, const std::string& library) {
  *count = 0;
  const Loaded& loaded = LoadOnce(library);
  // Without CUDA's libraries there is no GPU this process could use.
  if (loaded.entry_points == nullptr) return Status::Ok();
  return loaded.entry_points->device_count(count);
}

Status NewCudaBackend(const CudaOptions& options,
                      std::unique_ptr<Backend>* backend) {
  if (options.precision == GemmPrecision::kBf16) {
    return Status(StatusCode::kInvalidArgument,
                  "bfloat16 GEMMs are the CPU backend's; on CUDA use FP32 or "
                  "TF32");
  }
  const Loaded& loaded = LoadOnce(options.library);
  if (loaded.entry_points == nullptr) return loaded.status;
  return loaded.entry_points->new_backend(options, backend);
}

}  // namespace ps::kernels
