// File: base/heap_policy.h
//
// KeepFreedHeapForReuse(): for processes that receive large gRPC replies
// (a worker's pulls, the serving benchmark's clients). gRPC reads each
// reply into buffers it allocates afresh; glibc gives the heap's freed top
// back to the kernel once it passes 128 KiB, so the next reply's buffers
// are faulted in (and zeroed) page by page again: a tenth of the machine's
// CPU with four clients pulling dim-64 rows (BENCHMARKS.md, "Where a pull's
// time goes"). This keeps up to 256 MiB of freed heap per arena for reuse
// instead. Call it once, first thing in main(): it sets a process-wide
// policy, so libraries do not call it themselves.

#ifndef PS_BASE_HEAP_POLICY_H_
#define PS_BASE_HEAP_POLICY_H_

#include <malloc.h>

namespace ps {

inline void KeepFreedHeapForReuse() {
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace ps

#endif  // PS_BASE_HEAP_POLICY_H_
