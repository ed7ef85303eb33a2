// File: client/router.h
//
// Which shard each key of a pull or push goes to, and the requests that
// carry them: keys routed by a slot map (base/slot_map.h), split into
// requests of at most max_keys_per_request keys, packed in the wire format;
// and a pull's replies written back to the caller's rows. Pure functions
// over protos, no gRPC; the caller's spans must outlive the plans made of
// them.

#ifndef PS_CLIENT_ROUTER_H_
#define PS_CLIENT_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "base/slot_map.h"
#include "base/wire_format.h"
#include "client/training_client.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"

namespace ps::client {

// The positions (into a call's keys) that one request carries, and its shard.
struct RoutedChunk {
  int shard = 0;
  std::vector<uint32_t> positions;
};

// Splits `positions` (into `keys`) by the shard `map` gives their keys, then
// into chunks of at most `max_keys` positions each, in shard order and, in a
// shard, in the order of `positions`. REQUIRES: max_keys > 0.
std::vector<RoutedChunk> Route(absl::Span<const uint64_t> keys,
                               absl::Span<const uint32_t> positions,
                               const SlotMap& map, uint32_t max_keys);

// 0, 1, ..., count - 1.
std::vector<uint32_t> AllPositions(size_t count);

// How requests are cut and encoded.
struct RequestLimits {
  // Keys per request. REQUIRES: > 0.
  uint32_t max_keys_per_request = 65536;
  // How pulled rows and pushed gradients travel.
  WireFormat wire_format = WireFormat::FP32;
};

// One pull's requests, one per (table, shard, chunk): request i goes to
// shards[i], and its rows to the positions destinations[i] of pull
// destination_pulls[i]'s keys.
struct PullPlan {
  struct Destination {
    const TrainingClient::TableRows* pull = nullptr;
    std::vector<uint32_t> positions;
  };
  std::vector<PullRequest> requests;
  std::vector<int> shards;
  std::vector<Destination> destinations;
};

// Appends to `plan` the requests for the keys of `pull` at `positions`,
// routed by `map`. A pull with optimizer state asks FP32 rows, fewer per
// request, so that a reply stays within what a plain pull's may be.
void AddPullRequests(const TrainingClient::TableRows& pull,
                     absl::Span<const uint32_t> positions,
                     const RequestLimits& limits, const SlotMap& map,
                     PullPlan* plan);

// Writes `reply` (a PullResponse on the wire, as gRPC received it), from
// `shard`, into the rows (and optimizer) of `destination`, each row decoded
// from gRPC's buffers (client/pull_reply.h). INTERNAL, with nothing
// written, unless the reply holds a row per position in a format it may
// and, for a pull with state, the optimizer and state of the size asked.
absl::Status DeliverPullResponse(const grpc::ByteBuffer& reply, int shard,
                                 const PullPlan::Destination& destination);

// The last sequence number given to a push request, per shard: a shard
// applies each (worker, incarnation, sequence) once. Thread-safe.
class PushSequences {
 public:
  explicit PushSequences(int max_shards);
  // The next sequence number of `shard` (1 the first time).
  uint64_t Next(int shard);

 private:
  const int max_shards_;
  std::unique_ptr<std::atomic<uint64_t>[]> last_;
};

// Who pushes, when, and as which incarnation.
struct PushOrigin {
  uint32_t worker = 0;
  int64_t clock = 0;
  uint64_t incarnation = 0;
};

// Appends to `requests` (and their shards to `shards`) the push requests of
// `push`, routed by `map`, each with the next sequence number of its shard.
// FP16 gradients are scaled by a power of two per request (gradient_scale)
// to keep small ones. INVALID_ARGUMENT unless the push holds dim floats per
// key.
absl::Status AddPushRequests(const TrainingClient::TableGradients& push,
                             const PushOrigin& origin,
                             const RequestLimits& limits, const SlotMap& map,
                             PushSequences& sequences,
                             std::vector<PushRequest>* requests,
                             std::vector<int>* shards);

// The requests that `refused`, sent to `refused_shard` and refused there as
// moved, becomes under the newer `map`: its keys and their gradients split
// by shard, every other field kept, each with the next sequence number of
// its shard and a moved_from naming the refused request (so that a shard
// that had applied it, its answer lost, is not applied twice). Appended to
// `requests` and `shards`. REQUIRES: refused's gradients hold a row per key;
// `refused` is not an element of `*requests`.
void ReroutePush(const PushRequest& refused, int refused_shard,
                 const SlotMap& map, PushSequences& sequences,
                 std::vector<PushRequest>* requests, std::vector<int>* shards);

}  // namespace ps::client

#endif  // PS_CLIENT_ROUTER_H_
