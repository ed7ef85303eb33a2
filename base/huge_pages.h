// File: base/huge_pages.h
//
// Memory on transparent huge pages, for large tables read at random (the
// hot tier's rows, an export read into memory): on 4 KiB pages nearly every
// random read of a table of hundreds of megabytes also misses the TLB,
// which a 2 MiB page covers 512 times over. Linux backs anonymous memory
// with huge pages only where asked (madvise) under the usual THP setting,
// and malloc does not ask; without THP the memory is plain pages and works
// the same.
//
// MapHugePages() maps whole 2 MiB pages aligned to 2 MiB and asks for huge
// pages on them; HugePageAllocator gives containers such memory for
// allocations of 2 MiB and more (smaller ones come from operator new), or,
// made with on_huge_pages false (an operator's switch for a kernel whose
// huge-page compaction stalls faults), none at all: everything from
// operator new, not advised (4 KiB pages unless THP is set to `always`).
// Thread-safe: plain mmap and munmap.

#ifndef PS_BASE_HUGE_PAGES_H_
#define PS_BASE_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace ps {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole huge pages.
inline size_t HugePageRounded(size_t bytes) {
  return (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
}

// Maps HugePageRounded(bytes) bytes aligned to kHugePageBytes, asking for
// huge pages (MADV_HUGEPAGE); nullptr for no bytes, or when the kernel maps
// no more. Freed with UnmapHugePages(start, bytes).
void* MapHugePages(size_t bytes);
void UnmapHugePages(void* start, size_t bytes);

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;

  // A container moved or swapped takes its source's allocator along, so
  // that memory is always freed by the kind that allocated it.
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  HugePageAllocator() noexcept = default;
  explicit HugePageAllocator(bool on_huge_pages) noexcept
      : on_huge_pages_(on_huge_pages) {}
  template <typename U>
  HugePageAllocator(  // NOLINT: rebinding
      const HugePageAllocator<U>& other) noexcept
      : on_huge_pages_(other.on_huge_pages()) {}

  bool on_huge_pages() const { return on_huge_pages_; }

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    if (!on_huge_pages_ || bytes < kHugePageBytes) {
      return std::allocator<T>().allocate(n);
    }
    void* start = MapHugePages(bytes);
    if (start == nullptr) throw std::bad_alloc();
    return static_cast<T*>(start);
  }
  void deallocate(T* start, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (!on_huge_pages_ || bytes < kHugePageBytes) {
      std::allocator<T>().deallocate(start, n);
    } else {
      UnmapHugePages(start, bytes);
    }
  }

  // Equal allocators free each other's memory: the same kind.
  template <typename U>
  bool operator==(const HugePageAllocator<U>& other) const {
    return on_huge_pages_ == other.on_huge_pages();
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>& other) const {
    return !(*this == other);
  }

 private:
  bool on_huge_pages_ = true;
};

}  // namespace ps

#endif  // PS_BASE_HUGE_PAGES_H_
