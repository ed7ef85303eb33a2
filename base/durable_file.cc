#include "base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status Failed(const char* what, const std::string& path, int error) {
  return absl::InternalError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error)));
}

absl::Status SyncDirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Failed("open", dir, errno);
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  return synced ? absl::OkStatus() : Failed("sync", dir, error);
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path,
                              const std::string& contents) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Failed("create", temporary, errno);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n =
        ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return Failed("write", temporary, error);
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) return Failed("sync", temporary, error);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Failed("rename into place", temporary, errno);
  }
  return SyncDirectoryOf(path);
}

absl::Status RemoveFileDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Failed("remove", path, errno);
  }
  return SyncDirectoryOf(path);
}

}  // namespace ps
