#include "worker/progress_reporter.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "worker/evaluation.h"
#include "worker/training_summary.h"

namespace ps::worker {

ProgressReporter::ProgressReporter(const ProgressOptions& options,
                                   absl::Time start)
    : options_(options),
      every_(options.every),
      start_(start),
      tty_(isatty(STDERR_FILENO)),
      interval_start_(start) {
  if (!options_.interval_metrics_out.empty()) {
    intervals_ = std::make_unique<std::ofstream>(options_.interval_metrics_out);
  }
}

void ProgressReporter::AddStep(int64_t examples, double loss_sum,
                               absl::Span<const float> probabilities,
                               absl::Span<const float> labels) {
  interval_examples_ += examples;
  interval_loss_ += loss_sum;
  interval_predictions_.insert(interval_predictions_.end(),
                               probabilities.begin(), probabilities.end());
  interval_labels_.insert(interval_labels_.end(), labels.begin(), labels.end());
}

void ProgressReporter::Report(absl::Time now, const ProgressContext& context) {
  const double seconds = absl::ToDoubleSeconds(now - interval_start_);
  const double rate = seconds > 0 ? interval_examples_ / seconds : 0;
  const double loss =
      interval_examples_ > 0 ? interval_loss_ / interval_examples_ : 0;
  const double train_auc = ExactAuc(interval_predictions_, interval_labels_);
  const std::string line = absl::StrFormat(
      "[worker %d] %d examples | %.0f ex/s | loss %.4f | recent AUC %.4f | "
      "staleness max %d | waited %.1f s",
      options_.worker, context.examples, rate, loss, train_auc,
      context.max_staleness, context.waited_seconds);
  if (tty_) {
    std::fprintf(stderr, "\r%s   ", line.c_str());
  } else {
    LOG(INFO) << line;
  }
  if (intervals_ != nullptr) {
    IntervalMetrics interval;
    interval.worker = options_.worker;
    interval.examples = context.examples;
    interval.seconds = absl::ToDoubleSeconds(now - start_);
    interval.examples_per_sec = rate;
    interval.loss = loss;
    interval.train_auc = train_auc;
    interval.max_staleness = context.max_staleness;
    interval.test_auc = context.test_auc;
    *intervals_ << IntervalToJson(interval);
    intervals_->flush();
  }
  last_loss_ = loss;
  if (options_.metrics != nullptr) {
    options_.metrics->SetRecent(loss, train_auc);
    if (context.test_auc.has_value())
      options_.metrics->SetTestAuc(*context.test_auc);
  }
  interval_start_ = now;
  interval_examples_ = 0;
  interval_loss_ = 0;
  interval_predictions_.clear();
  interval_labels_.clear();
}

void ProgressReporter::Finish() {
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace ps::worker
