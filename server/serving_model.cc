#include "server/serving_model.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "model/batch_inputs.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"
#include "model/input/line_parser.h"

namespace ps::server {

absl::StatusOr<std::unique_ptr<ServingModel>> ServingModel::Open(
    const std::string& dir, int scorers,
    const model::ExportedModelOptions& options) {
  auto serving = std::unique_ptr<ServingModel>(new ServingModel());
  // The first scorer's tables in memory are every scorer's (the scorers
  // are kept, and this one with them, as long as the model).
  const model::ExportedModel* first = nullptr;
  for (int i = 0; i < std::max(1, scorers); ++i) {
    auto scorer = std::make_unique<Scorer>();
    ASSIGN_OR_RETURN(scorer->model,
                     model::ExportedModel::Open(dir, options, first));
    if (first == nullptr) first = scorer->model.get();
    kernels::CpuOptions cpu;
    cpu.threads = 1;
    if (const kernels::Status created =
            kernels::NewCpuBackend(cpu, &scorer->backend);
        !created.ok()) {
      return absl::InternalError(
          absl::StrCat("the CPU backend: ", created.message()));
    }
    scorer->graph = std::make_unique<model::ModelGraph>(&scorer->model->plan(),
                                                        scorer->backend.get());
    scorer->inputs = std::make_unique<model::BatchInputs>(
        &scorer->model->plan(), first->layout());
    absl::MutexLock lock(&serving->mu_);
    serving->idle_.push_back(std::move(scorer));
  }
  const ExportManifest& manifest = first->manifest();
  serving->version_ = std::filesystem::path(dir).filename().string();
  serving->layout_ = first->layout();
  for (int f = 0; f < serving->layout_.fields(); ++f) {
    serving->sequence_fields_.push_back(serving->layout_.field_kind(f) ==
                                        model::ColumnKind::kSequence);
  }
  for (const model::PlanTask& task : first->plan().tasks())
    serving->tasks_.push_back(task.name);
  serving->cut_ = manifest.cut();
  serving->delta_index_ = manifest.delta_index();
  serving->job_ = manifest.job();
  serving->written_at_ = ExportWrittenAt(manifest);
  serving->created_at_ = serving->written_at_;
  if (serving->created_at_ == absl::InfinitePast()) {
    LOG(WARNING) << dir << ": created_at \"" << manifest.created_at()
                 << "\" does not read: its age is counted from now";
    serving->created_at_ = absl::Now();
  }
  return serving;
}

absl::StatusOr<std::unique_ptr<ServingModel::Scorer>> ServingModel::Acquire(
    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(
          absl::Condition(
              +[](std::vector<std::unique_ptr<Scorer>>* idle) {
                return !idle->empty();
              },
              &idle_),
          deadline)) {
    return absl::DeadlineExceededError(
        "every scorer was busy until the call's deadline (--scorers)");
  }
  std::unique_ptr<Scorer> scorer = std::move(idle_.back());
  idle_.pop_back();
  return scorer;
}

void ServingModel::Release(std::unique_ptr<Scorer> scorer) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(scorer));
}

absl::StatusOr<std::vector<float>> ServingModel::Predict(
    absl::Span<const std::string> lines, absl::Time deadline) {
  if (layout_.tfrecord) {
    return absl::InvalidArgumentError(
        "this model reads TFRecord records (--format=tfrecord), not lines: "
        "send examples (each one's dense values and fields' keys)");
  }
  std::vector<model::Example> examples(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (absl::Status parsed = model::ParseLine(lines[i], layout_, &examples[i],
                                               model::LabelColumn::kOptional);
        !parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i, ": ", parsed.message()));
    }
  }
  return Score(examples, deadline);
}

absl::StatusOr<std::vector<float>> ServingModel::PredictFeatures(
    absl::Span<const Features> given, absl::Time deadline) {
  const size_t dense = static_cast<size_t>(layout_.dense_features());
  const size_t fields = static_cast<size_t>(layout_.fields());
  std::vector<model::Example> examples(given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    const Features& features = given[i];
    if (features.dense.size() != dense || features.fields.size() != fields) {
      return absl::InvalidArgumentError(absl::StrCat(
          "example ", i, ": ", features.dense.size(), " dense values and ",
          features.fields.size(), " fields, but the model reads ", dense,
          " and ", fields, " (", model::LayoutText(layout_), ")"));
    }
    model::Example& example = examples[i];
    example.has_label = false;
    for (double value : features.dense) {
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("example ", i, ": a dense value is not finite"));
      }
      example.dense.push_back(value);
    }
    for (size_t f = 0; f < fields; ++f) {
      absl::Span<const uint64_t> keys = features.fields[f];
      // A history keeps its most recent values, as a line's seq column; a
      // multi field over the reading limit is refused, as a line's.
      if (sequence_fields_[f]) {
        const size_t kept = static_cast<size_t>(layout_.max_sequence_values);
        if (keys.size() > kept) keys.remove_prefix(keys.size() - kept);
      } else if (keys.size() >
                 static_cast<size_t>(layout_.max_values_per_field)) {
        return absl::InvalidArgumentError(
            absl::StrCat("example ", i, ": field ", f, " has ", keys.size(),
                         " values, more than ", layout_.max_values_per_field,
                         " (a multi field's most)"));
      }
      if (keys.empty()) {
        // Missing: the key a line's empty field gives (a seq:F field's is
        // field F's).
        example.keys.push_back(model::FeatureKey(layout_.KeyField(f), ""));
      } else {
        example.keys.insert(example.keys.end(), keys.begin(), keys.end());
      }
      example.slot_end.push_back(example.keys.size());
    }
    if (absl::Status crossed = model::AddCrosses(layout_, &example);
        !crossed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, ": ", crossed.message()));
    }
  }
  return Score(examples, deadline);
}

absl::StatusOr<std::vector<float>> ServingModel::Score(
    const std::vector<model::Example>& examples, absl::Time deadline) {
  std::vector<float> probabilities;
  if (examples.empty()) return probabilities;
  ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, Acquire(deadline));
  model::BatchInputs& inputs = *scorer->inputs;
  inputs.Prepare(examples);
  absl::Status status = scorer->model->Fetch(&inputs);
  if (status.ok()) {
    status = scorer->graph->Predict(inputs.Inputs(), &probabilities);
  }
  Release(std::move(scorer));
  RETURN_IF_ERROR(status);
  return probabilities;
}

absl::StatusOr<int> ServingModel::Lookup(const std::string& table,
                                         absl::Span<const uint64_t> keys,
                                         std::vector<float>* values,
                                         std::vector<bool>* found,
                                         absl::Time deadline) {
  ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, Acquire(deadline));
  absl::StatusOr<int> dim =
      scorer->model->LookupRows(table, keys, values, found);
  Release(std::move(scorer));
  return dim;
}

}  // namespace ps::server
