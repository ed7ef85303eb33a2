// File: client/response_pool.h
//
// Pull replies kept from one pull for the next, so that their row buffers
// (up to max_keys_per_request rows each) are reused instead of allocated,
// and faulted in page by page, for every pull: 1.2-1.5x the pull rate of
// one client in serving_bench. Pulls may run at once: each takes a set of
// its own. Thread-safe.

#ifndef PS_CLIENT_RESPONSE_POOL_H_
#define PS_CLIENT_RESPONSE_POOL_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.pb.h"

namespace ps::client {

class PullResponsePool {
 public:
  // Keeps at most `max_sets` sets, each of at most `max_set_bytes` of row
  // buffers: one exceptionally large pull (an evaluation's, an export's)
  // is not kept.
  explicit PullResponsePool(size_t max_sets = 4,
                            size_t max_set_bytes = size_t{64} << 20)
      : max_sets_(max_sets), max_set_bytes_(max_set_bytes) {}

  // A set kept earlier, or none.
  std::vector<PullResponse> Take();
  // Keeps `responses` for a later Take(), within the limits.
  void Give(std::vector<PullResponse> responses);

 private:
  const size_t max_sets_;
  const size_t max_set_bytes_;
  absl::Mutex mu_;
  std::vector<std::vector<PullResponse>> sets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client

#endif  // PS_CLIENT_RESPONSE_POOL_H_
