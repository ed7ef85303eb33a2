// File: client/retry_policy.h
//
// How the client retries a call to a shard: which failures are worth
// another attempt (a shard restarting, stopping, overloaded, or marking its
// error transient: base/transient_error.h) and how long to wait between
// attempts (exponential backoff with jitter, up to a deadline). Pure: no
// gRPC, codes are absl::StatusCode (gRPC's have the same values).

#ifndef PS_CLIENT_RETRY_POLICY_H_
#define PS_CLIENT_RETRY_POLICY_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ps::client {

struct RetryOptions {
  // How long a call keeps retrying. Default: 600 s.
  absl::Duration retry_for = absl::Seconds(600);
  // The first wait; each next one doubles, up to max_backoff. Default: 50 ms.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  // Default: 2 s.
  absl::Duration max_backoff = absl::Seconds(2);
};

// Whether a call that ended with `code` is tried again: UNAVAILABLE (a shard
// restarting), DEADLINE_EXCEEDED (stopped or overloaded), CANCELLED (the
// client never cancels, so a shard shutting down did), or any code the shard
// marked transient.
bool IsRetryable(absl::StatusCode code, bool marked_transient);

// The waits of one call's retries; made when the call starts. Not
// thread-safe (one call, one thread).
class RetrySchedule {
 public:
  RetrySchedule(const RetryOptions& options, absl::Time start);

  // How long to wait before the next attempt, drawn between half and all of
  // the current backoff so that many clients do not retry in step; nullopt
  // when the whole backoff would end past start + retry_for (give up).
  std::optional<absl::Duration> NextWait(absl::Time now,
                                         absl::BitGenRef random);

 private:
  const absl::Time give_up_;
  const absl::Duration max_backoff_;
  absl::Duration backoff_;
};

// Retried attempts counted by the code that made them retry. Thread-safe.
class RetryCounts {
 public:
  void Add(absl::StatusCode code);

  // ("UNAVAILABLE", n) and so on, codes never counted left out, in code
  // order.
  std::vector<std::pair<std::string, uint64_t>> ByCode() const;

 private:
  // Codes past UNAUTHENTICATED (16) are counted as it.
  static constexpr size_t kCodes = 17;
  std::atomic<uint64_t> counts_[kCodes] = {};
};

}  // namespace ps::client

#endif  // PS_CLIENT_RETRY_POLICY_H_
