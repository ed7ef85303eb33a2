#include "client/router.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/pull_reply.h"

namespace ps::client {

using TableRows = TrainingClient::TableRows;
using TableGradients = TrainingClient::TableGradients;

std::vector<RoutedChunk> Route(absl::Span<const uint64_t> keys,
                               absl::Span<const uint32_t> positions,
                               const SlotMap& map, uint32_t max_keys) {
  const int num_shards = static_cast<int>(map.num_shards());
  std::vector<std::vector<uint32_t>> by_shard(num_shards);
  for (uint32_t i : positions) by_shard[map.ShardForKey(keys[i])].push_back(i);
  std::vector<RoutedChunk> chunks;
  for (int shard = 0; shard < num_shards; ++shard) {
    const std::vector<uint32_t>& in_shard = by_shard[shard];
    for (size_t start = 0; start < in_shard.size(); start += max_keys) {
      const size_t end = std::min(in_shard.size(), start + max_keys);
      chunks.push_back({shard, std::vector<uint32_t>(in_shard.begin() + start,
                                                     in_shard.begin() + end)});
    }
  }
  return chunks;
}

std::vector<uint32_t> AllPositions(size_t count) {
  std::vector<uint32_t> positions(count);
  for (uint32_t i = 0; i < count; ++i) positions[i] = i;
  return positions;
}

namespace {

// Keys per request of `pull`: rows with state are larger.
uint32_t MaxKeysPerPullRequest(const TableRows& pull,
                               uint32_t max_keys_per_request) {
  if (pull.optimizer == nullptr) return max_keys_per_request;
  return std::max<uint32_t>(
      1, static_cast<uint32_t>(uint64_t{max_keys_per_request} *
                               std::max(pull.dim, 1) /
                               (std::max(pull.dim, 1) + pull.state_floats)));
}

// Writes the keys at `positions` of `keys` into `packed`, 8 bytes each in
// host order.
void PackKeys(absl::Span<const uint64_t> keys,
              const std::vector<uint32_t>& positions, std::string* packed) {
  packed->resize(positions.size() * sizeof(uint64_t));
  char* cursor = packed->data();
  for (uint32_t position : positions) {
    std::memcpy(cursor, &keys[position], sizeof(uint64_t));
    cursor += sizeof(uint64_t);
  }
}

// INTERNAL unless `reply`, from `shard`, carries what a pull of
// `positions` rows of `pull` asked for: the optimizer and its state (in FP32)
// for a pull with state, and a row of row_bytes bytes per position.
absl::Status CheckPullReply(const TableRows& pull, const PullReplyFields& reply,
                            int shard, size_t positions, size_t row_bytes) {
  const WireFormat format = reply.format;
  if (pull.optimizer != nullptr &&
      (!reply.has_optimizer ||
       reply.state_floats != static_cast<uint32_t>(pull.state_floats) ||
       format != WireFormat::FP32)) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " answered a pull of table ", pull.table,
        " with optimizer state with ", reply.state_floats,
        " floats of state (expected ", pull.state_floats, ")",
        reply.has_optimizer
            ? ""
            : " and no optimizer: a shard older than pulls with state "
              "(--overlay_own_pushes=never does without them)",
        " in wire format ", format));
  }
  if (row_bytes == 0 || reply.values_bytes != positions * row_bytes) {
    return absl::InternalError(absl::StrCat(
        "shard ", shard, " returned ", reply.values_bytes, " bytes for ",
        positions, " rows of ", pull.dim + pull.state_floats,
        " floats of table ", pull.table, " in wire format ", format));
  }
  return absl::OkStatus();
}

// Packs the gradient rows of `push` at `positions` into `request` in
// `format` (FP16 scaled by a power of two; `scratch` reused between calls).
void PackGradients(const TableGradients& push,
                   const std::vector<uint32_t>& positions, WireFormat format,
                   std::vector<float>& scratch, PushRequest* request) {
  const size_t row_bytes =
      static_cast<size_t>(push.dim) * WireValueBytes(format);
  std::string* packed = request->mutable_gradients();
  packed->resize(positions.size() * row_bytes);
  char* cursor = packed->data();
  if (format == WireFormat::FP32) {
    for (uint32_t position : positions) {
      std::memcpy(
          cursor,
          push.gradients.data() + static_cast<size_t>(position) * push.dim,
          row_bytes);
      cursor += row_bytes;
    }
    return;
  }
  scratch.resize(positions.size() * push.dim);
  for (size_t i = 0; i < positions.size(); ++i) {
    std::memcpy(
        &scratch[i * push.dim],
        push.gradients.data() + static_cast<size_t>(positions[i]) * push.dim,
        push.dim * sizeof(float));
  }
  if (format == WireFormat::FP16) {
    const float scale = HalfPrecisionScale(scratch);
    for (float& gradient : scratch) gradient *= scale;
    if (scale != 1.0f) request->set_gradient_scale(scale);
  }
  request->set_format(format);
  EncodeWireValues(format, scratch, cursor);
}

}  // namespace

void AddPullRequests(const TableRows& pull,
                     absl::Span<const uint32_t> positions,
                     const RequestLimits& limits, const SlotMap& map,
                     PullPlan* plan) {
  const uint32_t max_keys =
      MaxKeysPerPullRequest(pull, limits.max_keys_per_request);
  for (RoutedChunk& chunk : Route(pull.keys, positions, map, max_keys)) {
    PullRequest& request = plan->requests.emplace_back();
    request.set_table(pull.table);
    request.set_slot_map_epoch(map.epoch());
    if (pull.optimizer != nullptr) {
      request.set_with_state(true);
    } else {
      request.set_format(limits.wire_format);
    }
    PackKeys(pull.keys, chunk.positions, request.mutable_keys());
    plan->shards.push_back(chunk.shard);
    plan->destinations.push_back({&pull, std::move(chunk.positions)});
  }
}

absl::Status DeliverPullResponse(const grpc::ByteBuffer& reply, int shard,
                                 const PullPlan::Destination& destination) {
  const TableRows& pull = *destination.pull;
  absl::StatusOr<PullReplyFields> read = ReadPullReply(reply);
  if (!read.ok()) {
    return absl::InternalError(
        absl::StrCat("shard ", shard, " answered a pull of table ", pull.table,
                     " with ", read.status().message()));
  }
  const PullReplyFields& fields = *read;
  // A shard that predates formats answers FP32 whatever was asked.
  const WireFormat format = fields.format;
  const int row_floats = pull.dim + pull.state_floats;
  const size_t row_bytes =
      static_cast<size_t>(row_floats) * WireValueBytes(format);
  const std::vector<uint32_t>& positions = destination.positions;
  RETURN_IF_ERROR(
      CheckPullReply(pull, fields, shard, positions.size(), row_bytes));
  if (pull.optimizer != nullptr) {
    pull.optimizer->spec = fields.optimizer;
    pull.optimizer->learning_rate_multiplier = fields.learning_rate_multiplier;
  }
  return ForEachPulledRow(
      reply, fields.values_offset, positions.size(), row_bytes,
      [&](size_t first, size_t count, const char* bytes) {
        for (size_t i = first; i < first + count; ++i, bytes += row_bytes) {
          const uint32_t position = positions[i];
          const size_t row = pull.row_positions.empty()
                                 ? position
                                 : pull.row_positions[position];
          DecodeWireValues(
              format, bytes,
              absl::MakeSpan(pull.rows + row * row_floats, row_floats));
        }
      });
}

PushSequences::PushSequences(int max_shards)
    : max_shards_(max_shards),
      last_(std::make_unique<std::atomic<uint64_t>[]>(max_shards)) {
  for (int s = 0; s < max_shards_; ++s) last_[s] = 0;
}

uint64_t PushSequences::Next(int shard) { return ++last_[shard]; }

absl::Status AddPushRequests(const TableGradients& push,
                             const PushOrigin& origin,
                             const RequestLimits& limits, const SlotMap& map,
                             PushSequences& sequences,
                             std::vector<PushRequest>* requests,
                             std::vector<int>* shards) {
  if (push.gradients.size() !=
      push.keys.size() * static_cast<size_t>(push.dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push to ", push.table, ": ", push.gradients.size(),
        " gradient floats for ", push.keys.size(), " keys of dim ", push.dim));
  }
  std::vector<float> scratch;
  for (const RoutedChunk& chunk :
       Route(push.keys, AllPositions(push.keys.size()), map,
             limits.max_keys_per_request)) {
    PushRequest& request = requests->emplace_back();
    request.set_table(push.table);
    request.set_slot_map_epoch(map.epoch());
    request.set_worker(origin.worker);
    request.set_clock(origin.clock);
    if (push.learning_rate_scale != 1.0f)
      request.set_learning_rate_scale(push.learning_rate_scale);
    request.set_incarnation(origin.incarnation);
    request.set_sequence(sequences.Next(chunk.shard));
    PackKeys(push.keys, chunk.positions, request.mutable_keys());
    PackGradients(push, chunk.positions, limits.wire_format, scratch, &request);
    shards->push_back(chunk.shard);
  }
  return absl::OkStatus();
}

void ReroutePush(const PushRequest& refused, int refused_shard,
                 const SlotMap& map, PushSequences& sequences,
                 std::vector<PushRequest>* requests, std::vector<int>* shards) {
  std::vector<uint64_t> keys(refused.keys().size() / sizeof(uint64_t));
  std::memcpy(keys.data(), refused.keys().data(), refused.keys().size());
  const size_t row_bytes =
      keys.empty() ? 0 : refused.gradients().size() / keys.size();
  for (const RoutedChunk& chunk :
       Route(keys, AllPositions(keys.size()), map,
             static_cast<uint32_t>(std::max<size_t>(keys.size(), 1)))) {
    PushRequest& part = requests->emplace_back(refused);
    part.set_slot_map_epoch(map.epoch());
    part.set_sequence(sequences.Next(chunk.shard));
    std::string* packed_keys = part.mutable_keys();
    std::string* gradients = part.mutable_gradients();
    packed_keys->clear();
    gradients->clear();
    for (uint32_t position : chunk.positions) {
      packed_keys->append(refused.keys(), position * sizeof(uint64_t),
                          sizeof(uint64_t));
      gradients->append(refused.gradients(), position * row_bytes, row_bytes);
    }
    // If the shard that refused it had applied it (its answer lost), a move
    // brought that shard's ledger to where the keys are now.
    PushRequest::MovedFrom* moved_from = part.add_moved_from();
    moved_from->set_shard(static_cast<uint32_t>(refused_shard));
    moved_from->set_sequence(refused.sequence());
    shards->push_back(chunk.shard);
  }
}

}  // namespace ps::client
