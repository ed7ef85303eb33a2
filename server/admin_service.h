// File: server/admin_service.h
//
// AdminService implements ps.Admin (proto/admin.proto) on one shard: the
// tables and their sizes, one row by key, the shard's counters, and the
// workers' clocks (on the coordinator shard).
// Read-only. Thread-safe.

#ifndef PS_SERVER_ADMIN_SERVICE_H_
#define PS_SERVER_ADMIN_SERVICE_H_

#include <cstdint>

#include "absl/time/clock.h"
#include "embedding/embedding_store.h"
#include "proto/admin.grpc.pb.h"
#include "server/clock_coordinator.h"
#include "server/data_service.h"

namespace ps::server {

class AdminService final : public Admin::CallbackService {
 public:
  // `store`, `counters` and `clocks` must outlive this service.
  AdminService(uint32_t shard_index, uint32_t num_shards,
               embedding::EmbeddingStore* store,
               const RequestCounters* counters, ClockCoordinator* clocks)
      : shard_index_(shard_index),
        num_shards_(num_shards),
        store_(store),
        counters_(counters),
        clocks_(clocks),
        started_(absl::Now()) {}

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

 private:
  const uint32_t shard_index_;
  const uint32_t num_shards_;
  embedding::EmbeddingStore* const store_;
  const RequestCounters* const counters_;
  ClockCoordinator* const clocks_;
  const absl::Time started_;
};

}  // namespace ps::server

#endif  // PS_SERVER_ADMIN_SERVICE_H_
