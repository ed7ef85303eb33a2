#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace ps {

void* MapHugePages(size_t bytes) {
  const size_t rounded = HugePageRounded(bytes);
  if (rounded == 0 || rounded > SIZE_MAX - kHugePageBytes) return nullptr;
  // Over by one huge page, then trimmed to the aligned part.
  void* mapped = mmap(nullptr, rounded + kHugePageBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned =
      (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > begin) munmap(mapped, aligned - begin);
  const uintptr_t end = begin + rounded + kHugePageBytes;
  if (end > aligned + rounded)
    munmap(reinterpret_cast<void*>(aligned + rounded),
           end - (aligned + rounded));
  void* start = reinterpret_cast<void*>(aligned);
  // Advice only: where THP is off the memory is plain pages.
  madvise(start, rounded, MADV_HUGEPAGE);
  return start;
}

void UnmapHugePages(void* start, size_t bytes) {
  munmap(start, HugePageRounded(bytes));
}

}  // namespace ps
