// File: server/replication_service.h
//
// Replication between a primary shard and its replicas (proto/
// replication.proto).
//
// ReplicationService is the primary's side: BeginCopy checkpoints the store
// into <data_dir>/replica_copy-<id> at a cut of its ReplicationFeed
// (StoreReplication::CheckpointForReplica()) with the slot map, and lists the
// files, which ReadCopyFile serves in pieces until EndCopy removes them (a
// copy not read for `copy_timeout` goes too; at most kMaxCopies at once);
// Follow returns the feed's entries after what the replica applied,
// waiting briefly for one. Every call needs the admin token when one is
// set: a copy is every row.
//
// ReplicaFollower is the replica's side: CopyFromPrimary() writes a copy
// into an empty data dir before the store opens; then Start() applies the
// feed from the copy's cut on a thread of its own, saying with each Follow
// how far it has applied (and, under kWal, logged). If the primary no
// longer knows it (the primary restarted, or dropped it after its follower
// timeout), its slot map is another than the copy's (slots moved: rows
// reached or left the primary outside the feed), or an entry fails to
// apply, the follower stops and error() says why: the replica must be
// copied again (restarted).
//
// Thread-safe.

#ifndef PS_SERVER_REPLICATION_SERVICE_H_
#define PS_SERVER_REPLICATION_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "embedding/embedding_store.h"
#include "embedding/replication_feed.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/replication.grpc.pb.h"

namespace ps::server {

struct ReplicationServiceOptions {
  // The store's data dir, where copies are written.
  std::string data_dir;
  // This shard's place, which a replica takes.
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  // The bearer token every call needs. Default: none.
  std::string admin_token;
  // Writes this shard's slot map into a copy's directory, and its epoch.
  // REQUIRES: set.
  std::function<absl::Status(const std::string& dir)> write_slot_map;
  std::function<uint64_t()> slot_map_epoch;
  // A copy not read for this long is removed (its replica died).
  // Default: 60 s.
  absl::Duration copy_timeout = absl::Seconds(60);
};

class ReplicationService final : public Replication::CallbackService {
 public:
  // `store` and `feed` must outlive the service.
  ReplicationService(const ReplicationServiceOptions& options,
                     embedding::EmbeddingStore* store,
                     embedding::ReplicationFeed* feed);
  ~ReplicationService() override;

  grpc::ServerUnaryReactor* BeginCopy(grpc::CallbackServerContext* context,
                                      const BeginCopyRequest* request,
                                      BeginCopyResponse* response) override;
  grpc::ServerUnaryReactor* ReadCopyFile(
      grpc::CallbackServerContext* context, const ReadCopyFileRequest* request,
      ReadCopyFileResponse* response) override;
  grpc::ServerUnaryReactor* EndCopy(grpc::CallbackServerContext* context,
                                    const EndCopyRequest* request,
                                    EndCopyResponse* response) override;
  grpc::ServerUnaryReactor* Follow(grpc::CallbackServerContext* context,
                                   const FollowRequest* request,
                                   FollowResponse* response) override;

 private:
  absl::Status DoBeginCopy(BeginCopyResponse* response);
  // ABORTED: copy `id`'s follower was dropped, and the copy with it.
  static absl::Status CopyDropped(uint64_t id);
  absl::Status DoReadCopyFile(const ReadCopyFileRequest& request,
                              ReadCopyFileResponse* response);
  // Copies being read at once, at most.
  static constexpr size_t kMaxCopies = 4;
  struct Copy {
    std::string dir;
    BeginCopyResponse listing;
    absl::Time last_read;
  };
  // Removes copy `id`'s directory.
  void EndCopyLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the copies not read within copy_timeout.
  void ExpireCopiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReplicationServiceOptions options_;
  embedding::EmbeddingStore* const store_;
  embedding::ReplicationFeed* const feed_;
  absl::Mutex mu_;
  uint64_t next_copy_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Copy> copies_ ABSL_GUARDED_BY(mu_);
};

// What a replica's copy starts from.
struct ReplicaStart {
  uint64_t feed_id = 0;
  uint64_t follower_id = 0;
  uint64_t start_sequence = 0;
  std::string ledger;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint64_t bytes_copied = 0;
};

struct CopyOptions {
  // The admin token, if the primary wants one.
  std::string token;
  // How long the primary may take to cut the copy (BeginCopy), to hand one
  // piece of a file, and to end it. Default: 5 min.
  absl::Duration call_timeout = absl::Minutes(5);
  // Copies tried in all: a copy the primary abandons (ABORTED: it fell
  // more than the primary's byte bound behind) or refuses for now
  // (RESOURCE_EXHAUSTED, UNAVAILABLE) is deleted and started again, a
  // second later per attempt so far. Default: 5.
  int attempts = 5;
};

// Copies the primary's store behind `channel` into `data_dir`, which must
// hold no store (FAILED_PRECONDITION otherwise). DEADLINE_EXCEEDED when
// the primary does not answer within call_timeout (a paused primary); the
// last attempt's error when every attempt failed.
absl::StatusOr<ReplicaStart> CopyFromPrimary(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& data_dir,
    const CopyOptions& options);

struct ReplicaFollowerOptions {
  // The primary, for messages.
  std::string primary;
  // The admin token. Default: none.
  std::string token;
  // Most entries per Follow, and bytes of their records (a larger single
  // entry still comes alone). Defaults: 256, 32 MiB (within gRPC's
  // default message limits with room to spare).
  uint32_t max_entries = 256;
  uint64_t max_bytes = 32 << 20;
  // How long a Follow waits on the primary for an entry. Default: 200 ms.
  absl::Duration follow_wait = absl::Milliseconds(200);
  // How long the primary may stay unreachable before the follower gives
  // up (the primary drops it after its own timeout anyway). Default: 30 s.
  absl::Duration retry_for = absl::Seconds(30);
  // The epoch of the replica's slot map (the copy's). REQUIRES: set.
  std::function<uint64_t()> slot_map_epoch;
  // How long the primary's slot map epoch may differ from the replica's
  // before the follower gives up (and the replica copies again). Under
  // --etcd both read the job's map, each at its own moment, so a
  // difference for a moment is expected; one that lasts means the map
  // changed on one side alone. Default: 10 s (several of the slot map's
  // 2 s re-reads).
  absl::Duration slot_map_mismatch_grace = absl::Seconds(10);
};

class ReplicaFollower {
 public:
  // `store` (opened from the copy `start` describes) must outlive the
  // follower.
  ReplicaFollower(const ReplicaFollowerOptions& options,
                  std::shared_ptr<grpc::Channel> channel,
                  embedding::EmbeddingStore* store, const ReplicaStart& start);
  // Stop()s.
  ~ReplicaFollower();

  // Starts applying the feed on a thread of its own.
  void Start();
  // Stops applying (after the entry being applied), and waits for that.
  void Stop();

  // The last entry applied.
  uint64_t applied() const { return applied_.load(); }
  // The newest entry the primary had at the last Follow.
  uint64_t primary_head() const { return primary_head_.load(); }
  // OK while following; why it stopped otherwise.
  absl::Status error() const;

 private:
  void Run();
  // One Follow call to the primary; nullopt when stopped before it was
  // sent.
  std::optional<grpc::Status> CallFollow(FollowResponse* response);
  // Applies the entries `response` brought, in sequence order; the first
  // error (an entry out of order, or one the store refused).
  absl::Status ApplyEntries(const FollowResponse& response);

  const ReplicaFollowerOptions options_;
  const std::unique_ptr<Replication::Stub> stub_;
  embedding::EmbeddingStore* const store_;
  const ReplicaStart start_;
  std::atomic<uint64_t> applied_;
  std::atomic<uint64_t> primary_head_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // The Follow call in flight, which Stop() cancels.
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace ps::server

#endif  // PS_SERVER_REPLICATION_SERVICE_H_
