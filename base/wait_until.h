// File: base/wait_until.h
//
// WaitUntil(): how a test waits for something another thread or process
// does, in one place rather than a deadline loop per test. A test asserts
// on its answer (EXPECT_TRUE(WaitUntil(...))), so a condition that never
// holds fails the test at the timeout rather than hanging it.

#ifndef PS_BASE_WAIT_UNTIL_H_
#define PS_BASE_WAIT_UNTIL_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {

// Asks `condition` every `poll` until it holds or `timeout` has passed;
// whether it held (asked once more at the timeout).
inline bool WaitUntil(const std::function<bool()>& condition,
                      absl::Duration timeout,
                      absl::Duration poll = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return condition();
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace ps

#endif  // PS_BASE_WAIT_UNTIL_H_
