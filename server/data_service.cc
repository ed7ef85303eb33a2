#include "server/data_service.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/packed.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "base/wire_format.h"
#include "server/grpc_status.h"

namespace ps::server {

grpc::ServerUnaryReactor* DataService::Finish(
    grpc::CallbackServerContext* context, CountedReactor* reactor,
    const absl::Status& status) {
  if (!status.ok()) ++counters_.failed_requests;
  // Clients retry an error that goes away on its own (a full disk).
  if (IsTransient(status))
    context->AddTrailingMetadata(kTransientMetadata, "1");
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status DataService::Busy(int64_t bytes) const {
  return MarkTransient(absl::ResourceExhaustedError(
      absl::StrCat("shard busy: a call of ", bytes, " bytes with ",
                   bytes_in_flight_.load() - bytes,
                   " bytes of calls in flight would pass --max_inflight_mb=",
                   options_.max_inflight_bytes >> 20, "; retry later")));
}

absl::Status DataService::CheckKeys(const std::string& packed,
                                    std::vector<uint64_t>* keys) const {
  if (packed.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys must be packed 8-byte integers; got ", packed.size(), " bytes"));
  }
  const size_t count = packed.size() / sizeof(uint64_t);
  if (count > options_.max_keys_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request has ", count, " keys, more than --max_keys_per_request=",
        options_.max_keys_per_request));
  }
  Unpack(packed, keys);
  for (uint64_t key : *keys) {
    const uint32_t owner = ShardForKey(key, options_.num_shards);
    if (owner != options_.shard_index) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key ", key, " belongs to shard ", owner, " of ", options_.num_shards,
          ", not to this shard ", options_.shard_index,
          " (client and server disagree on --num_shards?)"));
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::DeclareTable(
    grpc::CallbackServerContext* context, const DeclareTableRequest* request,
    DeclareTableResponse* response) {
  CountedReactor* reactor = StartCall();
  return Finish(context, reactor, HandleDeclareTable(*request, response));
}

absl::Status DataService::HandleDeclareTable(const DeclareTableRequest& request,
                                             DeclareTableResponse* response) {
  ASSIGN_OR_RETURN(bool created, store_->DeclareTable(request.table()));
  response->set_created(created);
  return absl::OkStatus();
}

absl::Status DataService::HandlePull(const PullRequest& request,
                                     PullResponse* response) {
  std::vector<uint64_t> keys;
  RETURN_IF_ERROR(CheckKeys(request.keys(), &keys));
  ASSIGN_OR_RETURN(TableSpec spec, store_->GetTableSpec(request.table()));
  const size_t value_bytes = WireValueBytes(request.format());
  if (value_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wire format ", request.format()));
  }
  const size_t floats = keys.size() * spec.dim();
  const size_t reply_bytes = floats * value_bytes;
  if (reply_bytes > options_.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pull of ", keys.size(), " rows of dim ", spec.dim(), " would need a ",
        reply_bytes, "-byte reply, more than --max_message_mb allows"));
  }
  std::string* values = response->mutable_values();
  values->resize(reply_bytes);
  if (request.format() == WireFormat::FP32) {
    // Straight into the reply.
    RETURN_IF_ERROR(store_->Pull(
        request.table(), keys,
        absl::MakeSpan(reinterpret_cast<float*>(values->data()), floats)));
  } else {
    std::vector<float> rows(floats);
    RETURN_IF_ERROR(store_->Pull(request.table(), keys, absl::MakeSpan(rows)));
    EncodeWireValues(request.format(), rows, values->data());
  }
  response->set_dim(spec.dim());
  response->set_format(request.format());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::Pull(
    grpc::CallbackServerContext* context, const PullRequest* request,
    PullResponse* response) {
  int64_t bytes = static_cast<int64_t>(request->keys().size());
  if (absl::StatusOr<TableSpec> spec = store_->GetTableSpec(request->table());
      spec.ok()) {
    bytes += static_cast<int64_t>(request->keys().size() / sizeof(uint64_t) *
                                  spec->dim() * sizeof(float));
  }
  CountedReactor* reactor = StartCall(bytes);
  ++counters_.pull_requests;
  if (!reactor->admitted()) return Finish(context, reactor, Busy(bytes));
  return Finish(context, reactor, HandlePull(*request, response));
}

absl::Status DataService::HandlePush(const PushRequest& request,
                                     PushResponse* response) {
  std::vector<uint64_t> keys;
  RETURN_IF_ERROR(CheckKeys(request.keys(), &keys));
  const size_t value_bytes = WireValueBytes(request.format());
  if (value_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wire format ", request.format()));
  }
  if (request.gradients().size() % value_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradients must be packed ", value_bytes, "-byte values; got ",
        request.gradients().size(), " bytes"));
  }
  const float gradient_scale =
      request.gradient_scale() == 0.0f ? 1.0f : request.gradient_scale();
  if (!(gradient_scale > 0.0f) || !std::isfinite(gradient_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a push's gradient scale must be positive and finite, not ",
        request.gradient_scale()));
  }
  std::vector<float> gradients(request.gradients().size() / value_bytes);
  DecodeWireValues(request.format(), request.gradients().data(),
                   absl::MakeSpan(gradients), 1.0f / gradient_scale);
  embedding::PushOrigin origin;
  origin.worker = request.worker();
  origin.incarnation = request.incarnation();
  origin.sequence = request.sequence();
  const float learning_rate_scale = request.learning_rate_scale() == 0.0f
                                        ? 1.0f
                                        : request.learning_rate_scale();
  ASSIGN_OR_RETURN(embedding::PushOutcome outcome,
                   store_->Push(request.table(), keys, gradients, origin,
                                learning_rate_scale));
  response->set_rows_updated(static_cast<uint32_t>(outcome.rows_updated));
  response->set_duplicate(outcome.duplicate);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::Push(
    grpc::CallbackServerContext* context, const PushRequest* request,
    PushResponse* response) {
  const int64_t bytes = static_cast<int64_t>(request->keys().size() +
                                             request->gradients().size());
  CountedReactor* reactor = StartCall(bytes);
  ++counters_.push_requests;
  if (!reactor->admitted()) return Finish(context, reactor, Busy(bytes));
  return Finish(context, reactor, HandlePush(*request, response));
}

grpc::ServerUnaryReactor* DataService::Clock(
    grpc::CallbackServerContext* context, const ClockRequest* request,
    ClockResponse* response) {
  CountedReactor* reactor = StartCall();
  ClockCoordinator::Report report;
  report.worker = request->worker();
  report.incarnation = request->incarnation();
  report.clock = request->clock();
  report.finished = request->finished();
  report.examples = request->examples();
  report.lease = absl::Milliseconds(request->lease_ms());
  absl::StatusOr<ClockCoordinator::View> recorded = clocks_->Record(report);
  if (!recorded.ok()) return Finish(context, reactor, recorded.status());
  const ClockCoordinator::View& view = *recorded;
  response->set_min_clock(view.min_clock);
  response->set_live_workers(view.live_workers);
  response->set_clock(view.clock);
  response->set_hold_at(view.hold_at);
  return Finish(context, reactor, absl::OkStatus());
}

}  // namespace ps::server
