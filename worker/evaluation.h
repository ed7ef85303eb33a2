// File: worker/evaluation.h
//
// Exact evaluation metrics for click prediction: pure functions, and
// TaskScores, which gathers a multi-task model's scores per task.

#ifndef PS_WORKER_EVALUATION_H_
#define PS_WORKER_EVALUATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace ps::worker {

// Exact ROC AUC of `scores` against 0/1 `labels`: the probability that a
// random positive scores above a random negative, ties counting half.
// Returns 0.5 when either class is absent. O(n log n).
double ExactAuc(const std::vector<float>& scores,
                const std::vector<float>& labels);

// Mean binary cross-entropy of click probabilities (clamped to [1e-7,
// 1 - 1e-7]). Returns 0 for no examples.
double MeanLogLoss(const std::vector<float>& probabilities,
                   const std::vector<float>& labels);

// One task's evaluation.
struct TaskMetrics {
  std::string task;
  // Examples whose label the task knows: those it is evaluated on.
  int64_t examples = 0;
  double auc = 0.5;
  double logloss = 0;
};

// Each task's probabilities and labels, of the examples whose label it
// knows. Not thread-safe.
class TaskScores {
 public:
  explicit TaskScores(std::vector<std::string> tasks);

  // Adds one batch: `probabilities`, `labels` and `known` are tasks x
  // `batch`, task-major (model::BatchInputs' and model::GraphOutputs'
  // order). `known` may be empty: every label known.
  void Add(int batch, absl::Span<const float> probabilities,
           absl::Span<const float> labels, absl::Span<const uint8_t> known);

  // Per task, in order.
  std::vector<TaskMetrics> Metrics() const;
  // Examples added (known or not) since the last Clear().
  int64_t examples() const { return examples_; }
  void Clear();

 private:
  std::vector<std::string> tasks_;
  std::vector<std::vector<float>> probabilities_, labels_;
  int64_t examples_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_EVALUATION_H_
