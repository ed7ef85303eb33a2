// File: server/serving_model.h
//
// ServingModel is one export (ps_admin export) loaded for ps_serve: it
// scores click-log lines and looks rows up for several request threads at
// once. An ExportedModel (model/exported_model.h) reads its SST
// parts through iterators of one thread, so the model holds a pool of
// `scorers` of them, each with its own CPU backend, and a request waits
// for a free one. The scores are ps_predict's: the same reader of the
// export, the same line parser and the same model code.
//
// Thread-safe.

#ifndef PS_SERVER_SERVING_MODEL_H_
#define PS_SERVER_SERVING_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "model/batch_inputs.h"
#include "model/exported_model.h"
#include "model/model_graph.h"
#include "rocksdb/cache.h"

namespace ps::server {

class ServingModel {
 public:
  // Opens the export in `dir` `scorers` times (at least 1), as `options`
  // say (model/exported_model.h: the parts' block cache, shared by
  // every scorer, and what is read into memory, once for all scorers). The
  // export's errors.
  static absl::StatusOr<std::unique_ptr<ServingModel>> Open(
      const std::string& dir, int scorers,
      const model::ExportedModelOptions& options =
          model::ExportedModelOptions());

  // The export's directory name (its version), its job (empty without
  // etcd), the training clock it was cut at, and when it was written.
  const std::string& version() const { return version_; }
  const std::string& job() const { return job_; }
  int64_t cut() const { return cut_; }
  absl::Time created_at() const { return created_at_; }
  // When its manifest says it was written (ExportWrittenAt(): the infinite
  // past for a manifest whose time does not read, where created_at() is
  // when it was loaded).
  absl::Time written_at() const { return written_at_; }
  // The deltas the export is read over (0: a full export).
  uint32_t delta_index() const { return delta_index_; }

  // The layout the model reads (its export's).
  const model::InputLayout& layout() const { return layout_; }
  // The model's tasks' names, in order (model::PlanTask).
  const std::vector<std::string>& tasks() const { return tasks_; }

  // Per task, one click probability per line (tasks x lines, task-major; in
  // the export's layout, the label columns optional). INVALID_ARGUMENT naming
  // the line (from 0) that does not parse. Every call waits for a free scorer
  // until `deadline` at most (DEADLINE_EXCEEDED past it).
  absl::StatusOr<std::vector<float>> Predict(
      absl::Span<const std::string> lines,
      absl::Time deadline = absl::InfiniteFuture());
  // Per task, one per example (as Predict()), given as features (see
  // proto/serving.proto's Features: `dense` raw values, `fields` each field's
  // keys). INVALID_ARGUMENT naming the example for other counts than the
  // model's.
  struct Features {
    std::vector<double> dense;
    std::vector<std::vector<uint64_t>> fields;
  };
  absl::StatusOr<std::vector<float>> PredictFeatures(
      absl::Span<const Features> examples,
      absl::Time deadline = absl::InfiniteFuture());

  // `keys`' rows of `table` (dim floats each) and whether the export holds
  // each; the dim. NOT_FOUND for a table the model does not have.
  absl::StatusOr<int> Lookup(const std::string& table,
                             absl::Span<const uint64_t> keys,
                             std::vector<float>* values,
                             std::vector<bool>* found,
                             absl::Time deadline = absl::InfiniteFuture());

 private:
  struct Scorer {
    std::unique_ptr<model::ExportedModel> model;
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<model::ModelGraph> graph;
    // The batch each request is prepared into: its buffers are kept from
    // one request to the next.
    std::unique_ptr<model::BatchInputs> inputs;
  };
  // Waits for an idle scorer until `deadline` (DEADLINE_EXCEEDED); gives it
  // back.
  absl::StatusOr<std::unique_ptr<Scorer>> Acquire(absl::Time deadline);
  void Release(std::unique_ptr<Scorer> scorer);
  // Scores parsed examples.
  absl::StatusOr<std::vector<float>> Score(
      const std::vector<model::Example>& examples, absl::Time deadline);

  ServingModel() = default;

  std::string version_;
  model::InputLayout layout_;
  // Per field of layout_, whether it is a seq column's (its keys are cut to
  // the most recent max_sequence_values).
  std::vector<bool> sequence_fields_;
  std::vector<std::string> tasks_;
  int64_t cut_ = 0;
  uint32_t delta_index_ = 0;
  std::string job_;
  absl::Time created_at_;
  absl::Time written_at_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Scorer>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_SERVING_MODEL_H_
