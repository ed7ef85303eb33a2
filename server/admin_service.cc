#include "server/admin_service.h"

#include <algorithm>
#include <vector>

#include "server/grpc_status.h"

namespace ps::server {

grpc::ServerUnaryReactor* AdminService::ListTables(
    grpc::CallbackServerContext* context, const ListTablesRequest*,
    ListTablesResponse* response) {
  for (embedding::TableStats& stats : store_->ListTables()) {
    TableInfo* info = response->add_tables();
    *info->mutable_spec() = std::move(stats.spec);
    info->set_estimated_rows(stats.estimated_rows);
    info->set_disk_bytes(stats.disk_bytes);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetRow(
    grpc::CallbackServerContext* context, const GetRowRequest* request,
    GetRowResponse* response) {
  std::vector<float> weights;
  bool stored = false;
  absl::Status status =
      store_->GetRow(request->table(), request->key(), &weights, &stored);
  if (status.ok()) {
    response->mutable_values()->Add(weights.begin(), weights.end());
    response->set_stored(stored);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ShardStats(
    grpc::CallbackServerContext* context, const ShardStatsRequest*,
    ShardStatsResponse* response) {
  const embedding::StoreStats stats = store_->Stats();
  response->set_shard_index(shard_index_);
  response->set_num_shards(num_shards_);
  response->set_pull_requests(counters_->pull_requests.load());
  response->set_push_requests(counters_->push_requests.load());
  response->set_rows_pulled(stats.rows_pulled);
  response->set_rows_pushed(stats.rows_pushed);
  response->set_hot_tier_bytes(stats.hot_tier_bytes);
  response->set_hot_tier_budget_bytes(stats.hot_tier_budget_bytes);
  response->set_hot_tier_hits(stats.hot_tier_hits);
  response->set_hot_tier_misses(stats.hot_tier_misses);
  response->set_rocksdb_live_bytes(stats.disk_bytes);
  response->set_push_log_bytes(stats.push_log_bytes);
  response->set_disk_lookups(stats.disk_lookups);
  response->set_duplicate_pushes(stats.duplicate_pushes);
  response->set_push_log_dropped_bytes(stats.push_log_dropped_bytes);
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::WorkerClocks(
    grpc::CallbackServerContext* context, const WorkerClocksRequest*,
    WorkerClocksResponse* response) {
  int64_t live_min = -1, live_max = -1;
  for (const ClockCoordinator::WorkerClock& clock : clocks_->Snapshot()) {
    WorkerClocksResponse::Worker* worker = response->add_workers();
    worker->set_worker(clock.worker);
    worker->set_clock(clock.clock);
    worker->set_live(clock.live);
    worker->set_finished(clock.finished);
    if (clock.live) {
      live_min = live_min < 0 ? clock.clock : std::min(live_min, clock.clock);
      live_max = std::max(live_max, clock.clock);
    }
  }
  response->set_clock_spread(live_min < 0 ? 0 : live_max - live_min);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace ps::server
