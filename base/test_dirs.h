// File: base/test_dirs.h
//
// FreshTestDir(name): an empty directory for one test, under Bazel's
// TEST_TMPDIR (or /tmp outside Bazel), removed first if a previous run left
// it behind. For tests only.

#ifndef PS_BASE_TEST_DIRS_H_
#define PS_BASE_TEST_DIRS_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ps {

inline std::string FreshTestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ps

#endif  // PS_BASE_TEST_DIRS_H_
