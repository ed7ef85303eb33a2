// File: worker/training_summary.h
//
// What a worker reports of its training: the summary of a whole run
// (ps_worker --metrics_out) and of one progress interval
// (--interval_metrics_out), and the JSON they are written as. Scripts and
// tests grep these files, so the keys and their spacing stay as they are.

#ifndef PS_WORKER_TRAINING_SUMMARY_H_
#define PS_WORKER_TRAINING_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/evaluation.h"

namespace ps::worker {

struct TrainingSummary {
  // Stopped by RequestStop() before the input ended (no final evaluation).
  bool drained = false;
  int64_t examples = 0;
  int64_t steps = 0;
  double train_seconds = 0;
  double examples_per_sec = 0;
  double final_train_loss = 0;
  // The first task's (the one task's, for a model of one).
  double test_auc = 0;
  double test_logloss = 0;
  int64_t test_examples = 0;
  // A model of several tasks: each one's (written as "tasks").
  std::vector<TaskMetrics> test_tasks;
  int64_t bad_lines = 0;
  int64_t max_staleness_seen = 0;
  // staleness_histogram[k]: pulls that saw staleness k.
  std::vector<int64_t> staleness_histogram;
  // Steps that had to wait for slower workers, and the time spent waiting
  // (not counting waits for this worker's own pushes).
  int64_t waits = 0;
  double wait_seconds = 0;
  // The clock this worker started at: 0, the live minimum for a worker that
  // joined mid-training, or a checkpoint's for one that resumed.
  int64_t first_step = 0;
  // Pushes sent with a learning-rate scale other than 1 (a schedule or
  // staleness-aware rates), and pushes whose dense gradients were
  // delay-compensated.
  int64_t scaled_pushes = 0;
  int64_t compensated_pushes = 0;
  // Time this worker's pushes held at checkpoint cuts.
  double cut_hold_seconds = 0;
  // Checkpoints this worker took (periodic ones), and those that failed.
  int checkpoints = 0;
  int failed_checkpoints = 0;
  // Where the time went, summed over steps (the stages overlap, so these
  // add up to more than train_seconds when the pipeline is full).
  double pull_seconds = 0;
  double compute_seconds = 0;
  double push_seconds = 0;
  // Replaying own pushes onto the next step's rows (the compute thread's
  // time; TrainerOptions::overlay_own_pushes), and steps replayed onto.
  double replay_seconds = 0;
  int64_t replayed_steps = 0;
  std::string backend;
  // --follow: each file this worker trained on to its end, with the
  // progressive validation of its share (every example scored before it
  // was trained on), and the files left out for arriving late.
  struct FollowedFile {
    std::string file;
    int64_t examples = 0;
    double auc = 0;
    double logloss = 0;
    // A model of several tasks: each one's.
    std::vector<TaskMetrics> tasks;
  };
  std::vector<FollowedFile> followed_files;
  int64_t late_files = 0;
};

// What one progress interval's line of TrainerOptions::interval_metrics_out
// says.
struct IntervalMetrics {
  uint32_t worker = 0;
  // Examples this worker trained on so far, and seconds since it started.
  int64_t examples = 0;
  double seconds = 0;
  // Over the interval.
  double examples_per_sec = 0;
  double loss = 0;
  double train_auc = 0;
  // The largest staleness a pull saw so far.
  int64_t max_staleness = 0;
  // When the interval ended with an evaluation on the test set.
  std::optional<double> test_auc;
  // A model of several tasks: each one's train AUC over the interval (auc)
  // and its test figures, when there was an evaluation (written as
  // "tasks").
  std::vector<TaskMetrics> train_tasks, test_tasks;
};

// Writes `summary` as one JSON object (indented, `"key": value`, ending in a
// newline). Seconds are rounded to the millisecond, examples_per_sec to a
// tenth, losses and AUCs to six decimals; a NaN or an infinity (a diverged
// loss) is null.
std::string SummaryToJson(const TrainingSummary& summary);

// Writes `interval` as one JSON line: `{"worker": 0, "examples": ...}` and a
// newline, rounded and with nulls as SummaryToJson; test_auc only when there
// is one.
std::string IntervalToJson(const IntervalMetrics& interval);

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINING_SUMMARY_H_
