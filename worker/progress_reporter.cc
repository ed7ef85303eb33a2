#include "worker/progress_reporter.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
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
      interval_start_(start),
      interval_scores_(options.tasks) {
  if (!options_.interval_metrics_out.empty()) {
    intervals_ = std::make_unique<std::ofstream>(options_.interval_metrics_out);
  }
}

void ProgressReporter::AddStep(int64_t examples, double loss_sum,
                               absl::Span<const float> probabilities,
                               absl::Span<const float> labels,
                               absl::Span<const uint8_t> known) {
  interval_examples_ += examples;
  interval_loss_ += loss_sum;
  interval_scores_.Add(static_cast<int>(examples), probabilities, labels,
                       known);
}

void ProgressReporter::Report(absl::Time now, const ProgressContext& context) {
  const double seconds = absl::ToDoubleSeconds(now - interval_start_);
  const double rate = seconds > 0 ? interval_examples_ / seconds : 0;
  const double loss =
      interval_examples_ > 0 ? interval_loss_ / interval_examples_ : 0;
  const std::vector<TaskMetrics> train = interval_scores_.Metrics();
  const double train_auc = train[0].auc;
  // One task: "recent AUC 0.7512"; several: "recent AUC ctr 0.7512 cvr
  // 0.8120", and at an evaluation "test AUC ..." likewise.
  std::string aucs = absl::StrFormat("%.4f", train_auc);
  std::string test_aucs;
  if (train.size() > 1) {
    aucs.clear();
    // "-" for a task that knew no label in the interval.
    for (const TaskMetrics& task : train) {
      absl::StrAppend(&aucs, aucs.empty() ? "" : " ", task.task, " ",
                      task.examples > 0 ? absl::StrFormat("%.4f", task.auc)
                                        : std::string("-"));
    }
    for (const TaskMetrics& task : context.test)
      absl::StrAppendFormat(&test_aucs, " %s %.4f", task.task, task.auc);
    if (!test_aucs.empty()) test_aucs = absl::StrCat(" | test AUC", test_aucs);
  }
  const std::string line = absl::StrFormat(
      "[worker %d] %d examples | %.0f ex/s | loss %.4f | recent AUC %s%s | "
      "staleness max %d | waited %.1f s",
      options_.worker, context.examples, rate, loss, aucs, test_aucs,
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
    if (!context.test.empty()) interval.test_auc = context.test[0].auc;
    if (train.size() > 1) {
      interval.train_tasks = train;
      interval.test_tasks = context.test;
    }
    *intervals_ << IntervalToJson(interval);
    intervals_->flush();
  }
  last_loss_ = loss;
  if (options_.metrics != nullptr) {
    options_.metrics->SetRecent(loss, train);
    if (!context.test.empty()) options_.metrics->SetTest(context.test);
  }
  interval_start_ = now;
  interval_examples_ = 0;
  interval_loss_ = 0;
  interval_scores_.Clear();
}

void ProgressReporter::Finish() {
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace ps::worker
