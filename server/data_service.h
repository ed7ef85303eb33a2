// File: server/data_service.h
//
// DataService implements ps.ParameterServer (proto/ps.proto) on one shard:
// DeclareTable, Pull and Push over an EmbeddingStore. Each request is
// validated whole before the store is touched: packed lengths, the key limit,
// and that every key routes to this shard; the store then checks the table,
// dims and NaN/Inf. Thread-safe; uses gRPC's callback API.
//
// Pull is served raw (gRPC's ByteBuffer in and out): its reply, a
// PullResponse in protobuf's wire format, is written into one slice that
// gRPC sends as it is, the rows copied from the hot tier straight into it;
// serializing a PullResponse would copy them once more. A pull with
// optimizer state (with_state) replies with two slices: its other fields
// serialized, then its rows, written by the store into a buffer the slice
// takes over. On the wire it is the same method, so every client
// (generated stubs, grpc_cli) sees no difference.

#ifndef PS_SERVER_DATA_SERVICE_H_
#define PS_SERVER_DATA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cluster/shard_directory.h"
#include "cluster/slot_ownership.h"
#include "embedding/embedding_store.h"
#include "embedding/replication_feed.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.grpc.pb.h"
#include "server/clock_coordinator.h"
#include "server/received_push.h"
#include "server/slot_move.h"

namespace ps::server {

// What the data plane has served, for the admin service and metrics.
struct RequestCounters {
  std::atomic<uint64_t> pull_requests{0};
  std::atomic<uint64_t> push_requests{0};
  std::atomic<uint64_t> failed_requests{0};
  // Under sync replication: pushes answered while no replica was in sync
  // (nobody else has them).
  std::atomic<uint64_t> pushes_without_replica{0};
  // Pushes applied here whose replicas did not confirm them in time:
  // answered UNAVAILABLE, so that the client's retry (a duplicate) waits
  // again.
  std::atomic<uint64_t> pushes_replication_timed_out{0};
  // Pushes refused (UNAVAILABLE, transient) because fewer replicas were in
  // sync than DataServiceOptions::min_in_sync_replicas: before they were
  // applied, or after, in place of the acknowledgement.
  std::atomic<uint64_t> pushes_refused_too_few_in_sync{0};
};

struct DataServiceOptions {
  // This shard: a key whose slot the slot map gives to another shard is
  // refused (FAILED_PRECONDITION with a ps-moved trailer). Default: 0.
  uint32_t shard_index = 0;
  // Most keys one Pull or Push may name; more are refused with
  // INVALID_ARGUMENT. Default: 65536.
  uint32_t max_keys_per_request = 65536;
  // Largest request or reply gRPC carries (the server's message limit).
  // Default: 64 MiB.
  size_t max_message_bytes = 64 << 20;
  // Bytes of pulls and pushes (requests and replies) the shard holds at
  // once; past it, calls are refused with RESOURCE_EXHAUSTED, marked
  // transient so that clients back off and retry. Default: 1 GiB.
  size_t max_inflight_bytes = size_t{1} << 30;
  // The token Clock and DeclareTable must carry (server/bearer_token.h).
  // Default: none needed.
  std::string worker_token;
  // Set on a replica: why Push, DeclareTable and Clock are refused
  // (FAILED_PRECONDITION; under --etcd UNAVAILABLE and transient, as a
  // replica is found there only while it takes over); pulls are served.
  // Default: empty.
  std::string read_only;
  // Under --etcd: pushes are refused (transiently) until FenceBy() gives
  // the shard's registration. Default: false.
  bool fenced_until_registered = false;
  // A primary's replication feed (not owned), or null. With a follower,
  // a push is answered once every replica in sync applied it (`sync`), and
  // once no replica is more than `max_replication_lag` entries behind; if
  // that takes longer than `replication_wait`, it is answered UNAVAILABLE
  // (transient: the retry, a duplicate, waits again).
  embedding::ReplicationFeed* feed = nullptr;
  bool sync_replication = false;
  uint64_t max_replication_lag = 100000;
  // With a feed: a push is refused (UNAVAILABLE, transient) while fewer
  // replicas than this are in sync, before it is applied; under sync, one
  // applied meanwhile is answered UNAVAILABLE too (its retry, a duplicate,
  // waits again). 0: pushes go on with no replica (under sync counted in
  // pushes_without_replica). Default: 0.
  uint32_t min_in_sync_replicas = 0;
  // How long a push waits for a replica at most: a replica that does not
  // read for this long is dropped by the feed anyway. Default: 10 s.
  absl::Duration replication_wait = absl::Seconds(10);
};

// Pull and Push take and give gRPC's buffers: a pull's reply is written
// in place, a push's keys and gradients are read where they arrived.
class DataService final : public ParameterServer::WithRawCallbackMethod_Pull<
                              ParameterServer::WithRawCallbackMethod_Push<
                                  ParameterServer::CallbackService>> {
 public:
  // `store`, `clocks`, `slots` and `moves` must outlive this service.
  DataService(const DataServiceOptions& options,
              embedding::EmbeddingStore* store, ClockCoordinator* clocks,
              const cluster::SlotOwnership* slots, SlotMoveSource* moves)
      : options_(options),
        store_(store),
        clocks_(clocks),
        slots_(slots),
        moves_(moves),
        read_only_(!options.read_only.empty()) {}

  // A replica promoted to primary: pushes, declarations and clock reports
  // are taken from now on.
  void SetWritable() { read_only_ = false; }

  // A shard that stops: pushes are refused (UNAVAILABLE, transient) from
  // now on, so that its replicas can catch up before it lets go.
  void SetStopping() { stopping_ = true; }

  // Under --etcd: pushes are refused (UNAVAILABLE, transient) and none is
  // acknowledged once `lease` (the shard's registration; null: none) is no
  // longer surely held, so that a primary paused past its lease never
  // acknowledges a push after a replica took its place. `lease` must
  // outlive the service or be replaced by null first.
  void FenceBy(const cluster::LeasedKey* lease) { lease_ = lease; }

  grpc::ServerUnaryReactor* DeclareTable(
      grpc::CallbackServerContext* context, const DeclareTableRequest* request,
      DeclareTableResponse* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Clock(grpc::CallbackServerContext* context,
                                  const ClockRequest* request,
                                  ClockResponse* response) override;
  grpc::ServerUnaryReactor* GetSlotMap(grpc::CallbackServerContext* context,
                                       const GetSlotMapRequest* request,
                                       GetSlotMapResponse* response) override;

  const RequestCounters& counters() const { return counters_; }

  // The work of each call without gRPC (validation, then the store): what
  // the handlers above run, and what fuzzers feed arbitrary requests.
  absl::Status HandleDeclareTable(const DeclareTableRequest& request,
                                  DeclareTableResponse* response);
  absl::Status HandlePull(const PullRequest& request, PullResponse* response);
  absl::Status HandlePush(const ReceivedPush& push, PushResponse* response);
  // OK unless stopping, unregistered under --etcd, or FenceBy()'s lease is
  // no longer surely held.
  absl::Status Fenced() const;
  // UNAVAILABLE (transient) while fewer replicas than
  // options_.min_in_sync_replicas are in sync; counts the refusal.
  absl::Status EnoughReplicasInSync();
  // Why a replica refuses a write.
  absl::Status ReadOnly() const;

  // Calls whose handler has started and that gRPC is not done with yet
  // (their reply may still be on its way).
  int64_t calls_in_flight() const { return calls_in_flight_.load(); }

 private:
  // A unary reactor counted in calls_in_flight_ from the start of the
  // handler until gRPC is done with the call (OnDone), so that shutdown can
  // tell when no call is left to finish.
  // It also holds the call's bytes (request and reply) in bytes_in_flight_
  // until then; a call that would take the total past max_inflight_bytes is
  // not admitted (unless nothing else is in flight).
  class CountedReactor final : public grpc::ServerUnaryReactor {
   public:
    CountedReactor(DataService* service, int64_t bytes)
        : service_(service), bytes_(bytes) {
      ++service_->calls_in_flight_;
      const int64_t before = service_->bytes_in_flight_.fetch_add(bytes_);
      admitted_ = before == 0 ||
                  before + bytes_ <= static_cast<int64_t>(
                                         service_->options_.max_inflight_bytes);
    }
    bool admitted() const { return admitted_; }
    void OnDone() override {
      service_->bytes_in_flight_ -= bytes_;
      --service_->calls_in_flight_;
      delete this;
    }

   private:
    DataService* const service_;
    const int64_t bytes_;
    bool admitted_ = true;
  };

  // Validates `request` and pulls its rows, encoded in its wire format,
  // into the `values_bytes` bytes that allocate(values_bytes, dim) returns.
  absl::Status PullInto(
      const PullRequest& request,
      absl::FunctionRef<char*(size_t values_bytes, uint32_t dim)> allocate);

  // Validates a pull with optimizer state (PullRequest.with_state) and
  // pulls its rows (FP32 weights then state) into the `values_bytes` bytes,
  // float-aligned, that allocate(values_bytes) returns; sets every field
  // of `response` but the values.
  absl::Status PullWithState(
      const PullRequest& request, PullResponse* response,
      absl::FunctionRef<char*(size_t values_bytes)> allocate);

  // OK when a pull's reply, `payload_bytes` of rows plus at most
  // `other_fields_bytes`, fits --max_message_mb and gRPC's 2 GiB; else
  // RESOURCE_EXHAUSTED saying that `rows` (what was asked for) do not.
  absl::Status CheckReplySize(size_t payload_bytes, size_t other_fields_bytes,
                              absl::string_view rows) const;

  // Unpacks `packed` keys and checks them: CheckKeyBytes(), then
  // CheckOwnership().
  absl::Status CheckKeys(const std::string& packed, uint64_t slot_map_epoch,
                         std::vector<uint64_t>* keys) const;
  // INVALID_ARGUMENT unless `packed_bytes` are whole 8-byte keys;
  // RESOURCE_EXHAUSTED for more than max_keys_per_request.
  absl::Status CheckKeyBytes(size_t packed_bytes) const;
  // That this shard owns `keys` by its slot map: SlotMovedError() for one
  // it does not, UNAVAILABLE (transient) if the client routed with a newer
  // map than the shard's.
  absl::Status CheckOwnership(absl::Span<const uint64_t> keys,
                              uint64_t slot_map_epoch) const;
  // Starts counting a call of `bytes`; every handler begins with it.
  CountedReactor* StartCall(int64_t bytes = 0) {
    return new CountedReactor(this, bytes);
  }
  // The answer to a call that was not admitted.
  absl::Status Busy(int64_t bytes) const;
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                   CountedReactor* reactor,
                                   const absl::Status& status);

  const DataServiceOptions options_;
  embedding::EmbeddingStore* const store_;
  ClockCoordinator* const clocks_;
  const cluster::SlotOwnership* const slots_;
  SlotMoveSource* const moves_;
  RequestCounters counters_;
  std::atomic<int64_t> calls_in_flight_{0};
  std::atomic<int64_t> bytes_in_flight_{0};
  std::atomic<bool> read_only_;
  std::atomic<bool> stopping_{false};
  std::atomic<const cluster::LeasedKey*> lease_{nullptr};
};

}  // namespace ps::server

#endif  // PS_SERVER_DATA_SERVICE_H_
