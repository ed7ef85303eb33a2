#include "worker/heartbeat.h"

#include <utility>

#include "glog/logging.h"

namespace ps::worker {

Heartbeat::Heartbeat(absl::Duration period, Beat beat, std::string name)
    : thread_([this, period, beat = std::move(beat), name = std::move(name)] {
        while (!stop_.WaitForNotificationWithTimeout(period)) {
          const absl::Status beaten = beat(period);
          if (!beaten.ok()) {
            LOG_EVERY_N(WARNING, 10) << name << " heartbeat: " << beaten;
          }
        }
      }) {}

Heartbeat::~Heartbeat() { Stop(); }

void Heartbeat::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ps::worker
