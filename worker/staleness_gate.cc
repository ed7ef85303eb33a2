#include "worker/staleness_gate.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps::worker {

StalenessGate::StalenessGate(const StalenessGateOptions& options,
                             const StepClock* own_clock, Report report)
    : options_(options), own_clock_(own_clock), report_(std::move(report)) {}

void StalenessGate::WaitForOwnPushes(int64_t step,
                                     const std::function<bool()>& stopped) {
  if (options_.read_my_writes) {
    // Replaying, the push of step - 1 is replayed onto these rows, and
    // leaves only once they are pulled: they must hold every push before it.
    const int64_t needed = options_.replays_own_pushes ? step - 1 : step;
    own_clock_->WaitUntilAtLeast(needed, absl::InfiniteFuture(), stopped);
  } else if (options_.staleness >= 0) {
    // While this worker's own clock holds the bound back, asking the
    // coordinator is pointless: wait a little for the push thread instead
    // (the pipeline's own wait, not counted as waiting for others).
    own_clock_->WaitUntilAtLeast(step - options_.staleness,
                                 absl::Now() + absl::Milliseconds(100),
                                 stopped);
  }
}

absl::StatusOr<int64_t> StalenessGate::WaitForStep(
    int64_t step, const std::function<bool()>& stopped) {
  WaitForOwnPushes(step, stopped);
  const absl::Time wait_start = absl::Now();
  bool waited_for_others = false;
  absl::Duration poll_pause = absl::Milliseconds(1);
  while (true) {
    if (stopped()) return absl::CancelledError("the worker is stopping");
    absl::StatusOr<ClockResponse> view = report_();
    if (!view.ok()) return view.status();
    if (options_.staleness < 0 ||
        view->min_clock() >= step - options_.staleness) {
      // Replaying, this worker's own last push is in the rows though its
      // clock does not count it yet: alone, nothing is missing; with
      // others, the minimum may be this worker's own clock, which makes the
      // figure an upper bound by one.
      const int64_t minimum =
          options_.replays_own_pushes && view->live_workers() <= 1
              ? view->min_clock() + 1
              : view->min_clock();
      if (waited_for_others) {
        ++waits_;
        waited_micros_ += absl::ToInt64Microseconds(absl::Now() - wait_start);
      }
      const int64_t staleness = std::max<int64_t>(0, step - minimum);
      Record(staleness);
      return staleness;
    }
    waited_for_others = true;
    absl::SleepFor(poll_pause);
    poll_pause = std::min(2 * poll_pause, absl::Milliseconds(4));
  }
}

void StalenessGate::Record(int64_t staleness) {
  if (histogram_.size() <= static_cast<size_t>(staleness))
    histogram_.resize(staleness + 1);
  ++histogram_[staleness];
  max_staleness_ = std::max(max_staleness_.load(), staleness);
}

}  // namespace ps::worker
