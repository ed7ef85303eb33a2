// File: worker/lr_schedule.h
//
// A learning-rate schedule: the factor by which every table's learning
// rate is multiplied at a step (sent with each push as its learning-rate
// scale; see PushRequest). Written as comma-separated parts:
//
//   constant        1 throughout (the default)
//   warmup:W        a linear ramp from 1/W at step 0 to 1 at step W - 1
//   exponential:H   then halving every H steps (after the warmup)
//   inverse_sqrt    then sqrt(W / step) (needs a warmup)
//   cosine:T        then half a cosine from 1 at step W down to 0 at step
//                   W + T
//
// e.g. "warmup:20,cosine:500". At most one decay. A decay never goes below
// 1e-3, so that the last steps still learn. Steps are a worker's
// clock, which under bounded staleness is the cluster's step to within the
// bound. Immutable and thread-safe.

#ifndef PS_WORKER_LR_SCHEDULE_H_
#define PS_WORKER_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::worker {

class LearningRateSchedule {
 public:
  // INVALID_ARGUMENT, naming --lr_schedule, for an unknown part, a count
  // that is not positive, several decays, or inverse_sqrt without warmup.
  static absl::StatusOr<LearningRateSchedule> Parse(absl::string_view text);

  // The factor at `step` (>= 0), in (0, 1].
  float Scale(int64_t step) const;

 private:
  enum class Decay { kNone, kExponential, kInverseSqrt, kCosine };
  int64_t warmup_ = 0;
  Decay decay_ = Decay::kNone;
  int64_t decay_steps_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LR_SCHEDULE_H_
