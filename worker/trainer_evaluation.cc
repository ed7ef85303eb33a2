// Trainer's evaluations while it trains: on the test files every
// --eval_every examples, and, under --follow, progressive validation (each
// followed file's examples scored before they are trained on).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/evaluation.h"
#include "worker/trainer.h"

namespace ps::worker {

absl::StatusOr<std::optional<double>> Trainer::EvaluateIfDue(
    int64_t examples, int64_t* next_eval) {
  if (options_.eval_every <= 0 || options_.test_files.empty() ||
      examples < *next_eval) {
    return std::nullopt;
  }
  *next_eval += options_.eval_every;
  int64_t evaluated = 0;
  ASSIGN_OR_RETURN(auto result, Evaluate(options_.eval_lines, &evaluated));
  LOG(INFO) << "[worker " << worker_index_ << "] test AUC " << result.first
            << ", logloss " << result.second << " on " << evaluated
            << " examples";
  return result.first;
}

void Trainer::ValidateProgressively(const std::string& file,
                                    absl::Span<const float> probabilities,
                                    absl::Span<const float> labels,
                                    TrainingSummary* summary) {
  if (file != validation_.file) {
    FinishValidation(summary);
    validation_.file = file;
  }
  const size_t examples = std::min(probabilities.size(), labels.size());
  validation_.probabilities.insert(validation_.probabilities.end(),
                                   probabilities.begin(),
                                   probabilities.begin() + examples);
  validation_.labels.insert(validation_.labels.end(), labels.begin(),
                            labels.begin() + examples);
}

void Trainer::FinishValidation(TrainingSummary* summary) {
  if (!validation_.labels.empty()) {
    TrainingSummary::FollowedFile file;
    file.file = validation_.file;
    file.examples = static_cast<int64_t>(validation_.labels.size());
    file.auc = ExactAuc(validation_.probabilities, validation_.labels);
    file.logloss = MeanLogLoss(validation_.probabilities, validation_.labels);
    LOG(INFO) << "[worker " << worker_index_ << "] " << file.file
              << ": progressive validation (each example scored before "
                 "training on it) AUC "
              << file.auc << ", logloss " << file.logloss << " on "
              << file.examples << " examples";
    if (options_.metrics != nullptr)
      options_.metrics->SetProgressiveValidation(file.auc, file.logloss);
    summary->followed_files.push_back(std::move(file));
  }
  validation_ = FileValidation();
}

}  // namespace ps::worker
