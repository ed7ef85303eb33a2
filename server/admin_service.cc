#include "server/admin_service.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/build_info.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "model/export_format.h"
#include "net/grpc_status.h"
#include "server/bearer_token.h"

namespace ps::server {
namespace {

// The coordinator's record of where a worker is in a followed directory,
// as admin answers carry it (nothing when it follows none).
void SetInputPosition(const ClockCoordinator::InputPosition& position,
                      InputPosition* to) {
  if (position.file.empty()) return;
  to->set_file(position.file);
  to->set_file_examples(position.file_examples);
}

// An export's rows of one table, into its part.
class PartSink : public embedding::StoreSnapshots::ExportSink {
 public:
  explicit PartSink(model::ExportTableWriter* writer) : writer_(writer) {}
  absl::Status Put(uint64_t key, absl::Span<const float> row) override {
    return writer_->Put(key, row);
  }
  absl::Status Delete(uint64_t key) override { return writer_->Delete(key); }

 private:
  model::ExportTableWriter* const writer_;
};

}  // namespace

using ::ps::net::ToGrpcStatus;

grpc::ServerUnaryReactor* AdminService::ListTables(
    grpc::CallbackServerContext* context, const ListTablesRequest*,
    ListTablesResponse* response) {
  for (embedding::TableStats& stats : store_->tables().ListTables()) {
    TableInfo* info = response->add_tables();
    *info->mutable_spec() = std::move(stats.spec);
    info->set_estimated_rows(stats.estimated_rows);
    info->set_disk_bytes(stats.disk_bytes);
    info->set_learning_rate(stats.learning_rate);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetRow(
    grpc::CallbackServerContext* context, const GetRowRequest* request,
    GetRowResponse* response) {
  std::vector<float> weights, state;
  bool stored = false;
  absl::Status status =
      store_->GetRow(request->table(), request->key(), &weights, &stored,
                     request->optimizer_state() ? &state : nullptr);
  if (status.ok()) {
    response->mutable_values()->Add(weights.begin(), weights.end());
    response->mutable_optimizer_state()->Add(state.begin(), state.end());
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
  response->set_num_shards(slots_->num_shards());
  response->set_pull_requests(counters_->pull_requests.load());
  response->set_push_requests(counters_->push_requests.load());
  response->set_rows_pulled(stats.rows_pulled);
  response->set_rows_pushed(stats.rows_pushed);
  response->set_hot_tier_bytes(stats.hot_tier_bytes);
  response->set_hot_tier_budget_bytes(stats.hot_tier_budget_bytes);
  response->set_hot_tier_allocated_bytes(stats.hot_tier_allocated_bytes);
  response->set_hot_tier_hits(stats.hot_tier_hits);
  response->set_hot_tier_misses(stats.hot_tier_misses);
  response->set_rocksdb_live_bytes(stats.disk_bytes);
  response->set_push_log_bytes(stats.push_log_bytes);
  response->set_disk_lookups(stats.disk_lookups);
  response->set_duplicate_pushes(stats.duplicate_pushes);
  response->set_push_log_dropped_bytes(stats.push_log_dropped_bytes);
  response->set_rows_admitted(stats.rows_admitted);
  response->set_keys_held_back(stats.keys_held_back);
  response->set_rows_expired_in_memory(stats.rows_expired_in_memory);
  response->set_rows_expired_on_disk(stats.rows_expired_on_disk);
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  response->set_build_commit(std::string(BuildCommit()));
  response->set_build_time(std::string(BuildTime()));
  const std::shared_ptr<const SlotMap> map = slots_->current();
  response->set_slot_map_epoch(map->epoch());
  uint32_t owned = 0;
  for (const auto& [first, last] : map->RangesOf(options_.shard_index))
    owned += last - first + 1;
  response->set_slots_owned(owned);
  if (options_.replication_stats) {
    options_.replication_stats(response->mutable_replication());
  }
  const std::vector<double>& bounds = CallStats::LatencyBoundsSeconds();
  response->mutable_latency_bounds_seconds()->Add(bounds.begin(), bounds.end());
  for (CallStats::Method& method : call_stats_->Snapshot()) {
    ShardStatsResponse::Method* out = response->add_methods();
    out->set_method(std::move(method.name));
    out->set_calls(method.calls);
    out->set_errors(method.errors);
    out->mutable_latency_buckets()->Add(method.latency_buckets.begin(),
                                        method.latency_buckets.end());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::WorkerClocks(
    grpc::CallbackServerContext* context, const WorkerClocksRequest*,
    WorkerClocksResponse* response) {
  if (absl::Status serving = clocks_->Serving(); !serving.ok())
    return Reply(context, serving);
  int64_t live_min = -1, live_max = -1;
  for (const ClockCoordinator::WorkerClock& clock : clocks_->Snapshot()) {
    WorkerClocksResponse::Worker* worker = response->add_workers();
    worker->set_worker(clock.worker);
    worker->set_clock(clock.clock);
    worker->set_live(clock.live);
    worker->set_finished(clock.finished);
    worker->set_examples(clock.examples);
    SetInputPosition(clock.input_position, worker->mutable_input_position());
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

absl::Status AdminService::AuthorizeWrite(
    const grpc::CallbackServerContext& context) const {
  if (read_only_.load()) {
    return absl::FailedPreconditionError(options_.read_only);
  }
  return Authorize(context);
}

absl::Status AdminService::Authorize(
    const grpc::CallbackServerContext& context) const {
  return CheckBearerToken(
      context, options_.admin_token,
      "the admin token, as it changes the shard's state (ps_admin "
      "--token_file)");
}

grpc::ServerUnaryReactor* AdminService::SetLearningRate(
    grpc::CallbackServerContext* context, const SetLearningRateRequest* request,
    SetLearningRateResponse* response) {
  absl::Status status = AuthorizeWrite(*context);
  if (status.ok()) {
    for (const embedding::TableStats& table : store_->tables().ListTables()) {
      if (table.spec.name() == request->table())
        response->set_previous_learning_rate(table.learning_rate);
    }
    status = store_->tables().SetLearningRate(request->table(),
                                              request->learning_rate());
  }
  if (status.ok()) {
    LOG(INFO) << "learning rate of " << request->table() << " set to "
              << request->learning_rate() << " (was "
              << response->previous_learning_rate() << ") by "
              << context->peer();
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::DropTable(
    grpc::CallbackServerContext* context, const DropTableRequest* request,
    DropTableResponse*) {
  absl::Status status = AuthorizeWrite(*context);
  if (status.ok() && !request->force()) {
    std::vector<std::string> live;
    for (const ClockCoordinator::WorkerClock& clock : clocks_->Snapshot())
      if (clock.live) live.push_back(absl::StrCat(clock.worker));
    if (!live.empty()) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "worker(s) ", absl::StrJoin(live, ", "),
          " hold leases on this shard and may be training table ",
          request->table(), ": stop them first, or drop it with force"));
    }
  }
  if (status.ok()) status = store_->tables().DropTable(request->table());
  if (status.ok()) {
    LOG(INFO) << "table " << request->table() << " dropped by "
              << context->peer() << (request->force() ? " (forced)" : "");
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ExpireTable(
    grpc::CallbackServerContext* context, const ExpireTableRequest* request,
    ExpireTableResponse* response) {
  absl::Status status = Authorize(*context);
  if (status.ok()) {
    absl::StatusOr<embedding::ExpireOutcome> expired =
        store_->tables().Expire(request->table());
    if (expired.ok()) {
      response->set_rows_in_memory(expired->rows_in_memory);
      response->set_rows_on_disk(expired->rows_on_disk);
    }
    status = expired.status();
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status AdminService::StopShard(grpc::CallbackServerContext& context) {
  RETURN_IF_ERROR(Authorize(context));
  if (!options_.stop) {
    return absl::FailedPreconditionError(
        "this shard cannot be stopped over the admin API");
  }
  LOG(INFO) << "stop asked by " << context.peer();
  options_.stop();
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminService::Stop(
    grpc::CallbackServerContext* context, const StopRequest*, StopResponse*) {
  return Reply(context, StopShard(*context));
}

grpc::ServerUnaryReactor* AdminService::Drain(
    grpc::CallbackServerContext* context, const DrainRequest*, DrainResponse*) {
  return Reply(context, StopShard(*context));
}

grpc::ServerUnaryReactor* AdminService::SetSlotMap(
    grpc::CallbackServerContext* context, const SetSlotMapRequest* request,
    SetSlotMapResponse*) {
  absl::Status status = AuthorizeWrite(*context);
  if (status.ok()) {
    absl::StatusOr<SlotMap> next = SlotMap::FromSpec(request->slot_map());
    if (!next.ok()) {
      status = next.status();
    } else if (bool switching = false;
               (status = moves_->MayGiveAway(
                    *next, request->allow_without_move(), &switching))
                   .ok()) {
      status =
          options_.set_slot_map
              ? options_.set_slot_map(request->expected_slot_map_epoch(), *next)
              : slots_->Replace(request->expected_slot_map_epoch(), *next);
      if (switching) moves_->AfterChange();
    }
    if (status.ok()) {
      LOG(INFO) << "slot map epoch " << request->expected_slot_map_epoch()
                << " -> " << next->epoch() << ", set by " << context->peer();
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetSlotMap(
    grpc::CallbackServerContext* context, const GetSlotMapRequest*,
    GetSlotMapResponse* response) {
  *response->mutable_slot_map() = slots_->current()->ToSpec();
  response->set_shard_index(options_.shard_index);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::Reply(
    grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

namespace {

// `rows` of `table` (of `row_floats` floats each) as they travel.
void PackSlotRows(const std::string& table, uint32_t row_floats,
                  const std::vector<embedding::SlotRow>& rows,
                  SlotRows* packed) {
  packed->set_table(table);
  packed->set_row_floats(row_floats);
  std::string* keys = packed->mutable_keys();
  std::string* floats = packed->mutable_floats();
  std::string* metas = packed->mutable_metas();
  for (const embedding::SlotRow& row : rows) {
    keys->append(reinterpret_cast<const char*>(&row.key), sizeof(row.key));
    floats->append(reinterpret_cast<const char*>(row.floats.data()),
                   row.floats.size() * sizeof(float));
    const uint32_t meta[2] = {row.meta.updated_at_s, row.meta.push_count};
    metas->append(reinterpret_cast<const char*>(meta), sizeof(meta));
  }
}

// The rows `packed` carries; INVALID_ARGUMENT for lengths that disagree.
absl::StatusOr<std::vector<embedding::SlotRow>> UnpackSlotRows(
    const SlotRows& packed) {
  const size_t count = packed.keys().size() / sizeof(uint64_t);
  const size_t row_bytes = size_t{packed.row_floats()} * sizeof(float);
  if (packed.keys().size() % sizeof(uint64_t) != 0 || row_bytes == 0 ||
      packed.floats().size() != count * row_bytes ||
      packed.metas().size() != count * 2 * sizeof(uint32_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot rows of table ", packed.table(), ": ", packed.keys().size(),
        " bytes of keys, ", packed.floats().size(), " of floats and ",
        packed.metas().size(), " of metadata do not go together"));
  }
  std::vector<embedding::SlotRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&rows[i].key, packed.keys().data() + i * sizeof(uint64_t),
                sizeof(uint64_t));
    rows[i].floats.resize(packed.row_floats());
    std::memcpy(rows[i].floats.data(), packed.floats().data() + i * row_bytes,
                row_bytes);
    uint32_t meta[2];
    std::memcpy(meta, packed.metas().data() + i * sizeof(meta), sizeof(meta));
    rows[i].meta.updated_at_s = meta[0];
    rows[i].meta.push_count = meta[1];
  }
  return rows;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::BeginSlotMove(
    grpc::CallbackServerContext* context, const BeginSlotMoveRequest* request,
    BeginSlotMoveResponse* response) {
  if (absl::Status authorized = AuthorizeWrite(*context); !authorized.ok())
    return Reply(context, authorized);
  const absl::Duration lease = request->lease_ms() == 0
                                   ? absl::Seconds(30)
                                   : absl::Milliseconds(request->lease_ms());
  absl::StatusOr<std::shared_ptr<const SlotMap>> map = moves_->Begin(
      request->first_slot(), request->last_slot(), request->to_shard(), lease);
  if (!map.ok()) return Reply(context, map.status());
  *response->mutable_slot_map() = (*map)->ToSpec();
  for (const embedding::TableStats& table : store_->tables().ListTables())
    response->add_tables(table.spec.name());
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::ReadSlotRows(
    grpc::CallbackServerContext* context, const ReadSlotRowsRequest* request,
    ReadSlotRowsResponse* response) {
  if (absl::Status authorized = Authorize(*context); !authorized.ok())
    return Reply(context, authorized);
  if (request->changed() && request->table().empty()) {
    // Only the pause (a move of no table yet).
    uint64_t left = 0;
    const absl::Status paused =
        moves_->ReadChanged("", request->pause(), 0, &left).status();
    for (const std::string& table : moves_->ChangedTables())
      response->add_changed_tables(table);
    // Every push of the slots applied here is in the ledger now: the target
    // keeps it, to answer their retries if this shard cannot.
    if (paused.ok() && request->pause()) {
      MovedLedger* own = response->add_ledgers();
      own->set_shard(options_.shard_index);
      own->set_ledger(store_->ledger().SerializeLedger());
      for (auto& [source, ledger] : store_->ledger().SerializeMovedLedgers()) {
        MovedLedger* brought = response->add_ledgers();
        brought->set_shard(source);
        brought->set_ledger(std::move(ledger));
      }
    }
    return Reply(context, paused);
  }
  absl::StatusOr<embedding::TableOptimizer> optimizer =
      store_->tables().GetTableOptimizer(request->table());
  absl::StatusOr<TableSpec> spec =
      store_->tables().GetTableSpec(request->table());
  if (!optimizer.ok() || !spec.ok()) {
    return Reply(context, optimizer.ok() ? spec.status() : optimizer.status());
  }
  bool done = false;
  const size_t max_rows = request->max_rows() == 0 ? 4096 : request->max_rows();
  absl::StatusOr<std::vector<embedding::SlotRow>> rows;
  if (request->changed()) {
    uint64_t left = 0;
    rows = moves_->ReadChanged(request->table(), request->pause(), max_rows,
                               &left);
    done = left == 0;
    response->set_changed_left(left);
  } else {
    rows = moves_->Read(request->table(),
                        request->from_start()
                            ? std::nullopt
                            : std::optional<uint64_t>(request->after()),
                        max_rows, &done);
  }
  if (!rows.ok()) return Reply(context, rows.status());
  PackSlotRows(request->table(), spec->dim() + optimizer->state_floats, *rows,
               response->mutable_rows());
  if (optimizer->learning_rate_multiplier != 1.0f) {
    response->mutable_rows()->set_learning_rate(
        spec->optimizer().learning_rate() *
        optimizer->learning_rate_multiplier);
  }
  *response->mutable_rows()->mutable_spec() = *std::move(spec);
  response->set_done(done);
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::EndSlotMove(
    grpc::CallbackServerContext* context, const EndSlotMoveRequest* request,
    EndSlotMoveResponse* response) {
  if (absl::Status authorized = Authorize(*context); !authorized.ok())
    return Reply(context, authorized);
  absl::StatusOr<SlotMoveSource::Ended> ended = moves_->End(request->commit());
  if (ended.ok()) {
    response->set_committed(ended->committed);
    response->set_rows_deleted(ended->rows_deleted);
  }
  return Reply(context, ended.status());
}

absl::Status AdminService::HandleWriteSlotRows(
    const WriteSlotRowsRequest& request) {
  if (request.rows().has_spec() &&
      absl::IsNotFound(
          store_->tables().GetTableSpec(request.rows().table()).status())) {
    if (request.rows().spec().name() != request.rows().table()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rows of table ", request.rows().table(),
          " come with the spec of table ", request.rows().spec().name()));
    }
    ASSIGN_OR_RETURN(const bool declared,
                     store_->tables().DeclareTable(request.rows().spec()));
    if (declared) {
      LOG(INFO) << "table " << request.rows().table()
                << " declared as the moving slots' source declared it";
    }
  }
  if (request.rows().learning_rate() > 0) {
    // The source's ps_admin set-lr, unless this shard's table has its own.
    ASSIGN_OR_RETURN(
        const embedding::TableOptimizer optimizer,
        store_->tables().GetTableOptimizer(request.rows().table()));
    if (optimizer.learning_rate_multiplier == 1.0f) {
      RETURN_IF_ERROR(store_->tables().SetLearningRate(
          request.rows().table(), request.rows().learning_rate()));
    }
  }
  for (const MovedLedger& moved : request.moved_ledgers()) {
    RETURN_IF_ERROR(
        store_->ledger().MergeMovedLedger(moved.shard(), moved.ledger()));
  }
  if (request.rows().keys().empty()) {
    return request.durable() ? MakeMovedRowsDurable() : absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::vector<embedding::SlotRow> rows,
                   UnpackSlotRows(request.rows()));
  // The map cannot give this shard the slots between the check and the
  // write (a late write must not replace rows pushed since).
  absl::ReaderMutexLock no_change(&slots_->push_lock());
  const std::shared_ptr<const SlotMap> map = slots_->current();
  for (const embedding::SlotRow& row : rows) {
    if (map->ShardForKey(row.key) == options_.shard_index) {
      return absl::FailedPreconditionError(
          absl::StrCat("key ", row.key,
                       " of a moving slot belongs to this shard already "
                       "(slot map epoch ",
                       map->epoch(), "): its row is not replaced"));
    }
  }
  // An SST file over a range of keys that holds this shard's own rows
  // would overlap them (a memtable flush per page, files stacking up in
  // level 0): such a page goes through the hot tier instead.
  bool ingest = request.ingest();
  if (ingest) {
    uint32_t low = kNumSlots, high = 0;
    for (const embedding::SlotRow& row : rows) {
      low = std::min(low, SlotForKey(row.key));
      high = std::max(high, SlotForKey(row.key));
    }
    for (uint32_t slot = low; slot <= high && ingest; ++slot)
      ingest = map->ShardForSlot(slot) != options_.shard_index;
  }
  RETURN_IF_ERROR(
      ingest ? store_->slots().IngestSlotRows(request.rows().table(), rows)
             : store_->slots().WriteSlotRows(request.rows().table(), rows));
  return request.durable() ? MakeMovedRowsDurable() : absl::OkStatus();
}

absl::Status AdminService::MakeMovedRowsDurable() {
  RETURN_IF_ERROR(store_->Flush());
  // The rows went into the replication feed as they were written: the
  // slots may switch to this shard only once its replicas hold them too.
  return options_.await_replicas ? options_.await_replicas() : absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminService::WriteSlotRows(
    grpc::CallbackServerContext* context, const WriteSlotRowsRequest* request,
    WriteSlotRowsResponse* response) {
  if (absl::Status authorized = AuthorizeWrite(*context); !authorized.ok())
    return Reply(context, authorized);
  response->set_instance(instance_);
  const absl::Status written = HandleWriteSlotRows(*request);
  // A durable write waited for the replicas to hold everything already.
  if (!written.ok() || request->durable() || request->rows().keys().empty() ||
      !options_.await_feed_room) {
    return Reply(context, written);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  options_.await_feed_room(
      [reactor](absl::Status room) { reactor->Finish(ToGrpcStatus(room)); });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::PurgeSlots(
    grpc::CallbackServerContext* context, const PurgeSlotsRequest* request,
    PurgeSlotsResponse* response) {
  if (absl::Status authorized = AuthorizeWrite(*context); !authorized.ok())
    return Reply(context, authorized);
  absl::ReaderMutexLock no_change(&slots_->push_lock());
  const std::shared_ptr<const SlotMap> map = slots_->current();
  const uint32_t source = request->source_shard();
  const uint32_t first = request->first_slot();
  const uint32_t last = request->last_slot();
  absl::StatusOr<uint64_t> deleted =
      source == options_.shard_index
          ? absl::InvalidArgumentError("a shard purges no slots of its own")
          : store_->slots().DeleteSlotRows([&](uint32_t slot) {
              return slot >= first && slot <= last &&
                     map->ShardForSlot(slot) == source;
            });
  if (deleted.ok()) response->set_rows_deleted(*deleted);
  response->set_instance(instance_);
  return Reply(context, deleted.status());
}

grpc::ServerUnaryReactor* AdminService::BeginCut(
    grpc::CallbackServerContext* context, const BeginCutRequest* request,
    BeginCutResponse* response) {
  absl::Status status = Authorize(*context);
  if (status.ok()) {
    const absl::Duration lease = request->lease_ms() == 0
                                     ? absl::Seconds(60)
                                     : absl::Milliseconds(request->lease_ms());
    absl::StatusOr<ClockCoordinator::BegunCut> cut = clocks_->BeginCut(lease);
    if (cut.ok()) {
      response->set_cut(cut->cut);
      response->set_id(cut->id);
    }
    status = cut.status();
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::CutStatus(
    grpc::CallbackServerContext* context, const CutStatusRequest*,
    CutStatusResponse* response) {
  // It renews the cut's lease, which holds every worker: as guarded as
  // beginning one.
  absl::Status authorized = Authorize(*context);
  if (authorized.ok()) authorized = clocks_->Serving();
  if (authorized.ok()) {
    const ClockCoordinator::CutStatus status = clocks_->GetCutStatus();
    response->set_cut(status.cut);
    response->set_id(status.id);
    response->set_ready(status.ready);
    for (const ClockCoordinator::WorkerClock& clock : status.workers) {
      CutStatusResponse::Worker* worker = response->add_workers();
      worker->set_worker(clock.worker);
      worker->set_clock(clock.clock);
      worker->set_examples(clock.examples);
      SetInputPosition(clock.input_position, worker->mutable_input_position());
      worker->set_live(clock.live);
      worker->set_finished(clock.finished);
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(authorized));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::EndCut(
    grpc::CallbackServerContext* context, const EndCutRequest* request,
    EndCutResponse* response) {
  absl::Status status = Authorize(*context);
  if (status.ok()) status = clocks_->Serving();
  if (status.ok()) response->set_ended(clocks_->EndCut(request->id()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::SnapshotShard(
    grpc::CallbackServerContext* context, const SnapshotShardRequest* request,
    SnapshotShardResponse* response) {
  absl::Status status = Authorize(*context);
  if (status.ok() && request->dir().empty()) {
    status = absl::InvalidArgumentError("a snapshot needs a directory");
  }
  if (status.ok()) {
    const absl::Time start = absl::Now();
    const std::string path =
        absl::StrCat(request->dir(), "/shard-", options_.shard_index, "-of-",
                     slots_->num_shards());
    std::error_code error;
    std::filesystem::create_directories(request->dir(), error);
    status = error
                 ? absl::FailedPreconditionError(absl::StrCat(
                       "cannot create ", request->dir(), ": ", error.message()))
                 : store_->snapshots().Checkpoint(path);
    if (status.ok()) {
      uint64_t bytes = 0;
      for (const auto& entry :
           std::filesystem::recursive_directory_iterator(path, error)) {
        if (entry.is_regular_file()) bytes += entry.file_size();
      }
      response->set_path(path);
      response->set_bytes(bytes);
      response->set_shard_index(options_.shard_index);
      response->set_num_shards(slots_->num_shards());
      for (embedding::TableStats& table : store_->tables().ListTables())
        *response->add_tables() = std::move(table.spec);
      response->set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
      LOG(INFO) << "snapshot of shard " << options_.shard_index << " in "
                << path << ": " << bytes << " bytes in " << response->seconds()
                << " s";
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::StatusOr<std::vector<bool>> AdminService::ExportedSlots(
    const ExportShardRequest& request) const {
  std::shared_ptr<const SlotMap> map = slots_->current();
  if (request.has_slot_map()) {
    absl::StatusOr<SlotMap> recorded =
        SlotMap::FromSpec(request.slot_map(), map->num_shards());
    if (!recorded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the export's slot map: ", recorded.status().message()));
    }
    map = std::make_shared<const SlotMap>(*std::move(recorded));
  }
  std::vector<bool> owned(kNumSlots);
  for (uint32_t slot = 0; slot < kNumSlots; ++slot)
    owned[slot] = map->ShardForSlot(slot) == options_.shard_index;
  return owned;
}

grpc::ServerUnaryReactor* AdminService::ExportShard(
    grpc::CallbackServerContext* context, const ExportShardRequest* request,
    ExportShardResponse* response) {
  absl::Status status = Authorize(*context);
  if (status.ok() && (request->dir().empty() || request->tables().empty())) {
    status = absl::InvalidArgumentError("an export needs a dir and tables");
  }
  for (int i = 0; status.ok() && i < request->tables_size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (request->tables(i) == request->tables(j)) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "an export names table ", request->tables(i), " twice"));
        break;
      }
    }
  }
  const uint64_t clock_instance = clock_instance_.load();
  if (status.ok() && request->delta() &&
      request->changed_since_clock_instance() != 0 &&
      request->changed_since_clock_instance() != clock_instance) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard_index,
        " restarted or was promoted from a replica since the export before: "
        "another clock stamps its rows now, and what changed since that "
        "export is not known here"));
  }
  if (status.ok()) {
    const absl::Time start = absl::Now();
    // Each table's part, written in the export format (model/).
    const bool half = request->format() == ExportManifest::FP16;
    std::vector<std::unique_ptr<model::ExportTableWriter>> writers;
    std::vector<std::unique_ptr<PartSink>> sinks;
    std::vector<embedding::StoreSnapshots::ExportTarget> targets;
    for (const std::string& table : request->tables()) {
      writers.push_back(std::make_unique<model::ExportTableWriter>(
          absl::StrCat(request->dir(), "/", table, "/part-",
                       options_.shard_index, "-of-", slots_->num_shards(),
                       ".sst"),
          half));
      sinks.push_back(std::make_unique<PartSink>(writers.back().get()));
      targets.push_back({table, sinks.back().get()});
    }
    embedding::StoreSnapshots::ExportOptions export_options;
    if (request->delta())
      export_options.changed_since_s = request->changed_since_s();
    absl::StatusOr<std::vector<bool>> owned = ExportedSlots(*request);
    absl::StatusOr<uint32_t> exported_at_s = absl::UnknownError("not yet");
    if (owned.ok()) {
      export_options.slots = *std::move(owned);
      exported_at_s = store_->snapshots().Export(targets, export_options);
    } else {
      exported_at_s = owned.status();
    }
    status = exported_at_s.status();
    for (size_t t = 0; status.ok() && t < writers.size(); ++t) {
      status = writers[t]->Finish();
    }
    if (status.ok()) {
      for (size_t t = 0; t < writers.size(); ++t) {
        const model::ExportTableWriter& writer = *writers[t];
        ExportShardResponse::Table* table = response->add_tables();
        table->set_name(targets[t].table);
        if (writer.rows() > 0) table->set_path(writer.path());
        table->set_rows(writer.rows());
        table->set_bytes(writer.bytes());
        table->set_deleted_rows(writer.deleted_rows());
      }
      response->set_exported_at_s(*exported_at_s);
      response->set_clock_instance(clock_instance);
      response->set_shard_index(options_.shard_index);
      response->set_num_shards(slots_->num_shards());
      response->set_key_format_version(2);
      response->set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace ps::server
