// File: worker/staleness_gate.h
//
// StalenessGate is where a worker's prefetcher waits before pulling step t's
// rows. Under read-my-writes it first waits for its own pushes (of every step
// before t, or before t - 1 when it replays its own last push onto the rows);
// then it asks the coordinator until every live worker's clock is at least
// t - staleness (polling every 1 ms, backing off to 4 ms so that many
// waiting workers do not flood the coordinator), and answers the staleness
// the step sees: t minus the slowest live worker's clock. It records what it
// saw: a histogram of staleness, the waits for other workers and their time.
//
// One thread calls WaitForStep(); max_staleness() and waited_seconds() may
// be read from any thread, histogram() and waits() once that thread is done.

#ifndef PS_WORKER_STALENESS_GATE_H_
#define PS_WORKER_STALENESS_GATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "worker/step_clock.h"

namespace ps::worker {

struct StalenessGateOptions {
  // A step may start when every live worker's clock is >= step - staleness.
  // Negative: asynchronous (never waits for others). Default: 0.
  int staleness = 0;
  // Wait for this worker's own earlier pushes first. Default: true.
  bool read_my_writes = true;
  // The worker replays its own last push onto the rows it pulls
  // (TrainerOptions::overlay_own_pushes): the own wait is one step shorter,
  // and alone it counts that push as seen. Default: false.
  bool replays_own_pushes = false;
};

class StalenessGate {
 public:
  // A clock report to the coordinator; its answer.
  using Report = std::function<absl::StatusOr<ClockResponse>()>;

  // `own_clock` must outlive the gate.
  StalenessGate(const StalenessGateOptions& options, const StepClock* own_clock,
                Report report);

  // Waits until `step` may be pulled; the staleness it sees. CANCELLED once
  // `stopped()` is true; the report's error if one fails.
  absl::StatusOr<int64_t> WaitForStep(int64_t step,
                                      const std::function<bool()>& stopped);

  int64_t max_staleness() const { return max_staleness_.load(); }
  double waited_seconds() const { return waited_micros_.load() / 1e6; }
  // histogram()[k]: the steps that saw staleness k.
  const std::vector<int64_t>& histogram() const { return histogram_; }
  // Steps that waited for other workers (not for this worker's own pushes).
  int64_t waits() const { return waits_; }

 private:
  // Waits for this worker's own pushes as the options ask.
  void WaitForOwnPushes(int64_t step, const std::function<bool()>& stopped);
  void Record(int64_t staleness);

  const StalenessGateOptions options_;
  const StepClock* const own_clock_;
  const Report report_;
  std::vector<int64_t> histogram_;
  int64_t waits_ = 0;
  std::atomic<int64_t> max_staleness_{0};
  std::atomic<int64_t> waited_micros_{0};
};

}  // namespace ps::worker

#endif  // PS_WORKER_STALENESS_GATE_H_
