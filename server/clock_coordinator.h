// File: server/clock_coordinator.h
//
// ClockCoordinator keeps the workers' clocks for bounded staleness (stale
// synchronous parallel). Each worker reports its clock (steps whose pushes
// were acknowledged) with a lease; the coordinator answers the minimum clock
// among live workers. A worker is live until it says it finished or its lease
// runs out without a report, so a dead worker stops holding the others back.
// A worker that joins late starts at the live minimum (elastic training).
// Thread-safe.

#ifndef PS_SERVER_CLOCK_COORDINATOR_H_
#define PS_SERVER_CLOCK_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps::server {

class ClockCoordinator {
 public:
  struct View {
    int64_t min_clock = 0;
    uint32_t live_workers = 0;
    // The reporting worker's recorded clock.
    int64_t clock = 0;
  };

  struct WorkerClock {
    uint32_t worker = 0;
    int64_t clock = 0;
    bool live = false;
  };

  // `now` is the time source (injected by tests).
  explicit ClockCoordinator(std::function<absl::Time()> now =
                                [] { return absl::Now(); })
      : now_(std::move(now)) {}

  // Records `clock` for `worker` (clocks never go back), renews its lease,
  // and returns the live minimum.
  View Report(uint32_t worker, int64_t clock, bool finished,
              absl::Duration lease);

  // Every worker ever seen, for the admin service.
  std::vector<WorkerClock> Snapshot();

 private:
  struct Worker {
    int64_t clock = 0;
    absl::Time lease_end;
    bool finished = false;
  };
  bool Live(const Worker& worker, absl::Time now) const {
    return !worker.finished && worker.lease_end > now;
  }

  const std::function<absl::Time()> now_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_CLOCK_COORDINATOR_H_
