#include "server/data_service.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/fixed_array.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/packed.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "base/wire_format.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "net/grpc_status.h"
#include "server/bearer_token.h"

namespace ps::server {

using ::ps::net::ToGrpcStatus;

grpc::ServerUnaryReactor* DataService::Finish(
    grpc::CallbackServerContext* context, CountedReactor* reactor,
    const absl::Status& status) {
  if (!status.ok()) ++counters_.failed_requests;
  // Clients retry an error that goes away on its own (a full disk).
  if (IsTransient(status))
    context->AddTrailingMetadata(kTransientMetadata, "1");
  // Clients route again by a newer map (base/slot_map.h).
  if (const std::optional<uint64_t> epoch = MovedEpoch(status))
    context->AddTrailingMetadata(kMovedMetadata, absl::StrCat(*epoch));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status DataService::ReadOnly() const {
  if (options_.fenced_until_registered) {
    return MarkTransient(absl::UnavailableError(options_.read_only));
  }
  return absl::FailedPreconditionError(options_.read_only);
}

absl::Status DataService::Fenced() const {
  if (stopping_.load()) {
    return MarkTransient(absl::UnavailableError(
        "this shard is stopping (its replicas catch up before it lets go of "
        "its place); retry"));
  }
  const cluster::LeasedKey* lease = lease_.load();
  if (lease == nullptr) {
    if (!options_.fenced_until_registered) return absl::OkStatus();
    return MarkTransient(absl::UnavailableError(
        "this shard is not registered in etcd yet; retry"));
  }
  if (lease->held()) return absl::OkStatus();
  return MarkTransient(absl::UnavailableError(
      "this shard's etcd lease ran out (a pause, or etcd out of reach): it "
      "takes no push until it holds its key again, which a replica may have "
      "taken over; retry (workers look the shard up again)"));
}

absl::Status DataService::Busy(int64_t bytes) const {
  return MarkTransient(absl::ResourceExhaustedError(
      absl::StrCat("shard busy: a call of ", bytes, " bytes with ",
                   bytes_in_flight_.load() - bytes,
                   " bytes of calls in flight would pass --max_inflight_mb=",
                   options_.max_inflight_bytes >> 20, "; retry later")));
}

absl::Status DataService::CheckKeyBytes(size_t packed_bytes) const {
  if (packed_bytes % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys must be packed 8-byte integers; got ", packed_bytes, " bytes"));
  }
  const size_t count = packed_bytes / sizeof(uint64_t);
  if (count > options_.max_keys_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request has ", count, " keys, more than --max_keys_per_request=",
        options_.max_keys_per_request));
  }
  return absl::OkStatus();
}

absl::Status DataService::CheckKeys(const std::string& packed,
                                    uint64_t slot_map_epoch,
                                    std::vector<uint64_t>* keys) const {
  RETURN_IF_ERROR(CheckKeyBytes(packed.size()));
  Unpack(packed, keys);
  return CheckOwnership(*keys, slot_map_epoch);
}

absl::Status DataService::CheckOwnership(absl::Span<const uint64_t> keys,
                                         uint64_t slot_map_epoch) const {
  const std::shared_ptr<const SlotMap> map = slots_->current();
  if (slot_map_epoch > map->epoch()) {
    return MarkTransient(absl::UnavailableError(
        absl::StrCat("this shard routes by slot map epoch ", map->epoch(),
                     ", older than the client's epoch ", slot_map_epoch,
                     "; retry once the shard has the new map")));
  }
  for (uint64_t key : keys) {
    const uint32_t owner = map->ShardForKey(key);
    if (owner != options_.shard_index) {
      return SlotMovedError(
          absl::StrCat("key ", key, " (slot ", SlotForKey(key),
                       ") belongs to shard ", owner, " by slot map epoch ",
                       map->epoch(), ", not to this shard ",
                       options_.shard_index),
          map->epoch());
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::DeclareTable(
    grpc::CallbackServerContext* context, const DeclareTableRequest* request,
    DeclareTableResponse* response) {
  CountedReactor* reactor = StartCall();
  if (absl::Status authorized =
          CheckBearerToken(*context, options_.worker_token,
                           "the worker token (ps_worker --worker_token_file)");
      !authorized.ok()) {
    return Finish(context, reactor, authorized);
  }
  if (read_only_.load()) return Finish(context, reactor, ReadOnly());
  return Finish(context, reactor, HandleDeclareTable(*request, response));
}

absl::Status DataService::HandleDeclareTable(const DeclareTableRequest& request,
                                             DeclareTableResponse* response) {
  ASSIGN_OR_RETURN(bool created,
                   store_->tables().DeclareTable(request.table()));
  response->set_created(created);
  ASSIGN_OR_RETURN(embedding::TableOptimizer optimizer,
                   store_->tables().GetTableOptimizer(request.table().name()));
  response->set_row_floats(request.table().dim() +
                           static_cast<uint32_t>(optimizer.state_floats));
  return absl::OkStatus();
}

namespace {

// A PullResponse in protobuf's wire format, fields in number order as
// protobuf writes them: dim, then `values_bytes` bytes of values (left for
// the caller to fill, at *values_offset, 64-byte aligned so that they can be
// written as floats), then format unless FP32 (the default, which protobuf
// leaves out). REQUIRES: values_bytes < 2^32.
grpc::Slice PullReplySlice(size_t values_bytes, uint32_t dim, WireFormat format,
                           size_t* values_offset) {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  const uint32_t dim_tag = WireFormatLite::MakeTag(
      PullResponse::kDimFieldNumber, WireFormatLite::WIRETYPE_VARINT);
  const uint32_t values_tag =
      WireFormatLite::MakeTag(PullResponse::kValuesFieldNumber,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const uint32_t format_tag = WireFormatLite::MakeTag(
      PullResponse::kFormatFieldNumber, WireFormatLite::WIRETYPE_VARINT);
  const uint32_t length = static_cast<uint32_t>(values_bytes);
  size_t head = 0;
  if (dim != 0) {
    head += CodedOutputStream::VarintSize32(dim_tag) +
            CodedOutputStream::VarintSize32(dim);
  }
  if (length != 0) {
    head += CodedOutputStream::VarintSize32(values_tag) +
            CodedOutputStream::VarintSize32(length);
  }
  const uint32_t format_value = static_cast<uint32_t>(format);
  const size_t tail = format_value == 0
                          ? 0
                          : CodedOutputStream::VarintSize32(format_tag) +
                                CodedOutputStream::VarintSize32(format_value);
  // Uninitialised, and unshared until sent; the reply starts where its
  // values land 64-byte aligned (a sub-slice shares the memory).
  constexpr size_t kAlign = 64;
  const size_t total = head + values_bytes + tail;
  grpc::Slice padded(total + kAlign);
  const size_t pad =
      (kAlign - (reinterpret_cast<uintptr_t>(padded.begin()) + head) % kAlign) %
      kAlign;
  grpc::Slice slice = padded.sub(pad, pad + total);
  uint8_t* cursor = const_cast<uint8_t*>(slice.begin());
  if (dim != 0) {
    cursor = CodedOutputStream::WriteVarint32ToArray(dim_tag, cursor);
    cursor = CodedOutputStream::WriteVarint32ToArray(dim, cursor);
  }
  if (length != 0) {
    cursor = CodedOutputStream::WriteVarint32ToArray(values_tag, cursor);
    cursor = CodedOutputStream::WriteVarint32ToArray(length, cursor);
  }
  *values_offset = static_cast<size_t>(cursor - slice.begin());
  cursor += values_bytes;
  if (format_value != 0) {
    cursor = CodedOutputStream::WriteVarint32ToArray(format_tag, cursor);
    CodedOutputStream::WriteVarint32ToArray(format_value, cursor);
  }
  return slice;
}

}  // namespace

absl::Status DataService::PullInto(
    const PullRequest& request,
    absl::FunctionRef<char*(size_t values_bytes, uint32_t dim)> allocate) {
  std::vector<uint64_t> keys;
  RETURN_IF_ERROR(CheckKeys(request.keys(), request.slot_map_epoch(), &keys));
  ASSIGN_OR_RETURN(TableSpec spec,
                   store_->tables().GetTableSpec(request.table()));
  const size_t value_bytes = WireValueBytes(request.format());
  if (value_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wire format ", request.format()));
  }
  const size_t floats = keys.size() * spec.dim();
  const size_t reply_bytes = floats * value_bytes;
  // The reply's fields besides the values take at most 16 bytes.
  RETURN_IF_ERROR(CheckReplySize(
      reply_bytes, 16, absl::StrCat(keys.size(), " rows of dim ", spec.dim())));
  char* values = allocate(reply_bytes, spec.dim());
  // A tiny reply (gRPC keeps up to 23 bytes inside the slice) may be
  // unaligned: its rows go through `rows` below.
  if (request.format() == WireFormat::FP32 &&
      reinterpret_cast<uintptr_t>(values) % alignof(float) == 0) {
    // Straight into the reply.
    return store_->Pull(
        request.table(), keys,
        absl::MakeSpan(reinterpret_cast<float*>(values), floats));
  }
  std::vector<float> rows(floats);
  RETURN_IF_ERROR(store_->Pull(request.table(), keys, absl::MakeSpan(rows)));
  EncodeWireValues(request.format(), rows, values);
  return absl::OkStatus();
}

absl::Status DataService::CheckReplySize(size_t payload_bytes,
                                         size_t other_fields_bytes,
                                         absl::string_view rows) const {
  // gRPC sends no message over 2 GiB.
  const size_t max_reply_bytes = std::min<size_t>(
      options_.max_message_bytes, std::numeric_limits<int32_t>::max());
  if (payload_bytes + other_fields_bytes > max_reply_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull of ", rows, " would need a ", payload_bytes,
                     "-byte reply, more than --max_message_mb allows"));
  }
  return absl::OkStatus();
}

absl::Status DataService::PullWithState(
    const PullRequest& request, PullResponse* response,
    absl::FunctionRef<char*(size_t values_bytes)> allocate) {
  std::vector<uint64_t> keys;
  RETURN_IF_ERROR(CheckKeys(request.keys(), request.slot_map_epoch(), &keys));
  if (request.format() != WireFormat::FP32) {
    return absl::InvalidArgumentError(
        "a pull with optimizer state replies in FP32 only");
  }
  ASSIGN_OR_RETURN(TableSpec spec,
                   store_->tables().GetTableSpec(request.table()));
  ASSIGN_OR_RETURN(embedding::TableOptimizer optimizer,
                   store_->tables().GetTableOptimizer(request.table()));
  const size_t row_floats = spec.dim() + optimizer.state_floats;
  const size_t reply_bytes = keys.size() * row_floats * sizeof(float);
  // The optimizer spec and the other fields take well under 256 bytes.
  RETURN_IF_ERROR(
      CheckReplySize(reply_bytes, 256,
                     absl::StrCat(keys.size(), " rows of ", row_floats,
                                  " floats (weights and optimizer state)")));
  RETURN_IF_ERROR(store_->PullWithState(
      request.table(), keys,
      absl::MakeSpan(reinterpret_cast<float*>(allocate(reply_bytes)),
                     keys.size() * row_floats)));
  response->set_dim(spec.dim());
  response->set_state_floats(optimizer.state_floats);
  *response->mutable_optimizer() = optimizer.spec;
  response->set_learning_rate_multiplier(optimizer.learning_rate_multiplier);
  return absl::OkStatus();
}

absl::Status DataService::HandlePull(const PullRequest& request,
                                     PullResponse* response) {
  if (request.with_state()) {
    return PullWithState(request, response, [response](size_t values_bytes) {
      std::string* values = response->mutable_values();
      values->resize(values_bytes);
      return values->data();
    });
  }
  RETURN_IF_ERROR(
      PullInto(request, [response](size_t values_bytes, uint32_t dim) {
        response->set_dim(dim);
        std::string* values = response->mutable_values();
        values->resize(values_bytes);
        return values->data();
      }));
  response->set_format(request.format());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response) {
  PullRequest request;
  // Shares the request's slices; Deserialize() consumes its argument.
  grpc::ByteBuffer request_copy(*request_bytes);
  const bool parsed = grpc::SerializationTraits<PullRequest>::Deserialize(
                          &request_copy, &request)
                          .ok();
  int64_t bytes = 0;
  if (absl::StatusOr<TableSpec> spec =
          store_->tables().GetTableSpec(request.table());
      parsed && spec.ok()) {
    // The reply in the request's wire format (an unknown one is refused),
    // with optimizer state: dim + state floats a row.
    size_t values_per_row = spec->dim();
    if (request.with_state()) {
      if (auto optimizer = store_->tables().GetTableOptimizer(request.table());
          optimizer.ok()) {
        values_per_row += optimizer->state_floats;
      }
    }
    bytes = static_cast<int64_t>(request.keys().size() +
                                 request.keys().size() / sizeof(uint64_t) *
                                     values_per_row *
                                     WireValueBytes(request.format()));
  }
  CountedReactor* reactor = StartCall(bytes);
  ++counters_.pull_requests;
  if (!parsed) {
    return Finish(context, reactor,
                  absl::InvalidArgumentError(
                      "a pull request that is not a ps.PullRequest"));
  }
  if (!reactor->admitted()) return Finish(context, reactor, Busy(bytes));
  if (request.with_state()) {
    // The other fields, then the rows' tag and length, in one slice; the
    // rows in a second, which takes the store's buffer over.
    PullResponse fields;
    std::unique_ptr<float[]> rows;
    size_t rows_bytes = 0;
    const absl::Status pulled =
        PullWithState(request, &fields, [&](size_t values_bytes) {
          rows_bytes = values_bytes;
          rows.reset(new float[values_bytes / sizeof(float)]);
          return reinterpret_cast<char*>(rows.get());
        });
    if (pulled.ok()) {
      std::string head = fields.SerializeAsString();
      grpc::Slice slices[2];
      size_t count = 1;
      if (rows_bytes > 0) {
        using google::protobuf::internal::WireFormatLite;
        using google::protobuf::io::CodedOutputStream;
        uint8_t tag_and_length[10];
        uint8_t* end = CodedOutputStream::WriteVarint32ToArray(
            WireFormatLite::MakeTag(PullResponse::kValuesFieldNumber,
                                    WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
            tag_and_length);
        end = CodedOutputStream::WriteVarint32ToArray(
            static_cast<uint32_t>(rows_bytes), end);
        head.append(reinterpret_cast<const char*>(tag_and_length),
                    static_cast<size_t>(end - tag_and_length));
        float* taken = rows.release();
        slices[1] = grpc::Slice(
            taken, rows_bytes,
            [](void* buffer) { delete[] static_cast<float*>(buffer); }, taken);
        count = 2;
      }
      slices[0] = grpc::Slice(head);
      *response = grpc::ByteBuffer(slices, count);
    }
    return Finish(context, reactor, pulled);
  }
  grpc::Slice reply;
  size_t values_offset = 0;
  const absl::Status pulled =
      PullInto(request, [&](size_t values_bytes, uint32_t dim) {
        reply =
            PullReplySlice(values_bytes, dim, request.format(), &values_offset);
        return reinterpret_cast<char*>(const_cast<uint8_t*>(reply.begin())) +
               values_offset;
      });
  if (pulled.ok()) *response = grpc::ByteBuffer(&reply, 1);
  return Finish(context, reactor, pulled);
}

namespace {

// The scale a push's gradients were multiplied by before sending (0 on the
// wire: none).
float GradientScale(const PushRequest& request) {
  return request.gradient_scale() == 0.0f ? 1.0f : request.gradient_scale();
}

// How many values a push's gradients hold; INVALID_ARGUMENT for an unknown
// wire format, bytes that are not whole values, or a scale that is not
// positive and finite.
absl::StatusOr<size_t> CheckGradients(const ReceivedPush& push) {
  const PushRequest& request = push.fields();
  const size_t value_bytes = WireValueBytes(request.format());
  if (value_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown wire format ", request.format()));
  }
  if (push.gradients_bytes() % value_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradients must be packed ", value_bytes,
                     "-byte values; got ", push.gradients_bytes(), " bytes"));
  }
  const float gradient_scale = GradientScale(request);
  if (!(gradient_scale > 0.0f) || !std::isfinite(gradient_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a push's gradient scale must be positive and finite, not ",
        request.gradient_scale()));
  }
  return push.gradients_bytes() / value_bytes;
}

}  // namespace

absl::Status DataService::HandlePush(const ReceivedPush& push,
                                     PushResponse* response) {
  const PushRequest& request = push.fields();
  embedding::PushOrigin origin;
  origin.worker = request.worker();
  origin.incarnation = request.incarnation();
  origin.sequence = request.sequence();
  // Held from the ownership check until the push is applied: the map does
  // not change under a push (a change waits for the pushes in flight).
  absl::ReaderMutexLock owned(&slots_->push_lock());
  std::vector<uint64_t> keys;
  absl::Status routed = CheckKeyBytes(push.keys_bytes());
  if (routed.ok()) {
    push.UnpackKeys(&keys);
    routed = CheckOwnership(keys, request.slot_map_epoch());
  }
  if (MovedEpoch(routed).has_value() && origin.tracked()) {
    // A retry of a push applied here before its keys moved (its first
    // answer was lost): answered, so that the client does not apply it
    // again where the keys are now.
    ASSIGN_OR_RETURN(const std::optional<uint32_t> rows,
                     store_->ledger().AppliedPush(origin));
    if (rows.has_value()) {
      response->set_rows_updated(*rows);
      response->set_duplicate(true);
      return absl::OkStatus();
    }
  }
  RETURN_IF_ERROR(routed);
  for (const PushRequest::MovedFrom& moved : request.moved_from()) {
    if (!origin.tracked()) break;
    // Sent here because its keys moved from a shard it went to before: if
    // that shard had applied it (its answer lost), a move brought its
    // ledger, and the rows its effect.
    embedding::PushOrigin there = origin;
    there.sequence = moved.sequence();
    ASSIGN_OR_RETURN(const std::optional<uint32_t> rows,
                     store_->ledger().MovedPushApplied(moved.shard(), there));
    if (rows.has_value()) {
      // This part's keys (the first answer counted the whole push's).
      std::vector<uint64_t> distinct = keys;
      std::sort(distinct.begin(), distinct.end());
      response->set_rows_updated(static_cast<uint32_t>(
          std::unique(distinct.begin(), distinct.end()) - distinct.begin()));
      response->set_duplicate(true);
      return absl::OkStatus();
    }
  }
  if (!moves_->Admit(keys)) {
    // Its retry may come after later pushes (see Push()).
    if (origin.tracked()) store_->ledger().NoteRefusedPush(origin);
    return MarkTransient(absl::UnavailableError(
        absl::StrCat("this shard's ", moves_->Describe(),
                     ": their pushes wait until the move ends; retry")));
  }
  ASSIGN_OR_RETURN(const size_t gradient_count, CheckGradients(push));
  // Not zeroed first (a FixedArray of floats is left uninitialized): every
  // value is written by the decode, and a dim-64 push's megabyte of zeros
  // was 2% of the shard's CPU.
  absl::FixedArray<float> gradients(gradient_count);
  push.DecodeGradients(request.format(), 1.0f / GradientScale(request),
                       absl::MakeSpan(gradients));
  const float learning_rate_scale = request.learning_rate_scale() == 0.0f
                                        ? 1.0f
                                        : request.learning_rate_scale();
  absl::StatusOr<embedding::PushOutcome> pushed = store_->Push(
      request.table(), keys, gradients, origin, learning_rate_scale);
  // Rows a move must copy again: those of a table there is (a failed push
  // may have changed rows in memory); an unknown table changed nothing.
  if (!absl::IsNotFound(pushed.status())) moves_->Record(request.table(), keys);
  ASSIGN_OR_RETURN(const embedding::PushOutcome outcome, std::move(pushed));
  response->set_rows_updated(static_cast<uint32_t>(outcome.rows_updated));
  response->set_duplicate(outcome.duplicate);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DataService::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  absl::StatusOr<ReceivedPush> push = ReceivedPush::Read(*request_bytes);
  const int64_t bytes = static_cast<int64_t>(request_bytes->Length());
  CountedReactor* reactor = StartCall(bytes);
  ++counters_.push_requests;
  if (!push.ok()) return Finish(context, reactor, push.status());
  const PushRequest* request = &push->fields();
  if (!reactor->admitted()) {
    // Its retry may come after many later pushes: the ledger must know it
    // was refused, not forget it as an old sequence it never saw.
    if (request->incarnation() != 0) {
      embedding::PushOrigin origin;
      origin.worker = request->worker();
      origin.incarnation = request->incarnation();
      origin.sequence = request->sequence();
      store_->ledger().NoteRefusedPush(origin);
    }
    return Finish(context, reactor, Busy(bytes));
  }
  if (read_only_.load()) return Finish(context, reactor, ReadOnly());
  if (absl::Status fenced = Fenced(); !fenced.ok()) {
    return Finish(context, reactor, fenced);
  }
  if (absl::Status in_sync = EnoughReplicasInSync(); !in_sync.ok()) {
    return Finish(context, reactor, in_sync);
  }
  PushResponse response;
  absl::Status status = HandlePush(*push, &response);
  // Never acknowledged once the lease is gone (the process may have been
  // paused between the check above and now): a replica may have taken
  // over, where the retry goes.
  if (status.ok()) status = Fenced();
  if (status.ok()) {
    // Sent only if the call ends OK, which a replica's answer may yet deny.
    grpc::Slice reply(response.SerializeAsString());
    *response_bytes = grpc::ByteBuffer(&reply, 1);
  }
  embedding::ReplicationFeed* feed = options_.feed;
  if (!status.ok() || feed == nullptr) return Finish(context, reactor, status);
  // Answered once the replicas have it (a duplicate: once they have the
  // push it repeats, which is at or before the head now), without holding
  // a gRPC thread meanwhile.
  feed->WhenReplicated(
      feed->head(), options_.sync_replication, options_.min_in_sync_replicas,
      options_.max_replication_lag, absl::Now() + options_.replication_wait,
      [this, context, reactor](embedding::ReplicationFeed::Replicated done) {
        using Replicated = embedding::ReplicationFeed::Replicated;
        absl::Status answer;
        if (done == Replicated::kTooFewInSync &&
            options_.min_in_sync_replicas == 0) {
          ++counters_.pushes_without_replica;
        } else if (done == Replicated::kTooFewInSync) {
          ++counters_.pushes_refused_too_few_in_sync;
          answer = MarkTransient(absl::UnavailableError(absl::StrCat(
              "the push is applied on this shard, but fewer than ",
              options_.min_in_sync_replicas,
              " replicas (--min_in_sync_replicas) were in sync to confirm "
              "it; retry: the retry is answered once enough have it")));
        } else if (done == Replicated::kTimedOut) {
          ++counters_.pushes_replication_timed_out;
          LOG_EVERY_N(WARNING, 100)
              << "a push waited "
              << absl::FormatDuration(options_.replication_wait)
              << " for its replicas (or the shard stops); answered "
                 "UNAVAILABLE";
          answer = MarkTransient(absl::UnavailableError(absl::StrCat(
              "the push is applied on this shard, but its replicas did not "
              "confirm it within ",
              absl::FormatDuration(options_.replication_wait),
              " (--replica_timeout_ms); retry: the retry is answered once "
              "they have it")));
        }
        if (answer.ok()) answer = Fenced();
        Finish(context, reactor, answer);
      });
  return reactor;
}

absl::Status DataService::EnoughReplicasInSync() {
  embedding::ReplicationFeed* feed = options_.feed;
  if (feed == nullptr || options_.min_in_sync_replicas == 0) {
    return absl::OkStatus();
  }
  const uint32_t in_sync = feed->GetStats().in_sync;
  if (in_sync >= options_.min_in_sync_replicas) return absl::OkStatus();
  ++counters_.pushes_refused_too_few_in_sync;
  LOG_EVERY_N(WARNING, 100)
      << in_sync << " replicas in sync, fewer than --min_in_sync_replicas="
      << options_.min_in_sync_replicas << ": pushes are refused";
  return MarkTransient(absl::UnavailableError(absl::StrCat(
      in_sync, " of this shard's replicas are in sync, fewer than the ",
      options_.min_in_sync_replicas,
      " a push needs (--min_in_sync_replicas): nothing was applied; retry")));
}

grpc::ServerUnaryReactor* DataService::Clock(
    grpc::CallbackServerContext* context, const ClockRequest* request,
    ClockResponse* response) {
  CountedReactor* reactor = StartCall();
  if (absl::Status authorized =
          CheckBearerToken(*context, options_.worker_token,
                           "the worker token (ps_worker --worker_token_file)");
      !authorized.ok()) {
    return Finish(context, reactor, authorized);
  }
  if (read_only_.load()) return Finish(context, reactor, ReadOnly());
  ClockCoordinator::Report report;
  report.worker = request->worker();
  report.incarnation = request->incarnation();
  report.clock = request->clock();
  report.finished = request->finished();
  report.examples = request->examples();
  report.input_position.file = request->input_position().file();
  report.input_position.file_examples =
      request->input_position().file_examples();
  report.leaving = request->leaving();
  report.resume = request->resume();
  report.assign_incarnation = request->assign_incarnation();
  report.idle = request->idle();
  report.lease = absl::Milliseconds(request->lease_ms());
  absl::StatusOr<ClockCoordinator::View> recorded = clocks_->Record(report);
  if (!recorded.ok()) return Finish(context, reactor, recorded.status());
  const ClockCoordinator::View& view = *recorded;
  response->set_min_clock(view.min_clock);
  response->set_live_workers(view.live_workers);
  response->set_finished_workers(view.finished_workers);
  response->set_clock(view.clock);
  response->set_hold_at(view.hold_at);
  response->set_examples(view.examples);
  if (!view.input_position.file.empty()) {
    response->mutable_input_position()->set_file(view.input_position.file);
    response->mutable_input_position()->set_file_examples(
        view.input_position.file_examples);
  }
  response->set_resumed(view.resumed);
  if (request->assign_incarnation())
    response->set_incarnation(view.incarnation);
  return Finish(context, reactor, absl::OkStatus());
}

grpc::ServerUnaryReactor* DataService::GetSlotMap(
    grpc::CallbackServerContext* context, const GetSlotMapRequest*,
    GetSlotMapResponse* response) {
  CountedReactor* reactor = StartCall();
  *response->mutable_slot_map() = slots_->current()->ToSpec();
  response->set_shard_index(options_.shard_index);
  return Finish(context, reactor, absl::OkStatus());
}

}  // namespace ps::server
