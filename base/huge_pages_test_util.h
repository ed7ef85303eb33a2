// File: base/huge_pages_test_util.h
//
// For tests of memory on huge pages: the kernel's flags of the mapping that
// holds an address, and how many mappings ask for huge pages.

#ifndef PS_BASE_HUGE_PAGES_TEST_UTIL_H_
#define PS_BASE_HUGE_PAGES_TEST_UTIL_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace ps {

// The VmFlags line of the mapping of /proc/self/smaps that holds `address`
// (" hg" among them: MADV_HUGEPAGE), or "" if none holds it.
inline std::string VmFlagsOf(const void* address) {
  const uintptr_t wanted = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::vector<std::string> range =
        absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin, end;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &begin) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      inside = wanted >= begin && wanted < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// How many mappings of /proc/self/smaps have huge pages asked for (" hg").
inline int HugePageMappings() {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  int count = 0;
  while (std::getline(smaps, line)) {
    if (line.rfind("VmFlags:", 0) == 0 && line.find(" hg") != std::string::npos)
      ++count;
  }
  return count;
}

// Whether the kernel has transparent huge pages at all.
inline bool HasTransparentHugePages() {
  return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

}  // namespace ps

#endif  // PS_BASE_HUGE_PAGES_TEST_UTIL_H_
