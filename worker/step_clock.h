// File: worker/step_clock.h
//
// StepClock is a worker's own clock: how many of its steps' pushes were
// acknowledged. The push thread advances it; the prefetcher waits on it for
// the worker's own pushes without asking the coordinator. Thread-safe.

#ifndef PS_WORKER_STEP_CLOCK_H_
#define PS_WORKER_STEP_CLOCK_H_

#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps::worker {

class StepClock {
 public:
  int64_t value() const {
    absl::MutexLock lock(&mu_);
    return value_;
  }

  // Sets the clock and wakes every waiter.
  void Set(int64_t value) {
    absl::MutexLock lock(&mu_);
    value_ = value;
    advanced_.SignalAll();
  }

  // Waits until the clock is at least `needed`, `deadline` has passed or
  // `stopped()` is true (asked at least every 100 ms); whether it got there.
  bool WaitUntilAtLeast(int64_t needed, absl::Time deadline,
                        const std::function<bool()>& stopped) const {
    absl::MutexLock lock(&mu_);
    while (value_ < needed && !stopped()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      advanced_.WaitWithDeadline(
          &mu_, std::min(deadline, now + absl::Milliseconds(100)));
    }
    return value_ >= needed;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::CondVar advanced_;
  int64_t value_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_STEP_CLOCK_H_
