#include "server/admin_service.h"

#include <algorithm>
#include <vector>

#include "glog/logging.h"
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
  response->set_shard_index(options_.shard_index);
  response->set_num_shards(options_.num_shards);
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

absl::Status AdminService::Authorize(
    const grpc::CallbackServerContext& context) const {
  if (options_.admin_token.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto found = metadata.find("authorization");
  if (found == metadata.end()) {
    return absl::UnauthenticatedError(
        "this call changes the shard's state and needs the admin token: "
        "send 'authorization: Bearer <token>' (ps_admin --token_file)");
  }
  const std::string expected = "Bearer " + options_.admin_token;
  const grpc::string_ref& given = found->second;
  // Constant time over the expected length: no early exit on a mismatch.
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char c = i < given.size() ? given.data()[i] : 0;
    difference |= static_cast<unsigned char>(c ^ expected[i]);
  }
  if (difference != 0) {
    return absl::UnauthenticatedError("wrong admin token");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminService::Drain(
    grpc::CallbackServerContext* context, const DrainRequest*, DrainResponse*) {
  absl::Status status = Authorize(*context);
  if (status.ok() && !options_.drain) {
    status = absl::FailedPreconditionError(
        "this shard cannot be drained over the admin API");
  }
  if (status.ok()) {
    LOG(INFO) << "drain asked by " << context->peer();
    options_.drain();
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace ps::server
