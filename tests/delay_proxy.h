// File: tests/delay_proxy.h
//
// Test helper: a TCP proxy on a free loopback port that forwards every
// connection to `target`, each byte held back `delay` in each direction: a
// network-slow link between two real processes (a replica and its primary).
// Stops, closing every connection, when destroyed.

#ifndef PS_TESTS_DELAY_PROXY_H_
#define PS_TESTS_DELAY_PROXY_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps::testing {

class DelayProxy {
 public:
  // `target`: "127.0.0.1:PORT".
  static absl::StatusOr<std::unique_ptr<DelayProxy>> Start(
      const std::string& target, absl::Duration delay);
  ~DelayProxy();

  // "127.0.0.1:PORT", to dial instead of the target.
  const std::string& address() const { return address_; }

 private:
  DelayProxy() = default;
  void Accept();
  // Copies `from` to `to`, each chunk held back by delay_, until either
  // closes or the proxy stops.
  void Pump(int from, int to);

  std::string address_;
  int target_port_ = 0;
  absl::Duration delay_;
  int listener_ = -1;
  std::thread acceptor_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> sockets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::testing

#endif  // PS_TESTS_DELAY_PROXY_H_
