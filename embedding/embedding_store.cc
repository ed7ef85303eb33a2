// EmbeddingStore's construction, opening and closing, and the core every
// job of the store shares: finding tables, grouping keys by stripe, loading
// rows into the hot tier, and the store's stats. The jobs themselves live in
// embedding_store_<job>.cc (tables, expiry, pull, push, write_back, replay,
// checkpoint, slots, replication), the way RocksDB splits DBImpl over
// db_impl_*.cc.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/chunk_arena.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/push_record.h"
#include "embedding/stripes.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// Segments of an eighth of the log's budget, so that deleting them can
// bring the log back under it; at most 64 MiB, at least 4 KiB.
uint64_t SegmentBytes(uint64_t max_push_log_bytes) {
  return std::clamp<uint64_t>(max_push_log_bytes / 8, 4 << 10, 64 << 20);
}

}  // namespace

absl::Duration WriteBackInterval(const StoreOptions& options) {
  if (options.write_back_interval > absl::ZeroDuration())
    return options.write_back_interval;
  return options.durability == Durability::kWal ? absl::Seconds(10)
                                                : absl::Seconds(1);
}

int DefaultStripeCount() {
  const int threads =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(4 * threads, 8, 256);
}

absl::StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Open(
    const StoreOptions& given) {
  StoreOptions options = given;
  if (options.num_stripes == 0) options.num_stripes = DefaultStripeCount();
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("the store needs a data_dir");
  }
  if (options.num_stripes < 1) {
    return absl::InvalidArgumentError("num_stripes must be at least 1");
  }
  RocksStoreOptions rocks_options;
  rocks_options.path = options.data_dir;
  rocks_options.block_cache_bytes = options.rocksdb_block_cache_bytes;
  rocks_options.write_buffer_bytes = options.rocksdb_write_buffer_bytes;
  rocks_options.sync_wal = options.sync_wal;
  rocks_options.max_tables = options.max_tables;
  if (options.max_dropped_rows_remembered == 0) {
    return absl::InvalidArgumentError(
        "max_dropped_rows_remembered must be at least 1");
  }
  // What an earlier process dropped is not known: the log is complete from
  // now on.
  auto dropped_rows = std::make_shared<DroppedRowLog>(
      options.max_dropped_rows_remembered, EmbeddingStoreImpl::NowSeconds());
  rocks_options.on_expired = [dropped_rows](uint32_t table, uint64_t key,
                                            uint32_t when_s) {
    dropped_rows->Record(table, key, when_s);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<RocksStore> rocks,
                   RocksStore::Open(rocks_options));
  std::unique_ptr<EmbeddingStoreImpl> store(
      new EmbeddingStoreImpl(options, dropped_rows, std::move(rocks)));

  PushLogOptions log_options;
  log_options.dir = options.data_dir + "/push_log";
  log_options.segment_bytes = SegmentBytes(options.max_push_log_bytes);
  log_options.sync = options.sync_wal;
  // Every segment opens with the ledger as it stands, so the ledger of
  // pushes whose segments were deleted survives in the oldest one left.
  log_options.segment_preamble = [ledger = &store->ledger_] {
    return EncodeLedgerRecord(ledger->Serialize());
  };
  ASSIGN_OR_RETURN(store->push_log_, PushLog::Open(log_options));
  {
    absl::MutexLock lock(&store->tables_mu_);
    for (const StoredTable& table : store->rocks_->opened_tables())
      RETURN_IF_ERROR(store->AddTable(table, /*created_empty=*/false));
  }
  RETURN_IF_ERROR(store->ReplayPushLog());
  ASSIGN_OR_RETURN(auto moved_ledgers, store->rocks_->ReadMovedLedgers());
  {
    // Nothing else sees the store yet; the lock is for the analysis.
    absl::MutexLock lock(&store->moved_ledgers_mu_);
    for (const auto& [source, ledger] : moved_ledgers) {
      auto& merged = store->moved_ledgers_[source];
      merged = std::make_unique<PushLedger>();
      RETURN_IF_ERROR(merged->Merge(ledger));
    }
  }
  // Only now: a row's disk copy may be older than its updates in the log
  // replayed above, which must land on it, not on a fresh row.
  store->StartExpiry();
  store->flusher_ = std::thread([s = store.get()] { s->PeriodicFlushLoop(); });
  store->opened_ = true;
  return store;
}

EmbeddingStoreImpl::EmbeddingStoreImpl(
    const StoreOptions& options, std::shared_ptr<DroppedRowLog> dropped_rows,
    std::unique_ptr<RocksStore> rocks)
    : options_(options),
      dropped_rows_(std::move(dropped_rows)),
      rocks_(std::move(rocks)),
      ledger_(options.max_workers),
      stripe_map_(options.num_stripes) {
  const size_t per_stripe = options.cache_bytes / options.num_stripes;
  for (int i = 0; i < options.num_stripes; ++i) {
    stripes_.push_back(
        std::make_unique<Stripe>(i, per_stripe, options_.hot_tier_huge_pages));
  }
}

EmbeddingStoreImpl::~EmbeddingStoreImpl() {
  if (flusher_.joinable()) {
    {
      absl::MutexLock lock(&flush_mu_);
      stop_flushing_ = true;
    }
    flusher_.join();
  }
  // A store whose Open() failed (a damaged log, say) is left as it was.
  if (!opened_) return;
  absl::Status flushed = Flush();
  if (!flushed.ok()) LOG(ERROR) << "final write-back failed: " << flushed;
}

absl::StatusOr<const EmbeddingStoreImpl::Table*> EmbeddingStoreImpl::FindTable(
    absl::string_view name) const {
  absl::ReaderMutexLock lock(&tables_mu_);
  auto it = tables_by_name_.find(name);
  if (it == tables_by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no table named \"", name, "\""));
  }
  return it->second;
}

absl::StatusOr<const EmbeddingStoreImpl::Table*>
EmbeddingStoreImpl::FindTableById(TableId id) const {
  absl::ReaderMutexLock lock(&tables_mu_);
  if (id >= tables_.size() || tables_[id] == nullptr) {
    return absl::DataLossError(absl::StrCat("no table with id ", id));
  }
  return tables_[id].get();
}

uint32_t EmbeddingStoreImpl::NowSeconds() {
  return static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now()));
}

size_t EmbeddingStoreImpl::StripeOf(uint64_t key) const {
  return stripe_map_.StripeOf(key);
}

void EmbeddingStoreImpl::GroupByStripe(absl::Span<const uint64_t> keys,
                                       std::vector<uint32_t>* order,
                                       std::vector<uint32_t>* starts) const {
  const size_t num_stripes = stripes_.size();
  std::vector<uint32_t> stripe_of(keys.size());
  starts->assign(num_stripes + 1, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    stripe_of[i] = static_cast<uint32_t>(StripeOf(keys[i]));
    ++(*starts)[stripe_of[i] + 1];
  }
  for (size_t s = 0; s < num_stripes; ++s) (*starts)[s + 1] += (*starts)[s];
  std::vector<uint32_t> next(starts->begin(), starts->end() - 1);
  order->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*order)[next[stripe_of[i]]++] = static_cast<uint32_t>(i);
  }
}

absl::Status EmbeddingStoreImpl::LoadRows(const Table& table, Stripe& stripe,
                                          absl::Span<const uint64_t> keys,
                                          bool create,
                                          std::vector<CachedRow*>* rows,
                                          std::vector<CachedRow*>* created) {
  std::vector<CachedRow*> found_rows(keys.size());
  std::vector<uint32_t> missing_positions;
  std::vector<uint64_t> missing;
  stripe.cache.FindMany(table.id, keys, absl::MakeSpan(found_rows),
                        table.row_floats);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found_rows[i] != nullptr && ExpiredInMemory(table, *found_rows[i])) {
      // Its disk copy is as old: both count as gone.
      stripe.cache.Erase(table.id, found_rows[i]);
      found_rows[i] = nullptr;
      ++rows_expired_in_memory_;
    }
    if (found_rows[i] == nullptr) {
      missing_positions.push_back(static_cast<uint32_t>(i));
      missing.push_back(keys[i]);
    }
  }
  if (!missing.empty()) {
    std::vector<std::string> values;
    std::vector<bool> found;
    if (table.created_empty && !stripe.evicted_rows) {
      // Nothing of this table's rows in this stripe ever left the hot tier,
      // so none of `missing` is stored (see Table::created_empty).
      found.assign(missing.size(), false);
    } else {
      disk_lookups_ += missing.size();
      RETURN_IF_ERROR(rocks_->MultiGet(table.id, missing, &values, &found));
    }
    std::vector<float> row(table.row_floats);
    const uint32_t now_s = NowSeconds();
    for (size_t i = 0; i < missing.size(); ++i) {
      CachedRow*& loaded = found_rows[missing_positions[i]];
      LogPosition position;
      RowMeta meta;
      if (found[i]) {
        const absl::Status decoded = RocksStore::DecodeRow(
            values[i], absl::MakeSpan(row), &position, &meta);
        if (!decoded.ok()) {
          return absl::DataLossError(absl::StrCat("table ", table.spec.name(),
                                                  " key ", missing[i], ": ",
                                                  decoded.message()));
        }
        // Expired, not yet compacted away: as good as gone.
        if (opened_ && table.expiry.Expired(meta, now_s)) found[i] = false;
      }
      if (found[i]) {
        loaded =
            stripe.cache.Insert(table.id, missing[i], row, /*dirty=*/false);
        if (position.run == log_run_) loaded->log_sequence = position.sequence;
        loaded->updated_at_s = meta.updated_at_s;
        loaded->push_count = meta.push_count;
      } else if (create) {
        table.initializer.Fill(missing[i],
                               absl::MakeSpan(row.data(), table.dim));
        table.optimizer->InitState(table.dim, row.data() + table.dim);
        loaded = stripe.cache.Insert(table.id, missing[i], row, /*dirty=*/true);
        if (created != nullptr) created->push_back(loaded);
      }
    }
  }
  if (rows != nullptr) *rows = std::move(found_rows);
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::PushLogHealth() const {
  return push_log_ != nullptr ? push_log_->health() : absl::OkStatus();
}

StoreStats EmbeddingStoreImpl::Stats() {
  StoreStats stats;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stats.hot_tier_bytes += stripe->cache.bytes();
    stats.hot_tier_budget_bytes += stripe->cache.budget_bytes();
    stats.hot_tier_allocated_bytes += stripe->cache.allocated_entry_bytes();
  }
  stats.hot_tier_mapped_bytes = ChunkArena::Global().mapped_bytes();
  stats.hot_tier_hits = hits_.load();
  stats.hot_tier_misses = misses_.load();
  stats.rows_pulled = rows_pulled_.load();
  stats.rows_pushed = rows_pushed_.load();
  stats.rows_admitted = rows_admitted_.load();
  stats.rows_expired_in_memory = rows_expired_in_memory_.load();
  stats.rows_expired_on_disk = rocks_->rows_expired();
  stats.keys_held_back = keys_held_back_.load();
  stats.disk_lookups = disk_lookups_.load();
  stats.push_log_bytes = push_log_->live_bytes();
  stats.duplicate_pushes = duplicate_pushes_.load();
  stats.push_log_dropped_bytes = push_log_dropped_bytes_;
  stats.disk_bytes = rocks_->TotalDiskBytes();
  return stats;
}

}  // namespace ps::embedding
