// File: worker/training_metrics.h
//
// TrainingMetrics is what a worker exports for Prometheus (ps_worker
// --metrics_listen): examples and steps trained, the recent training loss
// and AUC, the last test AUC (once there is one), whether it waits for
// input, the staleness each pull saw
// (a histogram), and the time each stage of a step took (read: waiting for
// parsed input; wait: for other workers, or this worker's own pushes; pull;
// compute; push), as histograms labelled by stage. The trainer records;
// Prometheus scrapes.
//
// Thread-safe.

#ifndef PS_WORKER_TRAINING_METRICS_H_
#define PS_WORKER_TRAINING_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/metrics_endpoint.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/evaluation.h"

namespace ps::worker {

enum class Stage { kRead, kWait, kPull, kCompute, kPush };

class TrainingMetrics {
 public:
  // Serves GET /metrics on `listen` (HOST:PORT; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<TrainingMetrics>> Start(
      const std::string& listen, uint32_t worker_index);

  void AddStep(int64_t examples);
  void ObserveStage(Stage stage, absl::Duration time);
  void ObserveStaleness(int64_t staleness);
  // Per task, its gauges labeled task="NAME" (the label's name for a model
  // of one task: "label" for a plain label column).
  // The last interval's loss and each task's AUC over it.
  void SetRecent(double loss, const std::vector<TaskMetrics>& tasks);
  void SetTest(const std::vector<TaskMetrics>& tasks);
  // A followed file's progressive validation: its examples scored before
  // this worker trained on them.
  void SetProgressiveValidation(const std::vector<TaskMetrics>& tasks);
  // Whether the worker has begun every step of the input it has and waits
  // for more (--follow with no new file): not stalled, idle.
  void SetWaitingForInput(bool waiting);
  // The worker has trained on all of its input: not stalled, done.
  void SetFinished();

  const std::string& address() const { return endpoint_->address(); }

 private:
  TrainingMetrics() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* examples_ = nullptr;
  prometheus::Counter* steps_ = nullptr;
  prometheus::Gauge* loss_ = nullptr;
  prometheus::Family<prometheus::Gauge>* recent_auc_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* test_auc_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* test_loss_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* progressive_auc_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* progressive_loss_family_ = nullptr;
  prometheus::Counter* followed_files_ = nullptr;
  prometheus::Gauge* waiting_for_input_ = nullptr;
  prometheus::Gauge* finished_ = nullptr;
  prometheus::Histogram* staleness_ = nullptr;
  prometheus::Histogram* stages_[5] = {};
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINING_METRICS_H_
