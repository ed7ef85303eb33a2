#include "server/serving_service.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "net/grpc_status.h"

namespace ps::server {
namespace {

grpc::Status NoModel() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "no model loaded yet: --model_dir holds no complete "
                      "export (ps_admin export --dir=MODEL_DIR/NAME)");
}

}  // namespace

grpc::Status ServingService::Observed(absl::string_view method,
                                      absl::Time start,
                                      grpc::Status status) const {
  if (options_.observe)
    options_.observe(method, status.error_code(), absl::Now() - start);
  return status;
}

grpc::Status ServingService::Predict(grpc::ServerContext* context,
                                     const PredictRequest* request,
                                     PredictResponse* response) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = absl::FromChrono(context->deadline());
  if (request->lines_size() > options_.max_lines_per_request) {
    return Observed("Predict", start,
                    grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat(request->lines_size(),
                                              " lines in one Predict; at most ",
                                              options_.max_lines_per_request,
                                              " (--max_lines_per_request)")));
  }
  if (request->lines_size() > 0 && request->examples_size() > 0) {
    return Observed(
        "Predict", start,
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     "a Predict gives lines or examples, not both"));
  }
  if (request->examples_size() > options_.max_lines_per_request) {
    return Observed(
        "Predict", start,
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat(request->examples_size(),
                                  " examples in one Predict; at most ",
                                  options_.max_lines_per_request,
                                  " (--max_lines_per_request)")));
  }
  const std::shared_ptr<ServingModel> model = models_->current();
  if (model == nullptr) return Observed("Predict", start, NoModel());
  absl::StatusOr<std::vector<float>> probabilities;
  if (request->examples_size() > 0) {
    std::vector<ServingModel::Features> examples(request->examples_size());
    for (int i = 0; i < request->examples_size(); ++i) {
      const Features& given = request->examples(i);
      examples[i].dense.assign(given.dense().begin(), given.dense().end());
      for (const FieldKeys& field : given.fields())
        examples[i].fields.emplace_back(field.keys().begin(),
                                        field.keys().end());
    }
    probabilities = model->PredictFeatures(examples, deadline);
  } else {
    const std::vector<std::string> lines(request->lines().begin(),
                                         request->lines().end());
    probabilities = model->Predict(lines, deadline);
  }
  if (!probabilities.ok()) {
    return Observed("Predict", start,
                    net::ToGrpcStatus(probabilities.status()));
  }
  // Task-major: the first task's come first.
  const size_t lines = model->tasks().empty()
                           ? 0
                           : probabilities->size() / model->tasks().size();
  response->mutable_probabilities()->Add(probabilities->begin(),
                                         probabilities->begin() + lines);
  for (size_t t = 0; t < model->tasks().size(); ++t) {
    TaskProbabilities* task = response->add_tasks();
    task->set_task(model->tasks()[t]);
    task->mutable_probabilities()->Add(
        probabilities->begin() + t * lines,
        probabilities->begin() + (t + 1) * lines);
  }
  response->set_model_version(model->version());
  response->set_model_cut(model->cut());
  return Observed("Predict", start, grpc::Status::OK);
}

grpc::Status ServingService::Lookup(grpc::ServerContext* context,
                                    const LookupRequest* request,
                                    LookupResponse* response) {
  const absl::Time start = absl::Now();
  if (request->keys_size() > options_.max_keys_per_request) {
    return Observed("Lookup", start,
                    grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat(request->keys_size(),
                                              " keys in one Lookup; at most ",
                                              options_.max_keys_per_request,
                                              " (--max_keys_per_request)")));
  }
  const std::shared_ptr<ServingModel> model = models_->current();
  if (model == nullptr) return Observed("Lookup", start, NoModel());
  std::vector<float> values;
  std::vector<bool> found;
  absl::StatusOr<int> dim = model->Lookup(
      request->table(),
      absl::MakeConstSpan(request->keys().data(), request->keys().size()),
      &values, &found, absl::FromChrono(context->deadline()));
  if (!dim.ok())
    return Observed("Lookup", start, net::ToGrpcStatus(dim.status()));
  // Over a float's 4 bytes, a found flag's 1 and framing, per value.
  if (static_cast<int64_t>(values.size()) * 5 > options_.max_answer_bytes) {
    return Observed(
        "Lookup", start,
        grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat(request->keys_size(), " rows of ", *dim,
                         " floats are more than an answer may hold (",
                         options_.max_answer_bytes,
                         " bytes, --max_message_mb): ask for fewer keys")));
  }
  response->mutable_values()->Add(values.begin(), values.end());
  for (bool f : found) response->add_found(f);
  response->set_dim(static_cast<uint32_t>(*dim));
  response->set_model_version(model->version());
  response->set_model_cut(model->cut());
  return Observed("Lookup", start, grpc::Status::OK);
}

}  // namespace ps::server
