#include "client/response_pool.h"

#include <utility>

namespace ps::client {

std::vector<PullResponse> PullResponsePool::Take() {
  absl::MutexLock lock(&mu_);
  if (sets_.empty()) return {};
  std::vector<PullResponse> responses = std::move(sets_.back());
  sets_.pop_back();
  return responses;
}

void PullResponsePool::Give(std::vector<PullResponse> responses) {
  size_t bytes = 0;
  for (const PullResponse& response : responses)
    bytes += response.values().capacity();
  if (bytes > max_set_bytes_) return;
  absl::MutexLock lock(&mu_);
  if (sets_.size() < max_sets_) sets_.push_back(std::move(responses));
}

}  // namespace ps::client
