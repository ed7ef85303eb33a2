// File: worker/progress_reporter.h
//
// ProgressReporter says how training goes, one interval at a time: a line on
// stderr (rewritten in place on a terminal, logged otherwise) with the
// interval's examples per second, loss and AUC, one JSON line per interval
// in TrainerOptions::interval_metrics_out (IntervalToJson) and the recent
// figures in the Prometheus metrics.
//
// Not thread-safe: the trainer's compute thread owns it.

#ifndef PS_WORKER_PROGRESS_REPORTER_H_
#define PS_WORKER_PROGRESS_REPORTER_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/evaluation.h"
#include "worker/training_metrics.h"

namespace ps::worker {

struct ProgressOptions {
  uint32_t worker = 0;
  // How often an interval ends without an evaluation. Default: 2 s.
  absl::Duration every = absl::Seconds(2);
  // Where the JSON lines go; empty: nowhere.
  std::string interval_metrics_out;
  // Not owned; null: no metrics.
  TrainingMetrics* metrics = nullptr;
  // The model's tasks' names (model::PlanTask), in order.
  std::vector<std::string> tasks = {"label"};
};

// What the rest of the worker saw by the end of an interval.
struct ProgressContext {
  // Examples this worker trained on so far.
  int64_t examples = 0;
  int64_t max_staleness = 0;
  double waited_seconds = 0;
  // Per task, when the interval ends with an evaluation on the test set.
  std::vector<TaskMetrics> test;
};

class ProgressReporter {
 public:
  // Training started at `start`.
  ProgressReporter(const ProgressOptions& options, absl::Time start);

  // Adds one step's examples, summed loss and predictions with their labels
  // (tasks x examples, task-major; `known` may be empty: all known) to the
  // interval.
  void AddStep(int64_t examples, double loss_sum,
               absl::Span<const float> probabilities,
               absl::Span<const float> labels,
               absl::Span<const uint8_t> known = {});

  // Whether the interval has run for `every` by `now`.
  bool Due(absl::Time now) const { return now - interval_start_ >= every_; }
  // Whether steps were added since the last Report().
  bool HasSteps() const { return interval_examples_ > 0; }

  // Ends the interval at `now`: writes its line, JSON and metrics, and
  // starts the next.
  void Report(absl::Time now, const ProgressContext& context);

  // The mean loss of the last interval reported (0 before any).
  double last_loss() const { return last_loss_; }

  // Ends the line rewritten in place, on a terminal.
  void Finish();

 private:
  const ProgressOptions options_;
  const absl::Duration every_;
  const absl::Time start_;
  const bool tty_;
  std::unique_ptr<std::ofstream> intervals_;
  absl::Time interval_start_;
  int64_t interval_examples_ = 0;
  double interval_loss_ = 0;
  TaskScores interval_scores_;
  double last_loss_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_PROGRESS_REPORTER_H_
