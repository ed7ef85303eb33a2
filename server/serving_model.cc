#include "server/serving_model.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "worker/input/line_parser.h"
#include "worker/model_inputs.h"

namespace ps::server {

absl::StatusOr<std::unique_ptr<ServingModel>> ServingModel::Open(
    const std::string& dir, int scorers) {
  auto serving = std::unique_ptr<ServingModel>(new ServingModel());
  for (int i = 0; i < std::max(1, scorers); ++i) {
    auto scorer = std::make_unique<Scorer>();
    ASSIGN_OR_RETURN(scorer->model, worker::ExportedModel::Open(dir));
    kernels::CpuOptions cpu;
    cpu.threads = 1;
    if (const kernels::Status created =
            kernels::NewCpuBackend(cpu, &scorer->backend);
        !created.ok()) {
      return absl::InternalError(
          absl::StrCat("the CPU backend: ", created.message()));
    }
    scorer->ctr = std::make_unique<kernels::CtrModel>(scorer->model->config(),
                                                      scorer->backend.get());
    absl::MutexLock lock(&serving->mu_);
    serving->idle_.push_back(std::move(scorer));
  }
  const ExportManifest& manifest = serving->idle_[0]->model->manifest();
  serving->version_ = std::filesystem::path(dir).filename().string();
  serving->cut_ = manifest.cut();
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, manifest.created_at(),
                       &serving->created_at_, &error)) {
    serving->created_at_ = absl::Now();
  }
  return serving;
}

std::unique_ptr<ServingModel::Scorer> ServingModel::Acquire() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::vector<std::unique_ptr<Scorer>>* idle) {
        return !idle->empty();
      },
      &idle_));
  std::unique_ptr<Scorer> scorer = std::move(idle_.back());
  idle_.pop_back();
  return scorer;
}

void ServingModel::Release(std::unique_ptr<Scorer> scorer) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(scorer));
}

absl::StatusOr<std::vector<float>> ServingModel::Predict(
    absl::Span<const std::string> lines) {
  std::unique_ptr<Scorer> scorer = Acquire();
  const worker::ExportedModel& model = *scorer->model;
  absl::Status status;
  std::vector<worker::Example> examples(lines.size());
  for (size_t i = 0; i < lines.size() && status.ok(); ++i) {
    status = worker::ParseLine(lines[i], model.layout(), &examples[i],
                               worker::LabelColumn::kOptional);
    if (!status.ok()) {
      status = absl::InvalidArgumentError(
          absl::StrCat("line ", i, ": ", status.message()));
    }
  }
  std::vector<float> probabilities;
  if (status.ok() && !examples.empty()) {
    const int embedding_dim =
        model.config().kind == kernels::ModelKind::kLogisticRegression
            ? 0
            : model.config().embedding_dim;
    worker::ModelInputs inputs;
    inputs.Prepare(examples, model.layout(), embedding_dim);
    status = scorer->model->Fetch(&inputs);
    if (status.ok()) {
      status = worker::FromKernels(
          scorer->ctr->Predict(inputs.Step(), &probabilities));
    }
  }
  Release(std::move(scorer));
  RETURN_IF_ERROR(status);
  return probabilities;
}

absl::StatusOr<int> ServingModel::Lookup(const std::string& table,
                                         absl::Span<const uint64_t> keys,
                                         std::vector<float>* values,
                                         std::vector<bool>* found) {
  std::unique_ptr<Scorer> scorer = Acquire();
  absl::StatusOr<int> dim =
      scorer->model->LookupRows(table, keys, values, found);
  Release(std::move(scorer));
  return dim;
}

}  // namespace ps::server
