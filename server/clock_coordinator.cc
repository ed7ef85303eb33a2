#include "server/clock_coordinator.h"

#include <algorithm>
#include <limits>

namespace ps::server {

ClockCoordinator::View ClockCoordinator::Report(uint32_t worker_id,
                                                int64_t clock, bool finished,
                                                absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  int64_t live_min = std::numeric_limits<int64_t>::max();
  for (const auto& [id, other] : workers_) {
    if (id != worker_id && Live(other, now))
      live_min = std::min(live_min, other.clock);
  }
  auto it = workers_.find(worker_id);
  const bool joining = it == workers_.end() || !Live(it->second, now);
  Worker& worker = workers_[worker_id];
  if (joining && live_min != std::numeric_limits<int64_t>::max()) {
    // A new or returning worker starts no lower than the live minimum.
    worker.clock = std::max(worker.clock, live_min);
  }
  worker.clock = std::max(worker.clock, clock);
  worker.lease_end = now + lease;
  worker.finished = finished;

  View view;
  view.clock = worker.clock;
  view.min_clock =
      Live(worker, now) ? std::min(live_min, worker.clock) : live_min;
  if (view.min_clock == std::numeric_limits<int64_t>::max())
    view.min_clock = worker.clock;
  for (const auto& [id, other] : workers_)
    view.live_workers += Live(other, now) ? 1 : 0;
  return view;
}

std::vector<ClockCoordinator::WorkerClock> ClockCoordinator::Snapshot() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<WorkerClock> clocks;
  for (const auto& [id, worker] : workers_) {
    clocks.push_back({id, worker.clock, Live(worker, now)});
  }
  std::sort(clocks.begin(), clocks.end(),
            [](const WorkerClock& a, const WorkerClock& b) {
              return a.worker < b.worker;
            });
  return clocks;
}

}  // namespace ps::server
