// File: tests/delay_proxy.h
//
// Test helper: a TCP proxy on a free loopback port that forwards every
// connection to `target`, each byte held back `delay` in each direction: a
// network-slow link between two real processes (a replica and its primary).
// The delay can change while connections run (a link that turns slow for a
// while, then recovers). A connection is closed once both directions
// ended; the proxy stops, closing the rest, when destroyed.

#ifndef PS_TESTS_DELAY_PROXY_H_
#define PS_TESTS_DELAY_PROXY_H_

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>

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

  // Bytes read from now on are held back `delay` (those already read keep
  // theirs, and order is kept).
  void set_delay(absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One proxied connection: its two sockets and a pump each way.
  struct Connection {
    int client = -1;
    int upstream = -1;
    std::thread to_upstream;
    std::thread to_client;
    std::atomic<int> pumps_done{0};
  };

  DelayProxy() = default;
  void Accept();
  // Joins and closes the connections whose pumps both ended.
  void ReapClosed() ABSL_LOCKS_EXCLUDED(mu_);
  // Copies `from` to `to`, each chunk held back by the delay, until either
  // closes or the proxy stops.
  void Pump(int from, int to);
  absl::Duration delay() ABSL_LOCKS_EXCLUDED(mu_);

  std::string address_;
  int target_port_ = 0;
  int listener_ = -1;
  std::thread acceptor_;
  absl::Mutex mu_;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::testing

#endif  // PS_TESTS_DELAY_PROXY_H_
