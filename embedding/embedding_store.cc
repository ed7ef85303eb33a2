#include "embedding/embedding_store.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "rocksdb/sst_file_writer.h"

namespace ps::embedding {
namespace {

constexpr size_t kMaxTableNameLength = 128;

absl::Status ValidateTableName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTableNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table name must have 1 to ", kMaxTableNameLength, " characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("table name \"", name,
                       "\" may use only letters, digits, '_', '-' and '.'"));
    }
  }
  // Exports and checkpoints name files after tables: a name is never a
  // path of its own (".", "..") nor climbs out of one.
  if (name[0] == '.' || name[0] == '-' || absl::StrContains(name, "..")) {
    return absl::InvalidArgumentError(
        absl::StrCat("table name \"", name,
                     "\" must not start with '.' or '-' nor hold \"..\""));
  }
  return absl::OkStatus();
}

// A push-log record starts with a header: kRecordMarker and the record's
// kind (uint32 each). A kPushRecord's header goes on with its origin's
// worker and the rows the push updated (uint32 each), then the origin's
// incarnation and sequence (uint64 each); one section per stripe the push
// touched follows. A kLedgerRecord holds a PushLedger snapshot (each
// segment's preamble). Records written before headers existed start with a
// section; a table id is never the marker. A kScaledPushRecord is a
// kPushRecord whose header goes on with the push's learning-rate scale
// (float) and 4 bytes of zeros. Host byte order throughout.
constexpr uint32_t kRecordMarker = 0xFFFFFFFF;
constexpr uint32_t kPushRecord = 1;
constexpr uint32_t kLedgerRecord = 2;
constexpr uint32_t kScaledPushRecord = 3;
constexpr size_t kPushHeaderBytes = 4 * sizeof(uint32_t) + 2 * sizeof(uint64_t);
constexpr size_t kScaledPushHeaderBytes = kPushHeaderBytes + 2 * sizeof(float);

// A section: the table id, the stripe and the key count (uint32 each), the
// stripe's sequence number for the update (uint64), the keys (uint64), then
// each key's summed gradient (dim floats).
constexpr size_t kSectionHeaderBytes = 3 * sizeof(uint32_t) + sizeof(uint64_t);
constexpr size_t kSequenceOffset = 3 * sizeof(uint32_t);

struct SectionHeader {
  uint32_t table_id = 0;
  uint32_t stripe = 0;
  uint32_t count = 0;
  uint64_t sequence = 0;
};

SectionHeader ReadSectionHeader(const char* bytes) {
  SectionHeader header;
  std::memcpy(&header.table_id, bytes, sizeof(uint32_t));
  std::memcpy(&header.stripe, bytes + 4, sizeof(uint32_t));
  std::memcpy(&header.count, bytes + 8, sizeof(uint32_t));
  std::memcpy(&header.sequence, bytes + kSequenceOffset, sizeof(uint64_t));
  return header;
}

// Segments of an eighth of the log's budget, so that deleting them can
// bring the log back under it; at most 64 MiB, at least 4 KiB.
uint64_t SegmentBytes(uint64_t max_push_log_bytes) {
  return std::clamp<uint64_t>(max_push_log_bytes / 8, 4 << 10, 64 << 20);
}

void AppendBytes(const void* data, size_t size, std::string* out) {
  out->append(static_cast<const char*>(data), size);
}

}  // namespace

absl::Duration WriteBackInterval(const StoreOptions& options) {
  if (options.write_back_interval > absl::ZeroDuration())
    return options.write_back_interval;
  return options.durability == Durability::kWal ? absl::Seconds(10)
                                                : absl::Seconds(1);
}

absl::StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Open(
    const StoreOptions& options) {
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
  ASSIGN_OR_RETURN(std::unique_ptr<RocksStore> rocks,
                   RocksStore::Open(rocks_options));
  std::unique_ptr<EmbeddingStore> store(
      new EmbeddingStore(options, std::move(rocks)));

  PushLogOptions log_options;
  log_options.dir = options.data_dir + "/push_log";
  log_options.segment_bytes = SegmentBytes(options.max_push_log_bytes);
  log_options.sync = options.sync_wal;
  // Every segment opens with the ledger as it stands, so the ledger of
  // pushes whose segments were deleted survives in the oldest one left.
  log_options.segment_preamble = [ledger = &store->ledger_] {
    std::string record;
    AppendBytes(&kRecordMarker, sizeof(kRecordMarker), &record);
    AppendBytes(&kLedgerRecord, sizeof(kLedgerRecord), &record);
    return record + ledger->Serialize();
  };
  ASSIGN_OR_RETURN(store->push_log_, PushLog::Open(log_options));
  {
    absl::MutexLock lock(&store->tables_mu_);
    for (const StoredTable& table : store->rocks_->opened_tables())
      RETURN_IF_ERROR(store->AddTable(table, /*created_empty=*/false));
  }
  RETURN_IF_ERROR(store->ReplayPushLog());
  // Only now: a row's disk copy may be older than its updates in the log
  // replayed above, which must land on it, not on a fresh row.
  store->StartExpiry();
  store->flusher_ = std::thread([s = store.get()] { s->PeriodicFlushLoop(); });
  store->opened_ = true;
  return store;
}

EmbeddingStore::EmbeddingStore(const StoreOptions& options,
                               std::unique_ptr<RocksStore> rocks)
    : options_(options),
      rocks_(std::move(rocks)),
      ledger_(options.max_workers) {
  const size_t per_stripe = options.cache_bytes / options.num_stripes;
  for (int i = 0; i < options.num_stripes; ++i) {
    stripes_.push_back(std::make_unique<Stripe>(i, per_stripe));
  }
}

EmbeddingStore::~EmbeddingStore() {
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

absl::Status EmbeddingStore::AddTable(const StoredTable& stored,
                                      bool created_empty) {
  const TableSpec& spec = stored.spec;
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(spec.optimizer()));
  const int dim = static_cast<int>(spec.dim());
  auto table = std::unique_ptr<Table>(new Table{
      stored.id, spec, dim, dim + optimizer->StateFloats(dim),
      std::move(optimizer), Initializer(spec.initializer()), created_empty});
  table->dropped = stored.dropped;
  if (spec.row_ttl_s() > 0 && !stored.dropped) {
    table->expiry.row_floats = table->row_floats;
    table->expiry.ttl_s = spec.row_ttl_s();
    table->expiry.evict_below_count = spec.evict_below_count();
    // A table declared while the store runs expires from now; one found at
    // open, once the log is replayed (StartExpiry()).
    if (opened_) StartTableExpiry(*table);
  }
  if (spec.admit_after() >= 2) {
    table->admission = std::make_unique<AdmissionSketch>(
        options_.admission_sketch_bytes, spec.admit_after());
  }
  table->learning_rate = spec.optimizer().learning_rate();
  if (stored.learning_rate > 0.0f) {
    table->learning_rate_multiplier =
        stored.learning_rate / spec.optimizer().learning_rate();
    table->learning_rate = stored.learning_rate;
  }
  if (!stored.dropped) tables_by_name_[spec.name()] = table.get();
  if (tables_.size() <= stored.id) tables_.resize(stored.id + 1);
  tables_[stored.id] = std::move(table);
  return absl::OkStatus();
}

absl::StatusOr<bool> EmbeddingStore::DeclareTable(const TableSpec& raw_spec) {
  RETURN_IF_ERROR(ValidateTableName(raw_spec.name()));
  if (raw_spec.dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", raw_spec.name(), " needs a dim of at least 1"));
  }
  if (raw_spec.dim() > options_.max_dim) {
    return absl::ResourceExhaustedError(
        absl::StrCat("table ", raw_spec.name(), " has dim ", raw_spec.dim(),
                     ", more than the server's max_dim ", options_.max_dim));
  }
  const float scale = raw_spec.initializer().scale();
  if (!std::isfinite(scale) || scale < 0.0f) {
    return absl::InvalidArgumentError(
        "initializer scale must be finite and >= 0");
  }
  if (raw_spec.evict_below_count() > 0 && raw_spec.row_ttl_s() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", raw_spec.name(),
        " has evict_below_count without row_ttl_s: rows expire only after "
        "row_ttl_s"));
  }
  if (raw_spec.admit_after() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", raw_spec.name(), " admits keys after ",
                     raw_spec.admit_after(), " pushes; at most 255"));
  }
  // Validates the hyper-parameters.
  RETURN_IF_ERROR(Optimizer::Create(raw_spec.optimizer()).status());
  TableSpec spec = raw_spec;
  *spec.mutable_optimizer() = Optimizer::WithDefaults(raw_spec.optimizer());

  absl::MutexLock lock(&tables_mu_);
  auto existing = tables_by_name_.find(spec.name());
  if (existing != tables_by_name_.end()) {
    // A table declared before model cards existed matches one declared
    // with a card (and keeps its spec).
    TableSpec comparable = spec;
    if (!existing->second->spec.has_model()) comparable.clear_model();
    if (google::protobuf::util::MessageDifferencer::Equals(
            existing->second->spec, comparable)) {
      return false;
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "table ", spec.name(), " already exists with a different spec: have {",
        existing->second->spec.ShortDebugString(), "}, asked for {",
        spec.ShortDebugString(), "}"));
  }
  StoredTable stored;
  ASSIGN_OR_RETURN(stored.id, rocks_->CreateTable(spec));
  stored.spec = spec;
  RETURN_IF_ERROR(AddTable(stored, /*created_empty=*/true));
  return true;
}

absl::StatusOr<const EmbeddingStore::Table*> EmbeddingStore::FindTable(
    absl::string_view name) const {
  absl::ReaderMutexLock lock(&tables_mu_);
  auto it = tables_by_name_.find(name);
  if (it == tables_by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no table named \"", name, "\""));
  }
  return it->second;
}

absl::StatusOr<const EmbeddingStore::Table*> EmbeddingStore::FindTableById(
    TableId id) const {
  absl::ReaderMutexLock lock(&tables_mu_);
  if (id >= tables_.size() || tables_[id] == nullptr) {
    return absl::DataLossError(absl::StrCat("no table with id ", id));
  }
  return tables_[id].get();
}

void EmbeddingStore::StartTableExpiry(const Table& table) {
  ExpiryRule on_disk = table.expiry;
  // A disk copy goes only once a newer update of the row held in memory
  // must have been written back over it (twice the write-back interval):
  // deleting it earlier would lose that row's training to a crash before
  // the write-back.
  const absl::Duration interval = WriteBackInterval(options_);
  on_disk.ttl_s += static_cast<uint32_t>(
      absl::ToInt64Seconds(absl::Ceil(2 * interval, absl::Seconds(1))));
  rocks_->SetExpiry(table.id, on_disk);
  any_expiry_ = true;
}

bool EmbeddingStore::ExpiredInMemory(const Table& table,
                                     const CachedRow& row) const {
  // A dirty row holds an update RocksDB does not have yet: it is recent,
  // or its write-back is failing, and then it must not be dropped.
  return opened_ && table.expiry.ttl_s > 0 && !row.dirty &&
         table.expiry.Expired(RowMeta{row.updated_at_s, row.push_count},
                              NowSeconds());
}

void EmbeddingStore::StartExpiry() {
  absl::ReaderMutexLock lock(&tables_mu_);
  for (const auto& table : tables_) {
    if (table != nullptr && !table->dropped && table->expiry.ttl_s > 0)
      StartTableExpiry(*table);
  }
}

uint32_t EmbeddingStore::NowSeconds() {
  return static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now()));
}

size_t EmbeddingStore::ExpireRowsInMemory(Stripe& stripe,
                                          const Table* only_table) {
  const uint32_t now_s = NowSeconds();
  // The expiring tables, by id, read once.
  std::vector<const Table*> expiring;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& table : tables_) {
      if (table == nullptr || table->dropped || table->expiry.ttl_s == 0)
        continue;
      if (only_table != nullptr && table.get() != only_table) continue;
      if (expiring.size() <= table->id) expiring.resize(table->id + 1);
      expiring[table->id] = table.get();
    }
  }
  if (expiring.empty()) return 0;
  // A part of the stripe per hold of its lock, so that pulls and pushes of
  // the stripe wait for a part's sweep (~0.2 ms), not the whole stripe's.
  constexpr size_t kSlotsPerLock = 16384;
  std::vector<CachedRow*> expired;
  std::vector<uint32_t> expired_tables;
  size_t expired_rows = 0;
  RowCache::RowCursor cursor;
  for (bool more = true; more;) {
    absl::MutexLock lock(&stripe.mu);
    expired.clear();
    expired_tables.clear();
    more = stripe.cache.ForEachRowFrom(
        &cursor, kSlotsPerLock,
        [&](uint32_t table_id, CachedRow& row, absl::Span<float>) {
          // A dirty row has an update RocksDB does not: it goes once
          // written.
          if (row.dirty || table_id >= expiring.size()) return;
          const Table* table = expiring[table_id];
          if (table != nullptr &&
              table->expiry.Expired(RowMeta{row.updated_at_s, row.push_count},
                                    now_s)) {
            expired.push_back(&row);
            expired_tables.push_back(table_id);
          }
        });
    // The copies on disk are expired too: a load treats them as absent,
    // and compaction drops them. Erasing frees slots without moving rows:
    // the cursor stays valid.
    for (size_t i = 0; i < expired.size(); ++i)
      stripe.cache.Erase(expired_tables[i], expired[i]);
    expired_rows += expired.size();
  }
  rows_expired_in_memory_ += expired_rows;
  return expired_rows;
}

absl::StatusOr<ExpireOutcome> EmbeddingStore::Expire(
    absl::string_view table_name) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  if (table->expiry.ttl_s == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table_name, " has no row_ttl_s: its rows never expire"));
  }
  ExpireOutcome outcome;
  for (auto& stripe : stripes_)
    outcome.rows_in_memory += ExpireRowsInMemory(*stripe, table);
  ASSIGN_OR_RETURN(outcome.rows_on_disk, rocks_->CompactTable(table->id));
  LOG(INFO) << "expired table " << table_name << ": " << outcome.rows_in_memory
            << " rows in memory, " << outcome.rows_on_disk << " on disk";
  return outcome;
}

absl::Status EmbeddingStore::SetLearningRate(absl::string_view table_name,
                                             float learning_rate) {
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a learning rate must be positive and finite, not ", learning_rate));
  }
  absl::MutexLock admin(&admin_mu_);
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  RETURN_IF_ERROR(rocks_->SetLearningRate(table->spec.name(), learning_rate));
  table->learning_rate_multiplier =
      learning_rate / table->spec.optimizer().learning_rate();
  table->learning_rate = learning_rate;
  LOG(INFO) << "table " << table_name << ": learning rate " << learning_rate
            << " from the next push on (declared "
            << table->spec.optimizer().learning_rate() << ")";
  return absl::OkStatus();
}

absl::Status EmbeddingStore::DropTable(absl::string_view table_name) {
  absl::MutexLock admin(&admin_mu_);
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  // No push applies while the table goes: none can write a row of it
  // (or a push-log record naming it) after its rows leave the hot tier.
  absl::WriterMutexLock gate(&push_gate_);
  // On disk first: if that fails, nothing changed.
  RETURN_IF_ERROR(rocks_->RecordDrop(table->id, table->spec));
  {
    absl::MutexLock lock(&tables_mu_);
    tables_by_name_.erase(table->spec.name());
    table->dropped = true;
  }
  uint64_t dropped_rows = 0;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    // A write-back in flight may hold copies of the table's rows: let it
    // land (in the family, which is still there) before they go.
    stripe->mu.Await(absl::Condition(
        +[](Stripe* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !s->write_back_in_flight;
        },
        stripe.get()));
    dropped_rows += stripe->cache.EraseTable(table->id);
  }
  if (absl::Status dropped = rocks_->DropFamily(table->id); !dropped.ok()) {
    // The tombstone stands: the next open drops the family.
    LOG(WARNING) << "table " << table_name
                 << " is dropped, but its files stay until the shard "
                    "restarts: "
                 << dropped;
  }
  LOG(INFO) << "dropped table " << table_name << " (" << dropped_rows
            << " rows were in memory)";
  return absl::OkStatus();
}

absl::StatusOr<TableSpec> EmbeddingStore::GetTableSpec(
    absl::string_view name) const {
  ASSIGN_OR_RETURN(const Table* table, FindTable(name));
  return table->spec;
}

size_t EmbeddingStore::StripeOf(uint64_t key) const {
  // Fibonacci hashing: the high bits of the product are well mixed, and
  // independent of the low bits that routing (base/routing.h) looks at.
  return ((key * 0x9E3779B97F4A7C15ULL) >> 32) % stripes_.size();
}

void EmbeddingStore::GroupByStripe(absl::Span<const uint64_t> keys,
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

absl::Status EmbeddingStore::LoadRows(const Table& table, Stripe& stripe,
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
        if (position.epoch == log_epoch_)
          loaded->log_sequence = position.sequence;
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

absl::Status EmbeddingStore::EvictAndWrite(Stripe& stripe,
                                           RocksStore::Batch* batch) {
  std::vector<EvictedRow> evicted;
  const size_t rows_before = stripe.cache.size();
  // Over budget until the write-back in flight lands, rather than let an
  // evicted row's newer copy reach RocksDB before its older one.
  if (!stripe.write_back_in_flight) stripe.cache.EvictToBudget(&evicted);
  if (stripe.cache.size() < rows_before) stripe.evicted_rows = true;
  // Each row carries the log sequence of its last update, so replay skips
  // the records it already includes: no mark, and no other row, is needed.
  for (const EvictedRow& row : evicted) {
    batch->Put(row.table_id, row.key, row.values,
               LogPosition{log_epoch_, row.log_sequence},
               RowMeta{row.updated_at_s, row.push_count});
  }
  const absl::Status written = rocks_->Write(batch);
  if (!written.ok()) {
    // Keep the evicted updates in memory rather than lose them.
    for (const EvictedRow& row : evicted) {
      CachedRow* kept = stripe.cache.Insert(row.table_id, row.key, row.values,
                                            /*dirty=*/true);
      kept->log_sequence = row.log_sequence;
      kept->updated_at_s = row.updated_at_s;
      kept->push_count = row.push_count;
    }
  }
  return written;
}

void EmbeddingStore::EvictOrKeep(Stripe& stripe) {
  RocksStore::Batch batch = rocks_->NewBatch();
  if (absl::Status evicted = EvictAndWrite(stripe, &batch); !evicted.ok()) {
    LOG_EVERY_N(WARNING, 100)
        << "writing evicted rows failed (they stay in "
        << "memory, over the hot tier's budget): " << evicted;
  }
}

EmbeddingStore::TakenRows EmbeddingStore::TakeDirtyRows(
    Stripe& stripe, RocksStore::Batch* batch) {
  TakenRows taken;
  // In key order (RocksDB's: bytewise over the little-endian key): a
  // skiplist memtable inserts a sorted run at a fraction of the cost of
  // scattered keys.
  struct Dirty {
    uint32_t table_id;
    uint64_t order;
    CachedRow* row;
    absl::Span<float> values;
  };
  std::vector<Dirty> dirty;
  stripe.cache.ForEachDirty(
      [&](uint32_t table_id, CachedRow& row, absl::Span<float> values) {
        dirty.push_back({table_id, __builtin_bswap64(row.key), &row, values});
      });
  std::sort(dirty.begin(), dirty.end(), [](const Dirty& a, const Dirty& b) {
    return a.table_id != b.table_id ? a.table_id < b.table_id
                                    : a.order < b.order;
  });
  for (const Dirty& d : dirty) {
    CachedRow& row = *d.row;
    batch->Put(d.table_id, row.key, d.values,  // copies the values
               LogPosition{log_epoch_, row.log_sequence},
               RowMeta{row.updated_at_s, row.push_count});
    taken.rows.emplace_back(&row, row.version);
  }
  if (options_.durability == Durability::kWal) {
    // Updates applied from here on take sequences at or above the mark and
    // are appended after this moment, so in this segment or a later one.
    batch->SetLogMark(stripe.index, stripe.next_log_sequence);
    taken.log_start_segment = push_log_->current_segment();
  }
  return taken;
}

absl::Status EmbeddingStore::ReleaseLog(Stripe& stripe,
                                        const TakenRows& taken) {
  if (options_.durability != Durability::kWal) return absl::OkStatus();
  stripe.log_start_segment.store(taken.log_start_segment);
  uint64_t needed = taken.log_start_segment;
  for (const auto& other : stripes_)
    needed = std::min(needed, other->log_start_segment.load());
  return push_log_->DeleteSegmentsBefore(needed);
}

absl::Status EmbeddingStore::ReplayPushLog() {
  uint64_t epoch = 0;
  absl::flat_hash_map<uint32_t, uint64_t> marks;
  std::string ledger;
  RETURN_IF_ERROR(rocks_->ReadLogState(&epoch, &marks, &ledger));
  if (!ledger.empty()) RETURN_IF_ERROR(ledger_.Merge(ledger));
  ASSIGN_OR_RETURN(std::vector<uint64_t> epochs, push_log_->ListEpochs());
  if (!epochs.empty() && epochs.back() > epoch) {
    return absl::DataLossError(
        absl::StrCat(options_.data_dir, "/push_log has segments of epoch ",
                     epochs.back(), " but the store is at epoch ", epoch,
                     ": the log and the rows do not belong together"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PushLog::EpochReader> reader,
                   push_log_->ReadEpoch(epoch));
  // Rows read from here on know which of this epoch's updates they hold.
  log_epoch_ = epoch;

  // First pass: where each section above its stripe's mark lies. Sections
  // are applied by stripe, then sequence (application order), which need
  // not be the order they were appended in; reading them back one at a time
  // keeps a long log out of memory.
  struct Section {
    uint32_t stripe;
    uint64_t sequence;
    PushLog::Location location;
    uint64_t offset;  // in the record
    uint64_t bytes;
    float learning_rate_scale;  // the record's
  };
  std::vector<Section> sections;
  uint64_t records = 0;
  RETURN_IF_ERROR(reader->ForEach(
      [&](PushLog::Location location,
          absl::string_view record) -> absl::Status {
        ++records;
        size_t sections_offset = 0;
        float learning_rate_scale = 1.0f;
        RETURN_IF_ERROR(
            ReadRecordHeader(record, &sections_offset, &learning_rate_scale));
        for (uint64_t offset = sections_offset; offset < record.size();) {
          auto corrupt = [&](absl::string_view why) {
            return absl::DataLossError(absl::StrCat(
                "push-log record ", records, " of epoch ", epoch, ": ", why));
          };
          if (record.size() - offset < kSectionHeaderBytes)
            return corrupt("truncated section header");
          const SectionHeader header =
              ReadSectionHeader(record.data() + offset);
          absl::StatusOr<const Table*> table = FindTableById(header.table_id);
          if (!table.ok()) return corrupt(table.status().message());
          const uint64_t bytes =
              kSectionHeaderBytes +
              uint64_t{header.count} *
                  (sizeof(uint64_t) + (*table)->dim * sizeof(float));
          if (record.size() - offset < bytes) {
            return corrupt(absl::StrCat("a section of ", header.count,
                                        " keys of dim ", (*table)->dim,
                                        " does not fit"));
          }
          auto mark = marks.find(header.stripe);
          // Below the mark: written back with the rows before the process
          // stopped.
          if (mark == marks.end() || header.sequence >= mark->second) {
            sections.push_back(Section{header.stripe, header.sequence, location,
                                       offset, bytes, learning_rate_scale});
          }
          offset += bytes;
        }
        return absl::OkStatus();
      },
      options_.push_log_recovery));
  push_log_dropped_bytes_ = reader->dropped_bytes();
  std::sort(
      sections.begin(), sections.end(), [](const Section& a, const Section& b) {
        return std::tie(a.stripe, a.sequence) < std::tie(b.stripe, b.sequence);
      });

  // Second pass: apply. Nothing is evicted until the replayed rows are
  // written back below. A replayed update counts as made now.
  const uint32_t replay_now_s = NowSeconds();
  uint64_t rows = 0;
  std::string bytes;
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  for (const Section& section : sections) {
    RETURN_IF_ERROR(reader->ReadAt(section.location, section.offset,
                                   section.bytes, &bytes));
    const SectionHeader header = ReadSectionHeader(bytes.data());
    ASSIGN_OR_RETURN(const Table* table, FindTableById(header.table_id));
    if (table->dropped) continue;
    const size_t dim = table->dim;
    // Copied out so that they are aligned.
    keys.resize(header.count);
    std::memcpy(keys.data(), bytes.data() + kSectionHeaderBytes,
                keys.size() * sizeof(uint64_t));
    gradients.resize(keys.size() * dim);
    std::memcpy(
        gradients.data(),
        bytes.data() + kSectionHeaderBytes + keys.size() * sizeof(uint64_t),
        gradients.size() * sizeof(float));
    // The section's stripe today may differ (--hot_tier_stripes).
    std::vector<uint32_t> order, starts;
    GroupByStripe(keys, &order, &starts);
    std::vector<uint64_t> stripe_keys;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      if (starts[s] == starts[s + 1]) continue;
      stripe_keys.clear();
      for (uint32_t i = starts[s]; i < starts[s + 1]; ++i)
        stripe_keys.push_back(keys[order[i]]);
      Stripe& stripe = *stripes_[s];
      absl::MutexLock lock(&stripe.mu);
      std::vector<CachedRow*> loaded;
      RETURN_IF_ERROR(
          LoadRows(*table, stripe, stripe_keys, /*create=*/true, &loaded));
      for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
        CachedRow* row = loaded[i - starts[s]];
        // Written (evicted) after this update: it holds it already. A key's
        // records all come from one stripe, so their sequences compare.
        if (row->log_sequence >= section.sequence) continue;
        float* weights = row->floats();
        // Finite: the push that logged it checked the same update.
        table->optimizer->Apply(&gradients[order[i] * dim], table->dim,
                                section.learning_rate_scale, weights,
                                weights + dim);
        row->log_sequence = section.sequence;
        ++row->version;
        row->dirty = true;
        row->updated_at_s = replay_now_s;
        if (row->push_count != UINT32_MAX) ++row->push_count;
        ++rows;
      }
    }
  }

  // The replayed rows and the new epoch in one synced write: from then on
  // the old segments are not needed, and a crash before they are deleted
  // leaves segments of an older epoch, which the next open deletes unread.
  RocksStore::Batch batch = rocks_->NewBatch();
  std::vector<CachedRow*> replayed;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->cache.ForEachDirty(
        [&](uint32_t table_id, CachedRow& row, absl::Span<float> values) {
          batch.Put(table_id, row.key, values,
                    LogPosition{epoch + 1, /*sequence=*/0},
                    RowMeta{row.updated_at_s, row.push_count});
          replayed.push_back(&row);
        });
  }
  // Every push the ledger knows is in these rows or written back already.
  batch.StartLogEpoch(epoch + 1, ledger_.Serialize());
  RETURN_IF_ERROR(rocks_->WriteSynced(&batch));
  RETURN_IF_ERROR(push_log_->DeleteEpochsBefore(epoch + 1));
  push_log_->StartEpoch(epoch + 1);
  log_epoch_ = epoch + 1;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->cache.ForEachRow([](uint32_t, CachedRow& row, absl::Span<float>) {
      row.dirty = false;
      row.log_sequence = 0;  // numbers of the old epoch
    });
    RocksStore::Batch empty = rocks_->NewBatch();
    RETURN_IF_ERROR(EvictAndWrite(*stripe, &empty));
  }
  if (records > 0) {
    LOG(INFO) << "replayed " << sections.size() << " push-log sections of "
              << records << " records (" << reader->bytes() << " bytes, "
              << rows << " row updates) into " << replayed.size() << " rows";
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::ReadRecordHeader(absl::string_view record,
                                              size_t* sections_offset,
                                              float* learning_rate_scale) {
  uint32_t marker = 0, kind = 0;
  if (record.size() < sizeof(marker)) {
    return absl::DataLossError("a push-log record of fewer than 4 bytes");
  }
  std::memcpy(&marker, record.data(), sizeof(marker));
  if (marker != kRecordMarker) {
    *sections_offset = 0;  // written before records had a header
    return absl::OkStatus();
  }
  if (record.size() >= 2 * sizeof(uint32_t))
    std::memcpy(&kind, record.data() + sizeof(marker), sizeof(kind));
  if (kind == kLedgerRecord) {
    *sections_offset = record.size();
    return ledger_.Merge(record.substr(2 * sizeof(uint32_t)));
  }
  const size_t header_bytes =
      kind == kScaledPushRecord ? kScaledPushHeaderBytes : kPushHeaderBytes;
  if ((kind != kPushRecord && kind != kScaledPushRecord) ||
      record.size() < header_bytes) {
    return absl::DataLossError(absl::StrCat("a push-log record of kind ", kind,
                                            " and ", record.size(), " bytes"));
  }
  PushOrigin origin;
  uint32_t rows_updated = 0;
  std::memcpy(&origin.worker, record.data() + 8, sizeof(origin.worker));
  std::memcpy(&rows_updated, record.data() + 12, sizeof(rows_updated));
  std::memcpy(&origin.incarnation, record.data() + 16,
              sizeof(origin.incarnation));
  std::memcpy(&origin.sequence, record.data() + 24, sizeof(origin.sequence));
  *learning_rate_scale = 1.0f;
  if (kind == kScaledPushRecord) {
    std::memcpy(learning_rate_scale, record.data() + kPushHeaderBytes,
                sizeof(float));
    if (!(*learning_rate_scale > 0.0f) ||
        !std::isfinite(*learning_rate_scale)) {
      return absl::DataLossError(
          absl::StrCat("a push-log record with a learning-rate scale of ",
                       *learning_rate_scale));
    }
  }
  // Whether its sections are above their marks or not, the push is applied.
  if (origin.tracked()) ledger_.MergeApplied(origin, rows_updated);
  *sections_offset = header_bytes;
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Pull(absl::string_view table_name,
                                  absl::Span<const uint64_t> keys,
                                  absl::Span<float> out) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  return PullRows(*table, keys, table->dim, out);
}

absl::StatusOr<EmbeddingStore::TableOptimizer>
EmbeddingStore::GetTableOptimizer(absl::string_view table_name) const {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  TableOptimizer optimizer;
  optimizer.spec = table->spec.optimizer();
  optimizer.learning_rate_multiplier = table->learning_rate_multiplier.load();
  optimizer.state_floats = table->row_floats - table->dim;
  return optimizer;
}

absl::Status EmbeddingStore::PullWithState(absl::string_view table_name,
                                           absl::Span<const uint64_t> keys,
                                           absl::Span<float> out) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  return PullRows(*table, keys, table->row_floats, out);
}

absl::Status EmbeddingStore::PullRows(const Table& table,
                                      absl::Span<const uint64_t> keys,
                                      size_t floats_per_row,
                                      absl::Span<float> out) {
  const size_t floats = floats_per_row;
  if (out.size() != keys.size() * floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull of ", keys.size(), " keys of ", floats, " floats needs ",
        keys.size() * floats, " floats of output, got ", out.size()));
  }
  std::vector<uint32_t> order, starts;
  GroupByStripe(keys, &order, &starts);
  std::vector<uint32_t> misses;
  std::vector<uint64_t> stripe_keys, missing_keys;
  std::vector<CachedRow*> found;
  uint64_t hits = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    misses.clear();
    // Look every row up first, then copy: the lookups' cache misses
    // overlap instead of coming one after another.
    stripe_keys.clear();
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i)
      stripe_keys.push_back(keys[order[i]]);
    found.resize(stripe_keys.size());
    stripe.cache.FindMany(table.id, stripe_keys, absl::MakeSpan(found), floats);
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
      const uint32_t position = order[i];
      const CachedRow* row = found[i - starts[s]];
      // An expired row is left for LoadRows() below to drop.
      if (row != nullptr && !ExpiredInMemory(table, *row)) {
        std::memcpy(&out[position * floats], row->floats(),
                    floats * sizeof(float));
        ++hits;
      } else {
        misses.push_back(position);
      }
    }
    if (misses.empty()) continue;
    missing_keys.clear();
    for (uint32_t position : misses) missing_keys.push_back(keys[position]);
    std::sort(missing_keys.begin(), missing_keys.end());
    missing_keys.erase(std::unique(missing_keys.begin(), missing_keys.end()),
                       missing_keys.end());
    RETURN_IF_ERROR(LoadRows(table, stripe, missing_keys, /*create=*/false));
    for (uint32_t position : misses) {
      float* destination = &out[position * floats];
      const CachedRow* row = stripe.cache.Find(table.id, keys[position]);
      if (row != nullptr) {
        std::memcpy(destination, row->floats(), floats * sizeof(float));
      } else {
        table.initializer.Fill(keys[position],
                               absl::MakeSpan(destination, table.dim));
        if (floats > static_cast<size_t>(table.dim))
          table.optimizer->InitState(table.dim, destination + table.dim);
      }
    }
    EvictOrKeep(stripe);
  }
  hits_ += hits;
  misses_ += keys.size() - hits;
  rows_pulled_ += keys.size();
  return absl::OkStatus();
}

struct EmbeddingStore::PendingPush {
  PushOrigin origin;
  float learning_rate_scale = 1.0f;
  // The table, and its weights and optimizer state per row.
  uint32_t table_id = 0;
  size_t row_floats = 0;
  // Distinct keys, first-seen order, and their summed gradients.
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  // GroupByStripe(keys); the stripes touched, ascending (the lock order).
  std::vector<uint32_t> order, starts;
  std::vector<Stripe*> stripes;
  // kWal: the record, and where each touched stripe's section begins.
  std::string record;
  std::vector<size_t> section_offsets;
  PushLog::Ticket ticket;
  // What the update changed, for UndoPush(): rows in `order`'s order, the
  // first `applied` of which were updated from `before`; rows created.
  std::vector<CachedRow*> rows;
  std::vector<float> before;
  size_t applied = 0;
  std::vector<CachedRow*> created;
};

absl::StatusOr<PushOutcome> EmbeddingStore::Push(
    absl::string_view table_name, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, const PushOrigin& origin,
    float learning_rate_scale) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  if (!(learning_rate_scale > 0.0f) || !std::isfinite(learning_rate_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a push's learning-rate scale must be positive and "
                     "finite, not ",
                     learning_rate_scale));
  }
  const size_t dim = table->dim;
  if (gradients.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", keys.size(), " keys to table ", table_name,
                     " (dim ", dim, ") needs ", keys.size() * dim,
                     " gradient floats, got ", gradients.size()));
  }
  if (const int64_t i = FirstNonFinite(gradients); i >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient of key ", keys[i / dim], " (row ", i / dim, ", column ",
        i % dim, ") is ", gradients[i], "; nothing was applied"));
  }
  // A retry of a push applied before gets its first answer, whatever
  // happened to the log since.
  if (origin.tracked()) {
    ASSIGN_OR_RETURN(PushLedger::Claim claim, ledger_.Begin(origin));
    if (claim.duplicate) {
      ++duplicate_pushes_;
      return PushOutcome{claim.rows_updated, /*duplicate=*/true};
    }
  }
  if (options_.durability == Durability::kWal) {
    // A log that failed refuses pushes before they are applied; one that a
    // full disk stopped tries again.
    if (absl::Status health = push_log_->Recover(); !health.ok()) {
      if (origin.tracked()) ledger_.Finish(origin, false, 0);
      return absl::Status(
          health.code(),
          absl::StrCat("the push log failed earlier, so pushes are refused "
                       "until the server restarts (nothing was applied): ",
                       health.message()));
    }
  }
  absl::StatusOr<size_t> updated = 0;
  {
    absl::ReaderMutexLock gate(&push_gate_);
    std::vector<uint64_t> kept_keys, to_count;
    std::vector<float> kept_gradients;
    size_t admitted = 0, held_back = 0;
    const float scale =
        learning_rate_scale * table->learning_rate_multiplier.load();
    if (table->dropped) {
      updated = absl::NotFoundError(
          absl::StrCat("table \"", table_name, "\" was dropped"));
    } else if (!(scale > 0.0f && std::isfinite(scale))) {
      updated = absl::InvalidArgumentError(
          absl::StrCat("the push's learning-rate scale ", learning_rate_scale,
                       " times the table's rate over its declared one is ",
                       scale, "; nothing was applied"));
    } else if (table->admission != nullptr) {
      updated = FilterAdmitted(*table, keys, gradients, &kept_keys,
                               &kept_gradients, &to_count, &admitted);
      if (updated.ok()) {
        held_back = *updated;
        keys = kept_keys;
        gradients = kept_gradients;
      }
    }
    if (updated.ok() && !keys.empty()) {
      updated = ApplyPush(*table, keys, gradients, origin, scale);
    } else if (updated.ok()) {
      updated = 0;  // every key held back
    }
    // Admission counts pushes that were applied, once each.
    if (updated.ok() && table->admission != nullptr) {
      for (uint64_t key : to_count) table->admission->CountPush(key);
      rows_admitted_ += admitted;
      keys_held_back_ += held_back;
    }
  }
  if (origin.tracked()) {
    ledger_.Finish(origin, updated.ok(),
                   updated.ok() ? static_cast<uint32_t>(*updated) : 0);
  }
  RETURN_IF_ERROR(updated.status());
  rows_pushed_ += *updated;
  return PushOutcome{*updated, /*duplicate=*/false};
}

absl::Status EmbeddingStore::PushLogHealth() const {
  return push_log_ != nullptr ? push_log_->health() : absl::OkStatus();
}

absl::StatusOr<size_t> EmbeddingStore::FilterAdmitted(
    const Table& table, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, std::vector<uint64_t>* kept_keys,
    std::vector<float>* kept_gradients, std::vector<uint64_t>* to_count,
    size_t* admitted_keys) {
  // A key named twice in one push counts as one push of it.
  std::vector<uint64_t> distinct(keys.begin(), keys.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<uint32_t> order, starts;
  GroupByStripe(distinct, &order, &starts);
  absl::flat_hash_set<uint64_t> held_back;
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> rows;
  size_t admitted = 0;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    stripe_keys.clear();
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i)
      stripe_keys.push_back(distinct[order[i]]);
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    // Loads the stored ones into the hot tier, where the push finds them.
    RETURN_IF_ERROR(
        LoadRows(table, stripe, stripe_keys, /*create=*/false, &rows));
    for (size_t i = 0; i < stripe_keys.size(); ++i) {
      if (rows[i] != nullptr) continue;
      to_count->push_back(stripe_keys[i]);
      if (table.admission->WouldAdmit(stripe_keys[i])) {
        ++admitted;
      } else {
        held_back.insert(stripe_keys[i]);
      }
    }
    EvictOrKeep(stripe);
  }
  *admitted_keys = admitted;
  const size_t dim = table.dim;
  kept_keys->clear();
  kept_gradients->clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (held_back.contains(keys[i])) continue;
    kept_keys->push_back(keys[i]);
    kept_gradients->insert(kept_gradients->end(), &gradients[i * dim],
                           &gradients[i * dim] + dim);
  }
  return held_back.size();
}

absl::StatusOr<size_t> EmbeddingStore::ApplyPush(
    const Table& table, absl::Span<const uint64_t> keys,
    absl::Span<const float> gradients, const PushOrigin& origin,
    float learning_rate_scale) {
  const size_t dim = table.dim;
  PendingPush push;
  push.origin = origin;
  push.learning_rate_scale = learning_rate_scale;
  push.table_id = table.id;
  push.row_floats = table.row_floats;
  // Sum duplicate keys, keeping first-seen order.
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  slot_of.reserve(keys.size());
  push.keys.reserve(keys.size());
  push.gradients.reserve(gradients.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] = slot_of.try_emplace(keys[i], push.keys.size());
    const float* gradient = &gradients[i * dim];
    if (inserted) {
      push.keys.push_back(keys[i]);
      push.gradients.insert(push.gradients.end(), gradient, gradient + dim);
    } else {
      float* sum = &push.gradients[it->second * dim];
      for (size_t d = 0; d < dim; ++d) sum[d] += gradient[d];
    }
  }
  if (push.keys.size() < keys.size()) {
    if (const int64_t i = FirstNonFinite(push.gradients); i >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the gradients of key ", push.keys[i / dim],
                       ", named more than once, sum to ", push.gradients[i],
                       " in column ", i % dim, "; nothing was applied"));
    }
  }
  GroupByStripe(push.keys, &push.order, &push.starts);
  const bool log_pushes = options_.durability == Durability::kWal;
  if (log_pushes) {
    // The record is built before the stripes are locked; only the sections'
    // sequence numbers are filled in under the locks.
    const bool scaled = learning_rate_scale != 1.0f;
    const uint32_t header[4] = {
        kRecordMarker, scaled ? kScaledPushRecord : kPushRecord, origin.worker,
        static_cast<uint32_t>(push.keys.size())};
    push.record.reserve(
        kScaledPushHeaderBytes + stripes_.size() * kSectionHeaderBytes +
        push.keys.size() * (sizeof(uint64_t) + dim * sizeof(float)));
    AppendBytes(header, sizeof(header), &push.record);
    AppendBytes(&origin.incarnation, sizeof(origin.incarnation), &push.record);
    AppendBytes(&origin.sequence, sizeof(origin.sequence), &push.record);
    if (scaled) {
      const float scale_and_padding[2] = {learning_rate_scale, 0.0f};
      AppendBytes(scale_and_padding, sizeof(scale_and_padding), &push.record);
    }
  }
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (push.starts[s] == push.starts[s + 1]) continue;
    push.stripes.push_back(stripes_[s].get());
    if (!log_pushes) continue;
    push.section_offsets.push_back(push.record.size());
    const uint32_t header[3] = {
        table.id, static_cast<uint32_t>(s),
        static_cast<uint32_t>(push.starts[s + 1] - push.starts[s])};
    const uint64_t sequence = 0;  // filled in under the lock
    AppendBytes(header, sizeof(header), &push.record);
    AppendBytes(&sequence, sizeof(sequence), &push.record);
    for (uint32_t i = push.starts[s]; i < push.starts[s + 1]; ++i) {
      AppendBytes(&push.keys[push.order[i]], sizeof(uint64_t), &push.record);
    }
    for (uint32_t i = push.starts[s]; i < push.starts[s + 1]; ++i) {
      AppendBytes(&push.gradients[push.order[i] * dim], dim * sizeof(float),
                  &push.record);
    }
  }

  for (Stripe* stripe : push.stripes) stripe->mu.Lock();
  absl::Status updated = UpdateLockedStripes(table, push);
  if (updated.ok()) {
    for (Stripe* stripe : push.stripes) EvictOrKeep(*stripe);
  }
  for (auto it = push.stripes.rbegin(); it != push.stripes.rend(); ++it)
    (*it)->mu.Unlock();
  RETURN_IF_ERROR(updated);

  if (log_pushes) {
    if (absl::Status synced = push_log_->Sync(push.ticket); !synced.ok()) {
      return absl::Status(
          synced.code(),
          absl::StrCat(synced.message(),
                       " (this push is applied in memory and is written back "
                       "with its rows, but a machine crash before then loses "
                       "it; later pushes are refused until the server "
                       "restarts)"));
    }
    if (options_.testing_kill_after_push_records > 0 &&
        ++push_records_written_ >= options_.testing_kill_after_push_records) {
      LOG(ERROR) << "testing_kill_after_push_records: killing this process "
                 << "after the push log took a push, before it is answered";
      raise(SIGKILL);
    }
    if (push_log_->live_bytes() > options_.max_push_log_bytes) {
      absl::MutexLock flush_lock(&flush_mu_);
      log_over_budget_ = true;
    }
  }
  return push.keys.size();
}

absl::Status EmbeddingStore::UpdateLockedStripes(const Table& table,
                                                 PendingPush& push) {
  const size_t dim = table.dim;
  const size_t row_floats = push.row_floats;
  // Load (or create) every row first: an I/O error here changes nothing.
  push.rows.resize(push.keys.size());
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> loaded;
  for (Stripe* stripe : push.stripes) {
    const size_t s = stripe->index;
    stripe_keys.clear();
    for (uint32_t i = push.starts[s]; i < push.starts[s + 1]; ++i)
      stripe_keys.push_back(push.keys[push.order[i]]);
    if (absl::Status status = LoadRows(table, *stripe, stripe_keys,
                                       /*create=*/true, &loaded, &push.created);
        !status.ok()) {
      UndoPush(push);
      return status;
    }
    std::copy(loaded.begin(), loaded.end(), push.rows.begin() + push.starts[s]);
  }

  const uint32_t now_s = NowSeconds();
  // Update, keeping each row's values before; a row whose weights or
  // optimizer state leave the finite numbers undoes the whole push.
  push.before.reserve(push.rows.size() * row_floats);
  for (size_t i = 0; i < push.rows.size(); ++i) {
    float* values = push.rows[i]->floats();
    push.before.insert(push.before.end(), values, values + row_floats);
    const bool finite =
        table.optimizer->Apply(&push.gradients[push.order[i] * dim], table.dim,
                               push.learning_rate_scale, values, values + dim);
    push.applied = i + 1;
    if (!finite) {
      const int64_t bad = FirstNonFinite(absl::MakeSpan(values, row_floats));
      const float value = values[bad];
      const uint64_t key = push.rows[i]->key;
      UndoPush(push);
      return absl::InvalidArgumentError(absl::StrCat(
          "applying the gradient of key ", key, " to table ", table.spec.name(),
          " would make float ", bad, " of its row (", dim,
          " weights, then optimizer state) ", value, "; nothing was applied"));
    }
  }

  // Under kWal, number each stripe's section and write the record while
  // the stripes are locked, so that sequence order is application order.
  std::vector<uint64_t> sequences(push.stripes.size(), 0);
  if (options_.durability == Durability::kWal) {
    for (size_t j = 0; j < push.stripes.size(); ++j) {
      sequences[j] = push.stripes[j]->next_log_sequence++;
      std::memcpy(&push.record[push.section_offsets[j] + kSequenceOffset],
                  &sequences[j], sizeof(sequences[j]));
    }
    absl::StatusOr<PushLog::Ticket> ticket = push_log_->Write(push.record, [&] {
      if (push.origin.tracked()) {
        ledger_.MarkWritten(push.origin,
                            static_cast<uint32_t>(push.keys.size()));
      }
    });
    if (!ticket.ok()) {
      LOG_EVERY_N(ERROR, 100)
          << "writing a push's record failed: " << ticket.status();
      for (Stripe* stripe : push.stripes) --stripe->next_log_sequence;
      UndoPush(push);
      return WithMessage(
          ticket.status(),
          absl::StrCat(ticket.status().message(),
                       IsTransient(ticket.status())
                           ? " (nothing of this push was applied; pushes go "
                             "on once the disk has room)"
                           : " (nothing of this push was applied; later "
                             "pushes are refused until the server restarts)"));
    }
    push.ticket = *ticket;
  }

  // Commit.
  for (size_t j = 0; j < push.stripes.size(); ++j) {
    const size_t s = push.stripes[j]->index;
    for (uint32_t i = push.starts[s]; i < push.starts[s + 1]; ++i) {
      CachedRow* row = push.rows[i];
      ++row->version;
      row->dirty = true;
      row->updated_at_s = now_s;
      if (row->push_count != UINT32_MAX) ++row->push_count;
      if (sequences[j] != 0) row->log_sequence = sequences[j];
    }
  }
  return absl::OkStatus();
}

void EmbeddingStore::UndoPush(PendingPush& push) {
  const size_t row_floats = push.row_floats;
  for (size_t i = 0; i < push.applied; ++i) {
    std::memcpy(push.rows[i]->floats(), &push.before[i * row_floats],
                row_floats * sizeof(float));
  }
  push.applied = 0;
  for (CachedRow* row : push.created) {
    stripes_[StripeOf(row->key)]->cache.Erase(push.table_id, row);
  }
  push.created.clear();
}

absl::Status EmbeddingStore::GetRow(absl::string_view table_name, uint64_t key,
                                    std::vector<float>* weights, bool* stored,
                                    std::vector<float>* state) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  Stripe& stripe = *stripes_[StripeOf(key)];
  absl::MutexLock lock(&stripe.mu);
  const uint64_t keys[] = {key};
  RETURN_IF_ERROR(LoadRows(*table, stripe, keys, /*create=*/false));
  weights->resize(table->dim);
  const CachedRow* row = stripe.cache.Find(table->id, key);
  *stored = row != nullptr;
  if (*stored) {
    const float* values = row->floats();
    std::copy(values, values + table->dim, weights->begin());
    if (state != nullptr)
      state->assign(values + table->dim, values + table->row_floats);
  } else {
    table->initializer.Fill(key, absl::MakeSpan(*weights));
    if (state != nullptr) {
      state->resize(table->row_floats - table->dim);
      table->optimizer->InitState(table->dim, state->data());
    }
  }
  EvictOrKeep(stripe);
  return absl::OkStatus();
}

absl::Status EmbeddingStore::FlushStripe(Stripe& stripe) {
  RocksStore::Batch batch = rocks_->NewBatch();
  TakenRows taken;
  {
    absl::MutexLock lock(&stripe.mu);
    // Evaluated with the stripe's lock held.
    stripe.mu.Await(absl::Condition(
        +[](Stripe* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !s->write_back_in_flight;
        },
        &stripe));
    // No row pointer is held outside the lock, and none under it here: the
    // moment to give back the memory of free slots.
    stripe.cache.Compact();
    taken = TakeDirtyRows(stripe, &batch);
    // Under kWal the mark is written even with no dirty row, so that a quiet
    // stripe does not hold old segments of the log.
    if (taken.rows.empty() && options_.durability != Durability::kWal) {
      return absl::OkStatus();
    }
    stripe.write_back_in_flight = true;
  }
  const absl::Status written = rocks_->Write(&batch);
  absl::MutexLock lock(&stripe.mu);
  stripe.write_back_in_flight = false;
  if (!written.ok()) return written;
  // Rows cannot have been evicted meanwhile (see write_back_in_flight); one
  // updated meanwhile stays dirty.
  for (auto [row, version] : taken.rows) {
    if (row->version == version) row->dirty = false;
  }
  return ReleaseLog(stripe, taken);
}

absl::Status EmbeddingStore::Checkpoint(const std::string& dir) {
  absl::WriterMutexLock gate(&push_gate_);
  RETURN_IF_ERROR(Flush());
  return rocks_->CreateCheckpoint(dir);
}

absl::Status EmbeddingStore::Export(std::vector<ExportTarget>* targets,
                                    bool half) {
  std::vector<const Table*> tables;
  for (const ExportTarget& target : *targets) {
    ASSIGN_OR_RETURN(const Table* table, FindTable(target.table));
    tables.push_back(table);
  }
  std::unique_ptr<RocksStore::Snapshot> snapshot;
  {
    absl::WriterMutexLock gate(&push_gate_);
    RETURN_IF_ERROR(Flush());
    snapshot = rocks_->GetSnapshot();
  }
  std::vector<float> row;
  std::string value;
  for (size_t t = 0; t < targets->size(); ++t) {
    ExportTarget& target = (*targets)[t];
    const Table& table = *tables[t];
    row.resize(table.row_floats);
    std::unique_ptr<rocksdb::SstFileWriter> writer;
    const uint32_t now_s = NowSeconds();
    auto write = [&](uint64_t key, absl::string_view stored) -> absl::Status {
      LogPosition position;
      RowMeta meta;
      RETURN_IF_ERROR(
          RocksStore::DecodeRow(stored, absl::MakeSpan(row), &position, &meta));
      // Expired, not yet compacted away: not part of the model.
      if (table.expiry.Expired(meta, now_s)) return absl::OkStatus();
      value.clear();
      for (int d = 0; d < table.dim; ++d) {
        if (half) {
          const uint16_t h = FloatToHalf(row[d]);
          value.append(reinterpret_cast<const char*>(&h), sizeof(h));
        } else {
          value.append(reinterpret_cast<const char*>(&row[d]), sizeof(float));
        }
      }
      if (writer == nullptr) {
        std::error_code error;
        std::filesystem::create_directories(
            std::filesystem::path(target.path).parent_path(), error);
        writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(),
                                                          rocksdb::Options());
        rocksdb::Status opened = writer->Open(target.path);
        if (!opened.ok()) {
          return absl::InternalError(
              absl::StrCat("creating ", target.path, ": ", opened.ToString()));
        }
      }
      rocksdb::Status put = writer->Put(
          rocksdb::Slice(reinterpret_cast<const char*>(&key), sizeof(key)),
          value);
      if (!put.ok()) {
        return absl::InternalError(
            absl::StrCat("writing ", target.path, ": ", put.ToString()));
      }
      ++target.rows;
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(rocks_->Scan(table.id, *snapshot, write));
    if (writer != nullptr) {
      rocksdb::ExternalSstFileInfo info;
      rocksdb::Status finished = writer->Finish(&info);
      if (!finished.ok()) {
        return absl::InternalError(
            absl::StrCat("finishing ", target.path, ": ", finished.ToString()));
      }
      target.bytes = info.file_size;
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Flush() {
  for (auto& stripe : stripes_) RETURN_IF_ERROR(FlushStripe(*stripe));
  return rocks_->SyncWal();
}

void EmbeddingStore::PeriodicFlushLoop() {
  const absl::Duration interval = WriteBackInterval(options_);
  // One stripe at a time, spread evenly over the interval: each stripe is
  // still written back once per interval, but not all in one burst, which
  // overran RocksDB's write buffers and stalled pushes for over a second
  // behind the stripes' locks. While the push log is over its budget, the
  // stripe that holds its oldest segment goes first, until it is not.
  const absl::Duration pause = interval / static_cast<int>(stripes_.size());
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_) {
    return stop_flushing_ || log_over_budget_;
  };
  size_t next = 0;
  while (true) {
    size_t stripe = next;
    {
      absl::MutexLock lock(&flush_mu_);
      const bool woken =
          flush_mu_.AwaitWithTimeout(absl::Condition(&has_work), pause);
      if (stop_flushing_) return;
      if (woken) {
        log_over_budget_ =
            push_log_->live_bytes() > options_.max_push_log_bytes;
        for (size_t s = 0; s < stripes_.size(); ++s) {
          if (stripes_[s]->log_start_segment.load() <
              stripes_[stripe]->log_start_segment.load()) {
            stripe = s;
          }
        }
      } else {
        next = (next + 1) % stripes_.size();
      }
    }
    absl::Status flushed = FlushStripe(*stripes_[stripe]);
    if (!flushed.ok())
      LOG(WARNING) << "periodic write-back failed: " << flushed;
    // Each stripe's expired rows leave memory once per interval.
    if (any_expiry_) ExpireRowsInMemory(*stripes_[stripe], nullptr);
  }
}

std::vector<TableStats> EmbeddingStore::ListTables() {
  std::vector<std::pair<TableId, TableStats>> tables;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& table : tables_) {
      if (table == nullptr || table->dropped) continue;
      TableStats stats;
      stats.spec = table->spec;
      stats.learning_rate = table->learning_rate.load();
      tables.emplace_back(table->id, std::move(stats));
    }
  }
  std::vector<TableStats> stats;
  for (auto& [id, table] : tables) {
    table.estimated_rows = rocks_->EstimatedRows(id);
    table.disk_bytes = rocks_->DiskBytes(id);
    stats.push_back(std::move(table));
  }
  return stats;
}

StoreStats EmbeddingStore::Stats() {
  StoreStats stats;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stats.hot_tier_bytes += stripe->cache.bytes();
    stats.hot_tier_budget_bytes += stripe->cache.budget_bytes();
    stats.hot_tier_allocated_bytes += stripe->cache.allocated_slot_bytes();
  }
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
