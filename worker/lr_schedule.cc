#include "worker/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps::worker {
namespace {

// Keeps the last steps of a cosine decay from stopping learning outright.
constexpr float kSmallestScale = 1e-3f;

}  // namespace

absl::StatusOr<LearningRateSchedule> LearningRateSchedule::Parse(
    absl::string_view text) {
  LearningRateSchedule schedule;
  for (absl::string_view part :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> name_count =
        absl::StrSplit(part, absl::MaxSplits(':', 1));
    const auto& [name, count_text] = name_count;
    int64_t count = 0;
    const bool has_count = !count_text.empty();
    if (has_count && (!absl::SimpleAtoi(count_text, &count) || count < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lr_schedule: \"", part,
                       "\" needs a positive whole number of steps"));
    }
    Decay decay = Decay::kNone;
    if (name == "constant" && !has_count) {
      continue;
    } else if (name == "warmup" && has_count) {
      schedule.warmup_ = count;
      continue;
    } else if (name == "exponential" && has_count) {
      decay = Decay::kExponential;
    } else if (name == "cosine" && has_count) {
      decay = Decay::kCosine;
    } else if (name == "inverse_sqrt" && !has_count) {
      decay = Decay::kInverseSqrt;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lr_schedule: unknown part \"", part,
          "\" (constant, warmup:W, exponential:H, inverse_sqrt, cosine:T)"));
    }
    if (schedule.decay_ != Decay::kNone) {
      return absl::InvalidArgumentError(
          "--lr_schedule: at most one decay (exponential, inverse_sqrt, "
          "cosine)");
    }
    schedule.decay_ = decay;
    schedule.decay_steps_ = count;
  }
  if (schedule.decay_ == Decay::kInverseSqrt && schedule.warmup_ == 0) {
    return absl::InvalidArgumentError(
        "--lr_schedule: inverse_sqrt decays from the end of a warmup:W");
  }
  return schedule;
}

float LearningRateSchedule::Scale(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  if (step < warmup_) {
    return static_cast<float>(step + 1) / static_cast<float>(warmup_);
  }
  const double after = static_cast<double>(step - warmup_);
  double scale = 1.0;
  switch (decay_) {
    case Decay::kNone:
      break;
    case Decay::kExponential:
      scale = std::exp2(-after / static_cast<double>(decay_steps_));
      break;
    case Decay::kInverseSqrt:
      scale = std::sqrt(static_cast<double>(warmup_) /
                        static_cast<double>(std::max<int64_t>(step, 1)));
      break;
    case Decay::kCosine:
      scale = after >= decay_steps_
                  ? 0.0
                  : 0.5 * (1.0 + std::cos(M_PI * after / decay_steps_));
      break;
  }
  return std::max(static_cast<float>(std::min(scale, 1.0)), kSmallestScale);
}

}  // namespace ps::worker
