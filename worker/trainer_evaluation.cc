// Trainer's evaluations while it trains: on the test files every
// --eval_every examples, and, under --follow, progressive validation (each
// followed file's examples scored before they are trained on).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/evaluation.h"
#include "worker/trainer.h"

namespace ps::worker {

absl::StatusOr<std::vector<TaskMetrics>> Trainer::EvaluateIfDue(
    int64_t examples, int64_t* next_eval) {
  if (options_.eval_every <= 0 || options_.test_files.empty() ||
      examples < *next_eval) {
    return std::vector<TaskMetrics>();
  }
  *next_eval += options_.eval_every;
  int64_t evaluated = 0;
  ASSIGN_OR_RETURN(std::vector<TaskMetrics> tasks,
                   Evaluate(options_.eval_lines, &evaluated));
  for (const TaskMetrics& task : tasks) {
    LOG(INFO) << "[worker " << worker_index_ << "] "
              << (tasks.size() > 1 ? absl::StrCat("task ", task.task, ": ")
                                   : std::string())
              << "test AUC " << task.auc << ", logloss " << task.logloss
              << " on " << (tasks.size() > 1 ? task.examples : evaluated)
              << " examples";
  }
  return tasks;
}

void Trainer::ValidateProgressively(const std::string& file,
                                    absl::Span<const float> probabilities,
                                    const model::BatchInputs& prepared,
                                    TrainingSummary* summary) {
  if (file != validation_file_) {
    FinishValidation(summary);
    validation_file_ = file;
  }
  validation_scores_.Add(prepared.batch, probabilities, prepared.labels,
                         prepared.label_known);
}

void Trainer::FinishValidation(TrainingSummary* summary) {
  if (validation_scores_.examples() > 0) {
    std::vector<TaskMetrics> tasks = validation_scores_.Metrics();
    TrainingSummary::FollowedFile file;
    file.file = validation_file_;
    file.examples = validation_scores_.examples();
    file.auc = tasks[0].auc;
    file.logloss = tasks[0].logloss;
    for (const TaskMetrics& task : tasks) {
      LOG(INFO) << "[worker " << worker_index_ << "] " << file.file
                << ": progressive validation (each example scored before "
                   "training on it) "
                << (tasks.size() > 1 ? absl::StrCat("of task ", task.task, " ")
                                     : std::string())
                << "AUC " << task.auc << ", logloss " << task.logloss << " on "
                << (tasks.size() > 1 ? task.examples : file.examples)
                << " examples";
    }
    if (options_.metrics != nullptr)
      options_.metrics->SetProgressiveValidation(tasks);
    if (tasks.size() > 1) file.tasks = std::move(tasks);
    summary->followed_files.push_back(std::move(file));
  }
  validation_file_.clear();
  validation_scores_.Clear();
}

}  // namespace ps::worker
