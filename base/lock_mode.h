// File: base/lock_mode.h
//
// UseReleaseLocks(): for the main() of every server, worker and client.
// Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
// detection on: each lock and unlock then records the lock order in a
// graph shared by the whole process, under a global lock (an uncontended
// lock costs 24 ns instead of 6.5 here, and threads contend on the graph).
// gRPC's own locks are absl::Mutex too. Tests keep the detection, which
// reports a lock-order inversion they exercise.

#ifndef PS_BASE_LOCK_MODE_H_
#define PS_BASE_LOCK_MODE_H_

#include "absl/synchronization/mutex.h"

namespace ps {

// Turns absl::Mutex's deadlock detection off for this process. Call first
// in main(), before any thread starts.
inline void UseReleaseLocks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace ps

#endif  // PS_BASE_LOCK_MODE_H_
