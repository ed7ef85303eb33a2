// File: base/test_faults.h
//
// Faults a test injects into its own process, without hooks in the code
// under test. Linux only (reads /proc/self/fd).

#ifndef PS_BASE_TEST_FAULTS_H_
#define PS_BASE_TEST_FAULTS_H_

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace ps {

// Points every file descriptor of this process whose file's path contains
// `path_part` at /dev/null opened read-only, so that the next write through
// it fails with EBADF (a lasting I/O error, not a full disk). Returns how
// many descriptors it replaced, or -1 if /dev/null cannot be opened.
inline int MakeOpenFilesReadOnly(const std::string& path_part) {
  int replaced = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd", error)) {
    std::error_code link_error;
    const std::string target =
        std::filesystem::read_symlink(entry.path(), link_error).string();
    if (link_error || target.find(path_part) == std::string::npos) continue;
    const int fd = std::stoi(entry.path().filename().string());
    const int read_only = open("/dev/null", O_RDONLY);
    if (read_only < 0) return -1;
    if (dup2(read_only, fd) == fd) ++replaced;
    close(read_only);
  }
  return replaced;
}

}  // namespace ps

#endif  // PS_BASE_TEST_FAULTS_H_
