#include "client/retry_policy.h"

#include <algorithm>

#include "absl/random/distributions.h"

namespace ps::client {

bool IsRetryable(absl::StatusCode code, bool marked_transient) {
  return marked_transient || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kCancelled;
}

RetrySchedule::RetrySchedule(const RetryOptions& options, absl::Time start)
    : give_up_(start + options.retry_for),
      max_backoff_(options.max_backoff),
      backoff_(options.initial_backoff) {}

std::optional<absl::Duration> RetrySchedule::NextWait(absl::Time now,
                                                      absl::BitGenRef random) {
  if (now + backoff_ > give_up_) return std::nullopt;
  const absl::Duration wait = backoff_ * absl::Uniform(random, 0.5, 1.0);
  backoff_ = std::min(backoff_ * 2, max_backoff_);
  return wait;
}

void RetryCounts::Add(absl::StatusCode code) {
  ++counts_[std::min<size_t>(static_cast<size_t>(code), kCodes - 1)];
}

std::vector<std::pair<std::string, uint64_t>> RetryCounts::ByCode() const {
  std::vector<std::pair<std::string, uint64_t>> counts;
  for (size_t code = 0; code < kCodes; ++code) {
    if (const uint64_t n = counts_[code].load(); n > 0) {
      counts.emplace_back(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), n);
    }
  }
  return counts;
}

}  // namespace ps::client
