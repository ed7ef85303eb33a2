// File: server/admin_service.h
//
// AdminService implements ps.Admin (proto/admin.proto) on one shard: the
// tables and their sizes, one row by key, the shard's counters, the
// workers' clocks and the cuts checkpoints are taken at (on the coordinator
// shard), snapshots, live learning rates, dropping tables, the slot map,
// and Stop. Calls that change state need the admin token when one is set
// (compared in constant time).
// Thread-safe.

#ifndef PS_SERVER_ADMIN_SERVICE_H_
#define PS_SERVER_ADMIN_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "cluster/slot_ownership.h"
#include "embedding/embedding_store.h"
#include "proto/admin.grpc.pb.h"
#include "server/call_stats.h"
#include "server/clock_coordinator.h"
#include "server/data_service.h"
#include "server/slot_move.h"

namespace ps::server {

struct AdminServiceOptions {
  uint32_t shard_index = 0;
  // The bearer token calls that change state must carry. Default: empty
  // (no token needed).
  std::string admin_token;
  // Called by Stop() (and Drain(), its former name), which is refused with
  // FAILED_PRECONDITION when it is not set. Default: not set.
  std::function<void()> stop;
  // Changes the slot map for SetSlotMap (under --etcd: the job's map in
  // etcd, then this shard's). Default: not set (this shard's map alone).
  std::function<absl::Status(uint64_t expected_epoch, const SlotMap& next)>
      set_slot_map;
  // Set on a replica: why calls that change its tables or slots are
  // refused (FAILED_PRECONDITION). Default: empty (allowed).
  std::string read_only;
  // Fills ShardStats' replication section. Default: not set.
  std::function<void(ShardStatsResponse::Replication*)> replication_stats;
  // Returns once this shard's replicas hold what its replication feed holds
  // now, as a push waits for them (DataServiceOptions::feed); UNAVAILABLE
  // when that takes too long. A move's rows are durable on the target only
  // then (WriteSlotRowsRequest.durable). Default: not set (no replicas).
  std::function<absl::Status()> await_replicas;
  // Calls `done` once the replicas reading this shard's feed are within
  // its bounds again (records and bytes), as a push waits past them,
  // without holding the caller's thread; UNAVAILABLE when that takes too
  // long. A move's page of rows is answered only then, so that a move
  // never piles more into the feed's memory than pushes may. Default: not
  // set (no replicas).
  std::function<void(std::function<void(absl::Status)> done)> await_feed_room;
};

class AdminService final : public Admin::CallbackService {
 public:
  // `store`, `counters`, `call_stats`, `clocks`, `slots` and `moves` must
  // outlive this service.
  AdminService(const AdminServiceOptions& options,
               embedding::EmbeddingStore* store,
               const RequestCounters* counters, const CallStats* call_stats,
               ClockCoordinator* clocks, cluster::SlotOwnership* slots,
               SlotMoveSource* moves)
      : options_(options),
        store_(store),
        counters_(counters),
        call_stats_(call_stats),
        clocks_(clocks),
        slots_(slots),
        moves_(moves),
        started_(absl::Now()),
        instance_(absl::Uniform<uint64_t>(absl::BitGen())),
        clock_instance_(instance_),
        read_only_(!options.read_only.empty()) {}

  // A replica promoted to primary: its tables and slots may change, and its
  // own clock stamps the rows' update times from now on (a new
  // clock_instance, so no delta export follows one taken before).
  void Promote() {
    clock_instance_ = absl::Uniform<uint64_t>(absl::BitGen());
    read_only_ = false;
  }

  grpc::ServerUnaryReactor* ListTables(grpc::CallbackServerContext* context,
                                       const ListTablesRequest* request,
                                       ListTablesResponse* response) override;
  grpc::ServerUnaryReactor* GetRow(grpc::CallbackServerContext* context,
                                   const GetRowRequest* request,
                                   GetRowResponse* response) override;
  grpc::ServerUnaryReactor* ShardStats(grpc::CallbackServerContext* context,
                                       const ShardStatsRequest* request,
                                       ShardStatsResponse* response) override;
  grpc::ServerUnaryReactor* WorkerClocks(
      grpc::CallbackServerContext* context, const WorkerClocksRequest* request,
      WorkerClocksResponse* response) override;
  grpc::ServerUnaryReactor* SetLearningRate(
      grpc::CallbackServerContext* context,
      const SetLearningRateRequest* request,
      SetLearningRateResponse* response) override;
  grpc::ServerUnaryReactor* DropTable(grpc::CallbackServerContext* context,
                                      const DropTableRequest* request,
                                      DropTableResponse* response) override;
  grpc::ServerUnaryReactor* ExpireTable(grpc::CallbackServerContext* context,
                                        const ExpireTableRequest* request,
                                        ExpireTableResponse* response) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* context,
                                 const StopRequest* request,
                                 StopResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const DrainRequest* request,
                                  DrainResponse* response) override;
  grpc::ServerUnaryReactor* BeginCut(grpc::CallbackServerContext* context,
                                     const BeginCutRequest* request,
                                     BeginCutResponse* response) override;
  grpc::ServerUnaryReactor* CutStatus(grpc::CallbackServerContext* context,
                                      const CutStatusRequest* request,
                                      CutStatusResponse* response) override;
  grpc::ServerUnaryReactor* EndCut(grpc::CallbackServerContext* context,
                                   const EndCutRequest* request,
                                   EndCutResponse* response) override;
  grpc::ServerUnaryReactor* SnapshotShard(
      grpc::CallbackServerContext* context, const SnapshotShardRequest* request,
      SnapshotShardResponse* response) override;
  grpc::ServerUnaryReactor* ExportShard(grpc::CallbackServerContext* context,
                                        const ExportShardRequest* request,
                                        ExportShardResponse* response) override;
  grpc::ServerUnaryReactor* SetSlotMap(grpc::CallbackServerContext* context,
                                       const SetSlotMapRequest* request,
                                       SetSlotMapResponse* response) override;
  grpc::ServerUnaryReactor* GetSlotMap(grpc::CallbackServerContext* context,
                                       const GetSlotMapRequest* request,
                                       GetSlotMapResponse* response) override;
  grpc::ServerUnaryReactor* BeginSlotMove(
      grpc::CallbackServerContext* context, const BeginSlotMoveRequest* request,
      BeginSlotMoveResponse* response) override;
  grpc::ServerUnaryReactor* ReadSlotRows(
      grpc::CallbackServerContext* context, const ReadSlotRowsRequest* request,
      ReadSlotRowsResponse* response) override;
  grpc::ServerUnaryReactor* EndSlotMove(grpc::CallbackServerContext* context,
                                        const EndSlotMoveRequest* request,
                                        EndSlotMoveResponse* response) override;
  grpc::ServerUnaryReactor* WriteSlotRows(
      grpc::CallbackServerContext* context, const WriteSlotRowsRequest* request,
      WriteSlotRowsResponse* response) override;
  grpc::ServerUnaryReactor* PurgeSlots(grpc::CallbackServerContext* context,
                                       const PurgeSlotsRequest* request,
                                       PurgeSlotsResponse* response) override;

 private:
  // OK when `context` may change state: no token is set, or it carries it.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;
  // Authorize(), and FAILED_PRECONDITION on a replica (options_.read_only).
  absl::Status AuthorizeWrite(const grpc::CallbackServerContext& context) const;
  // Stop(): calls options_.stop, if the call may change state.
  absl::Status StopShard(grpc::CallbackServerContext& context);
  // Finishes `context`'s call with `status`.
  static grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                         const absl::Status& status);
  // Flushes the store, then waits for the replicas (await_replicas).
  absl::Status MakeMovedRowsDurable();
  absl::Status HandleWriteSlotRows(const WriteSlotRowsRequest& request);
  // By slot, whether an export writes its rows here: the slots that the
  // request's slot map (or this shard's, if it names none) gives this shard.
  absl::StatusOr<std::vector<bool>> ExportedSlots(
      const ExportShardRequest& request) const;

  const AdminServiceOptions options_;
  embedding::EmbeddingStore* const store_;
  const RequestCounters* const counters_;
  const CallStats* const call_stats_;
  ClockCoordinator* const clocks_;
  cluster::SlotOwnership* const slots_;
  SlotMoveSource* const moves_;
  const absl::Time started_;
  // This process among the shard's starts (WriteSlotRowsResponse.instance).
  const uint64_t instance_;
  // Whose clock stamped the update times a delta export compares with
  // (ExportShardResponse.clock_instance): this process's, drawn again when
  // it is promoted.
  std::atomic<uint64_t> clock_instance_;
  std::atomic<bool> read_only_;
};

}  // namespace ps::server

#endif  // PS_SERVER_ADMIN_SERVICE_H_
