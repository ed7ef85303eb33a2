// File: base/heap_policy.h
//
// KeepFreedHeapForReuse(): for processes that receive large gRPC replies
// (a worker's pulls, the serving benchmark's clients). gRPC reads each reply
// into buffers it allocates afresh, and glibc gave them back to the kernel
// once freed (trimming the heap's top, or unmapping a large chunk), so the
// next reply's buffers were faulted in and zeroed page by page again: a
// tenth of the machine's CPU with four clients pulling dim-64 rows
// (BENCHMARKS.md, "Where a pull's time goes"). This serves chunks below
// 32 MiB from the heap and trims the main heap only past 256 MiB free;
// threads' heaps (at most 64 MiB each) are then never trimmed. The cost:
// a process keeps its heaps' high-water mark (peak RSS in training rose
// 4-10%). Call it once, first thing in main(): it sets a process-wide
// policy, so libraries do not call it themselves.

#ifndef PS_BASE_HEAP_POLICY_H_
#define PS_BASE_HEAP_POLICY_H_

#include <malloc.h>

namespace ps {

inline void KeepFreedHeapForReuse() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace ps

#endif  // PS_BASE_HEAP_POLICY_H_
