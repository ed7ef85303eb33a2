// File: client/ps_client.h
//
// PsClient is the worker's view of the cluster: one channel per shard, keys
// routed by a slot map (base/slot_map.h), and each call fanned out to every
// shard it touches in parallel (gRPC's async callback API), then joined. Calls
// that fail with UNAVAILABLE (a shard restarting) are retried with exponential
// backoff for up to `retry_for`; channels reconnect on their own, so training
// survives a shard that comes back; DEADLINE_EXCEEDED (a shard stopped or
// overloaded past `call_timeout`) and errors a shard marks transient (a full
// disk; base/transient_error.h) are retried the same way. Retrying a push
// is safe: every push request carries this client's incarnation and a
// sequence number of its own per shard, and a shard applies each (worker,
// incarnation, sequence) once, answering a retry of one it applied with the
// first answer (exactly once; across shard restarts too under the shards'
// --durability=wal).
//
// It is made of parts with their own tests: ShardChannels (where calls go,
// shard_channels.h), the router (keys to shards and requests, router.h),
// reading a pull's reply where gRPC received it (pull_reply.h) and the
// retry policy (retry_policy.h); this class fans calls out, retries them,
// and follows the slot map and the shards when they move.
//
// Thread-safe: many threads may call at once.

#ifndef PS_CLIENT_PS_CLIENT_H_
#define PS_CLIENT_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/slot_map.h"
#include "client/retry_policy.h"
#include "client/router.h"
#include "client/shard_channels.h"
#include "client/training_client.h"
#include "net/tls_credentials.h"
#include "proto/ps.grpc.pb.h"

namespace ps::client {

struct ClientOptions {
  // Shard i is servers[i]. REQUIRES: not empty, at most kMaxShards.
  std::vector<std::string> servers;
  // Under --etcd: looks up every shard of the job now (net/
  // shard_directory.h's FindShards). Set: a slot map of more shards than
  // this client knows (a shard joined the job) looks them up and connects
  // to the new ones. Default: none (such a map is refused).
  std::function<absl::StatusOr<std::vector<std::string>>()> find_shards;
  // With find_shards: a call that a shard has not answered for this long
  // looks the shards up again and goes where the shard is now (a replica
  // promoted in its place, or the shard restarted elsewhere).
  absl::Duration shard_patience = absl::Seconds(2);
  // Where the clock coordinator is. Default (empty): servers[0].
  std::string coordinator;
  // Under --etcd: looks up where the coordinator is now (net/
  // shard_directory.h's FindCoordinator). Set: a Clock call that the
  // coordinator does not answer for `coordinator_patience` looks it up
  // again and goes there, so that workers follow a coordinator that another
  // shard took over. Default: none (the coordinator stays where it is).
  std::function<absl::StatusOr<std::string>()> find_coordinator;
  absl::Duration coordinator_patience = absl::Seconds(2);
  // Deadline of one RPC. Default: 30 s.
  absl::Duration call_timeout = absl::Seconds(30);
  // How long a call keeps retrying an unavailable shard. Default: 600 s,
  // which outlasts a shard that Kubernetes reschedules off a lost node (the
  // node is declared gone after 300 s of silence, then the pod's 30 s grace,
  // scheduling and the push log's replay).
  absl::Duration retry_for = absl::Seconds(600);
  // First backoff between retries; doubles up to 2 s, each sleep drawn
  // between half and all of it (jitter), so that many workers do not retry
  // in step. Default: 50 ms.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  // Keys per request; larger calls are split. Must not exceed the servers'
  // --max_keys_per_request. Default: 65536.
  uint32_t max_keys_per_request = 65536;
  // Largest message either way. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // This process's incarnation for exactly-once pushes: must grow from one
  // start of a worker to the next. Default (0): microseconds since the
  // epoch at Connect(), until set_incarnation() gives the one the
  // coordinator assigned (the trainer does, before any push).
  uint64_t incarnation = 0;
  // TLS to the shards (net/tls_credentials.h). Default: plaintext.
  TlsFiles tls;
  // Sent with Clock and DeclareTable calls, for shards started with
  // --worker_token_file. Default: none.
  std::string worker_token;
  // How pulled rows and pushed gradients travel (base/wire_format.h); FP16
  // pushes are scaled by a power of two per request to keep small
  // gradients. Default: FP32.
  WireFormat wire_format = WireFormat::FP32;
};

class PsClient : public TrainingClient {
 public:
  // INVALID_ARGUMENT without servers, with more than kMaxShards or with
  // max_keys_per_request 0; the TLS files' errors.
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(
      const ClientOptions& options);

  // The most shards a client reaches.
  static constexpr int kMaxShards = 1024;

  // The shards this client knows: servers, and those that joined since.
  int num_shards() const { return channels_->num_shards(); }

  // The incarnation pushes and clock reports carry; set before any push.
  uint64_t incarnation() const override { return incarnation_.load(); }
  void set_incarnation(uint64_t incarnation) override {
    incarnation_ = incarnation;
  }

  // How rows and gradients travel (ClientOptions::wire_format).
  WireFormat wire_format() const override { return options_.wire_format; }

  // Declares `spec` on every shard (idempotent), and on each shard that
  // joins later when the client learns of it.
  absl::Status DeclareTable(const TableSpec& spec) override;

  // Pulls from several tables at once: every shard request of every table
  // is in flight together.
  absl::Status Pull(absl::Span<const TableRows> pulls) override;

  // Pushes to several tables at once, exactly once per shard request
  // (retries included).
  absl::Status Push(absl::Span<const TableGradients> pushes, uint32_t worker,
                    int64_t clock) override;

  // Reports to the clock coordinator, retried like a pull for `retry_for`
  // (negative: the options' retry_for).
  absl::StatusOr<ClockResponse> Clock(
      const ClockRequest& request,
      absl::Duration retry_for = -absl::InfiniteDuration()) override;

  // Calls retried so far, by the status code that made them retry
  // ("UNAVAILABLE", ...), codes never seen left out.
  std::vector<std::pair<std::string, uint64_t>> retries() const {
    return retry_counts_.ByCode();
  }

 private:
  PsClient(const ClientOptions& options,
           std::unique_ptr<ShardChannels> channels);

  // Requests a shard refused because their keys' slots are another
  // shard's (a ps-moved answer): their indices, the largest epoch a shard
  // named, and that shard.
  struct Moved {
    std::vector<size_t> requests;
    uint64_t epoch = 0;
    int shard = -1;
  };

  // Issues every request (request i to shards[i]) at once and retries those
  // that failed transiently, with backoff, for up to `retry_for`, each
  // attempt with a deadline of `attempt_timeout` (zero: the call timeout).
  // With `moved`, requests refused as moved are not retried but listed
  // there.
  template <typename Request, typename Response, typename Issue>
  absl::Status FanOut(std::vector<Request>& requests,
                      const std::vector<int>& shards,
                      std::vector<Response>* responses, Issue issue,
                      const char* what, absl::Duration retry_for, Moved* moved,
                      absl::Duration attempt_timeout = absl::ZeroDuration());
  // After an attempt that failed: looks the shards up again (once for all
  // the calls failing together, none while a refresh is under way) if they
  // have not answered for shard_patience. `lookups_before`: shard_lookups_
  // when the attempt began.
  void MaybeFollowShards(uint64_t lookups_before);

  std::shared_ptr<const SlotMap> slot_map() const;
  // The map to route again by after `moved` (round: how many times this
  // call was refused as moved before): read from the shard that refused
  // with the newest epoch. ABORTED past kMaxReroutes rounds;
  // FAILED_PRECONDITION for a map of more shards than this client knows,
  // unless options_.find_shards finds them (FollowShards()).
  absl::StatusOr<std::shared_ptr<const SlotMap>> RefreshSlotMap(
      const Moved& moved, int round);
  static constexpr int kMaxReroutes = 8;
  // Looks shards 0 to `num_shards` - 1 up with options_.find_shards and
  // points the channels at them, declaring every table declared so far on
  // each shard new to the job. Called with refresh_mu_ held, at each new
  // map. UNAVAILABLE when shards this client has never dialled are not all
  // found within retry_for.
  absl::Status FollowShards(uint32_t num_shards);
  // Declares `spec` on `shards`.
  absl::Status DeclareOn(const TableSpec& spec, std::vector<int> shards);
  // Adds options_.worker_token to a Clock or DeclareTable call.
  void AddWorkerToken(grpc::ClientContext* context) const;
  // Clock() against the coordinator of now, retried for `retry_for`.
  absl::StatusOr<ClockResponse> ClockOnce(const ClockRequest& request,
                                          absl::Duration retry_for);

  const ClientOptions options_;
  const RequestLimits limits_;
  const RetryOptions retry_options_;
  const std::unique_ptr<ShardChannels> channels_;
  std::atomic<uint64_t> incarnation_{0};
  PushSequences push_sequences_{kMaxShards};
  RetryCounts retry_counts_;
  // The slot map requests are routed by: the initial one of the shard count
  // until a shard answers that keys moved.
  mutable absl::Mutex slot_map_mu_;
  std::shared_ptr<const SlotMap> slot_map_ ABSL_GUARDED_BY(slot_map_mu_);
  // Held while reading a new map or looking the shards up, so that one
  // refusal or failure seen by many calls is acted on once.
  absl::Mutex refresh_mu_;
  // How many times FollowShards() found the shards: a call that failed
  // looks them up only if none did since its attempt began.
  std::atomic<uint64_t> shard_lookups_{0};
};

}  // namespace ps::client

#endif  // PS_CLIENT_PS_CLIENT_H_
