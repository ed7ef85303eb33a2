#include "worker/training_metrics.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::worker {

absl::StatusOr<std::unique_ptr<TrainingMetrics>> TrainingMetrics::Start(
    const std::string& listen, uint32_t worker_index) {
  auto metrics = std::unique_ptr<TrainingMetrics>(new TrainingMetrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Registry& registry = *metrics->registry_;
  const std::map<std::string, std::string> worker = {
      {"worker", absl::StrCat(worker_index)}};
  metrics->examples_ = &prometheus::BuildCounter()
                            .Name("ps_worker_examples_total")
                            .Help("Examples trained on.")
                            .Labels(worker)
                            .Register(registry)
                            .Add({});
  metrics->steps_ = &prometheus::BuildCounter()
                         .Name("ps_worker_steps_total")
                         .Help("Steps computed.")
                         .Labels(worker)
                         .Register(registry)
                         .Add({});
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Labels(worker)
                .Register(registry)
                .Add({});
  };
  metrics->loss_ = gauge("ps_worker_train_loss",
                         "Training logloss over the last progress interval.");
  metrics->recent_auc_family_ =
      &prometheus::BuildGauge()
           .Name("ps_worker_train_auc")
           .Help("Training AUC over the last progress interval, per task.")
           .Labels(worker)
           .Register(registry);
  metrics->test_auc_family_ =
      &prometheus::BuildGauge()
           .Name("ps_worker_test_auc")
           .Help(
               "AUC on --test at the last evaluation, per task (absent "
               "before one).")
           .Labels(worker)
           .Register(registry);
  metrics->test_loss_family_ =
      &prometheus::BuildGauge()
           .Name("ps_worker_test_logloss")
           .Help(
               "Log loss on --test at the last evaluation, per task (absent "
               "before one).")
           .Labels(worker)
           .Register(registry);
  metrics->progressive_auc_family_ =
      &prometheus::BuildGauge()
           .Name("ps_worker_progressive_auc")
           .Help(
               "--follow: AUC of the last file this worker trained on to its "
               "end, each example scored before it was trained on (absent "
               "before the first such file).")
           .Labels(worker)
           .Register(registry);
  metrics->progressive_loss_family_ =
      &prometheus::BuildGauge()
           .Name("ps_worker_progressive_logloss")
           .Help(
               "--follow: log loss of the last file's examples, each scored "
               "before this worker trained on it.")
           .Labels(worker)
           .Register(registry);
  metrics->followed_files_ =
      &prometheus::BuildCounter()
           .Name("ps_worker_followed_files_total")
           .Help("--follow: files this worker trained on to their end.")
           .Labels(worker)
           .Register(registry)
           .Add({});
  metrics->waiting_for_input_ =
      gauge("ps_worker_waiting_for_input",
            "1 while the worker has begun every step of its input and waits "
            "for more (--follow with no new file), else 0.");
  metrics->finished_ =
      gauge("ps_worker_finished",
            "1 once the worker has trained on all of its input (it waits for "
            "the other workers, then runs its final evaluation), else 0.");
  metrics->staleness_ =
      &prometheus::BuildHistogram()
           .Name("ps_worker_pull_staleness_steps")
           .Help(
               "Staleness each pull saw: its step minus the slowest live "
               "worker's clock.")
           .Labels(worker)
           .Register(registry)
           .Add({},
                prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32});
  auto& stages = prometheus::BuildHistogram()
                     .Name("ps_worker_stage_seconds")
                     .Help(
                         "Time per step in each stage: read (waiting for "
                         "parsed input), wait (other workers, or this "
                         "worker's own pushes), pull, compute, push.")
                     .Labels(worker)
                     .Register(registry);
  prometheus::Histogram::BucketBoundaries buckets;
  for (double bound = 1e-3; bound < 20; bound *= 2) buckets.push_back(bound);
  const char* names[] = {"read", "wait", "pull", "compute", "push"};
  for (int s = 0; s < 5; ++s)
    metrics->stages_[s] = &stages.Add({{"stage", names[s]}}, buckets);
  auto endpoint = MetricsEndpoint::Start(listen);
  if (!endpoint.ok()) return endpoint.status();
  metrics->endpoint_ = std::move(endpoint).value();
  metrics->endpoint_->Register(metrics->registry_);
  return metrics;
}

void TrainingMetrics::AddStep(int64_t examples) {
  examples_->Increment(static_cast<double>(examples));
  steps_->Increment();
}

void TrainingMetrics::ObserveStage(Stage stage, absl::Duration time) {
  stages_[static_cast<int>(stage)]->Observe(absl::ToDoubleSeconds(time));
}

void TrainingMetrics::SetWaitingForInput(bool waiting) {
  waiting_for_input_->Set(waiting ? 1.0 : 0.0);
}

void TrainingMetrics::SetFinished() { finished_->Set(1.0); }

void TrainingMetrics::ObserveStaleness(int64_t staleness) {
  staleness_->Observe(static_cast<double>(staleness));
}

void TrainingMetrics::SetRecent(double loss,
                                const std::vector<TaskMetrics>& tasks) {
  loss_->Set(loss);
  // A task without a known label in the interval has no figure.
  for (const TaskMetrics& task : tasks) {
    if (task.examples > 0)
      recent_auc_family_->Add({{"task", task.task}}).Set(task.auc);
  }
}

void TrainingMetrics::SetTest(const std::vector<TaskMetrics>& tasks) {
  // Created at the first evaluation, so that no 0 reads as a result.
  for (const TaskMetrics& task : tasks) {
    if (task.examples == 0) continue;
    test_auc_family_->Add({{"task", task.task}}).Set(task.auc);
    test_loss_family_->Add({{"task", task.task}}).Set(task.logloss);
  }
}

void TrainingMetrics::SetProgressiveValidation(
    const std::vector<TaskMetrics>& tasks) {
  for (const TaskMetrics& task : tasks) {
    if (task.examples == 0) continue;
    progressive_auc_family_->Add({{"task", task.task}}).Set(task.auc);
    progressive_loss_family_->Add({{"task", task.task}}).Set(task.logloss);
  }
  followed_files_->Increment();
}

}  // namespace ps::worker
