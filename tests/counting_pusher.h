// File: tests/counting_pusher.h
//
// CountingPusher pushes the same update to the same keys through a client,
// over and over on a thread of its own, and counts the pushes the client
// acknowledged: a test that reshapes the cluster meanwhile checks that each
// key holds every acknowledged push exactly once.

#ifndef PS_TESTS_COUNTING_PUSHER_H_
#define PS_TESTS_COUNTING_PUSHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "worker/ps_client.h"

namespace ps::testing {

class CountingPusher {
 public:
  // Calls push(*client, keys) until Stop() or its first failure. `client`
  // must outlive the pusher.
  CountingPusher(worker::PsClient* client, std::vector<uint64_t> keys,
                 std::function<absl::Status(worker::PsClient&,
                                            const std::vector<uint64_t>&)>
                     push)
      : keys_(std::move(keys)), thread_([this, client, push] {
          while (!stop_) {
            absl::Status pushed = push(*client, keys_);
            if (!pushed.ok()) {
              absl::MutexLock lock(&mu_);
              status_ = pushed;
              return;
            }
            ++acknowledged_;
          }
        }) {}

  ~CountingPusher() { Stop().IgnoreError(); }

  // Waits for `more` pushes beyond those acknowledged now (or a failure).
  void WaitForMore(int more) {
    const int target = acknowledged_.load() + more;
    while (acknowledged_.load() < target && status().ok())
      absl::SleepFor(absl::Milliseconds(10));
  }

  // Stops pushing; the first failure, if any.
  absl::Status Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status();
  }

  int acknowledged() const { return acknowledged_.load(); }

 private:
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  const std::vector<uint64_t> keys_;
  std::atomic<int> acknowledged_{0};
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  absl::Status status_;
  std::thread thread_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_COUNTING_PUSHER_H_
