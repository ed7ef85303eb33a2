#include "embedding/rocks_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "embedding/rocks_store_internal.h"

namespace ps::embedding {

RocksStore::Batch::Batch(const RocksStore* store)
    : store_(store), batch_(std::make_unique<rocksdb::WriteBatch>()) {}
RocksStore::Batch::Batch(Batch&& other) noexcept = default;
RocksStore::Batch& RocksStore::Batch::operator=(Batch&& other) noexcept =
    default;
RocksStore::Batch::~Batch() = default;

bool RocksStore::Batch::empty() const { return batch_->Count() == 0; }

RocksStore::Snapshot::~Snapshot() { db_->ReleaseSnapshot(snapshot_); }

void RocksStore::Batch::SetLogMark(uint32_t stripe, uint64_t end_sequence) {
  batch_->Put(store_->log_handle_, LogKey(stripe, 0),
              rocksdb::Slice(reinterpret_cast<const char*>(&end_sequence),
                             sizeof(end_sequence)));
}

void RocksStore::Batch::StartLogRun(uint64_t run, absl::string_view ledger) {
  // Every key of the family sorts below 13 0xff bytes, the run's and the
  // ledger's included; the Puts below come later in the batch, so they
  // stand.
  batch_->DeleteRange(store_->log_handle_, rocksdb::Slice(),
                      std::string(13, '\xff'));
  batch_->Put(store_->log_handle_, kLogRunKey,
              rocksdb::Slice(reinterpret_cast<const char*>(&run), sizeof(run)));
  batch_->Put(store_->log_handle_, kLedgerKey,
              rocksdb::Slice(ledger.data(), ledger.size()));
}

void RocksStore::Batch::Put(TableId table, uint64_t key,
                            absl::Span<const float> row, LogPosition position,
                            RowMeta meta) {
  // A slice each for the floats, the position and the meta: no copy to
  // join them.
  const rocksdb::Slice parts[3] = {
      rocksdb::Slice(reinterpret_cast<const char*>(row.data()),
                     row.size() * sizeof(float)),
      rocksdb::Slice(reinterpret_cast<const char*>(&position),
                     sizeof(position)),
      rocksdb::Slice(reinterpret_cast<const char*>(&meta), sizeof(meta))};
  const RowKey row_key(key);
  const rocksdb::Slice key_slice = row_key.slice();
  batch_->Put(store_->Handle(table), rocksdb::SliceParts(&key_slice, 1),
              rocksdb::SliceParts(parts, 3));
}

void RocksStore::Batch::Delete(TableId table, uint64_t key) {
  batch_->Delete(store_->Handle(table), RowKey(key).slice());
}

void RocksStore::Batch::DeleteSlots(TableId table, uint32_t first_slot,
                                    uint32_t end_slot) {
  batch_->DeleteRange(store_->Handle(table),
                      RowKey::SlotStart(first_slot).slice(),
                      RowKey::SlotStart(end_slot).slice());
}

absl::Status RocksStore::DecodeRow(absl::string_view value,
                                   absl::Span<float> row, LogPosition* position,
                                   RowMeta* meta) {
  const size_t row_bytes = row.size() * sizeof(float);
  if (meta != nullptr) *meta = RowMeta();
  if (value.size() == row_bytes) {
    *position = LogPosition();
  } else if (value.size() == row_bytes + sizeof(LogPosition)) {
    std::memcpy(position, value.data() + row_bytes, sizeof(LogPosition));
  } else if (value.size() ==
             row_bytes + sizeof(LogPosition) + sizeof(RowMeta)) {
    std::memcpy(position, value.data() + row_bytes, sizeof(LogPosition));
    if (meta != nullptr) {
      std::memcpy(meta, value.data() + row_bytes + sizeof(LogPosition),
                  sizeof(RowMeta));
    }
  } else {
    return absl::DataLossError(absl::StrCat(
        "a stored row of ", value.size(), " bytes, expected ", row_bytes, " (",
        row.size(), " floats) and a log position"));
  }
  std::memcpy(row.data(), value.data(), row_bytes);
  return absl::OkStatus();
}

rocksdb::ColumnFamilyHandle* RocksStore::Handle(TableId table) const {
  return table_handles_[table].load(std::memory_order_acquire);
}

absl::StatusOr<TableId> RocksStore::CreateTable(const TableSpec& spec) {
  absl::MutexLock lock(&create_mu_);
  const uint32_t id = next_table_id_;
  if (id >= options_.max_tables) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot create table ", spec.name(),
                     ": the store has given out ", options_.max_tables,
                     " table ids (max_tables; a dropped table keeps its id)"));
  }
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  rocksdb::Status created = db_->CreateColumnFamily(
      *table_options_, absl::StrCat(kFamilyPrefix, spec.name()), &handle);
  if (!created.ok()) return FromRocks(created, "creating table " + spec.name());
  rocksdb::WriteOptions durable;
  durable.sync = true;
  rocksdb::WriteBatch batch;
  batch.Put(specs_handle_, absl::StrCat(kSpecPrefix, spec.name()),
            spec.SerializeAsString());
  batch.Put(specs_handle_, absl::StrCat(kIdPrefix, spec.name()),
            FixedBytes(id));
  rocksdb::Status written = db_->Write(durable, &batch);
  if (!written.ok()) {
    db_->DropColumnFamily(handle).PermitUncheckedError();
    db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    return FromRocks(written, "recording spec of table " + spec.name());
  }
  table_handles_[id].store(handle, std::memory_order_release);
  next_table_id_ = id + 1;
  return id;
}

absl::Status RocksStore::RecordDrop(TableId id, const TableSpec& spec) {
  absl::MutexLock lock(&create_mu_);
  if (id >= options_.max_tables || Handle(id) == nullptr) {
    return absl::NotFoundError(absl::StrCat("no table with id ", id));
  }
  rocksdb::WriteBatch batch;
  batch.Delete(specs_handle_, absl::StrCat(kSpecPrefix, spec.name()));
  batch.Delete(specs_handle_, absl::StrCat(kIdPrefix, spec.name()));
  batch.Delete(specs_handle_, absl::StrCat(kLearningRatePrefix, spec.name()));
  batch.Put(specs_handle_, DroppedKey(id), spec.SerializeAsString());
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return FromRocks(db_->Write(durable, &batch),
                   "recording the drop of table " + spec.name());
}

absl::Status RocksStore::DropFamily(TableId id) {
  absl::MutexLock lock(&create_mu_);
  rocksdb::ColumnFamilyHandle* handle =
      id < options_.max_tables ? Handle(id) : nullptr;
  if (handle == nullptr) {
    return absl::NotFoundError(absl::StrCat("no table with id ", id));
  }
  return FromRocks(db_->DropColumnFamily(handle),
                   absl::StrCat("dropping the column family of table ", id));
}

void RocksStore::SetExpiry(TableId id, const ExpiryRule& rule) {
  if (rocksdb::ColumnFamilyHandle* handle = Handle(id))
    expiry_->Set(handle->GetID(), id, rule);
}

uint64_t RocksStore::rows_expired() const { return expiry_->expired(); }

absl::StatusOr<uint64_t> RocksStore::CompactTable(TableId id) {
  rocksdb::ColumnFamilyHandle* handle =
      id < options_.max_tables ? Handle(id) : nullptr;
  if (handle == nullptr) {
    return absl::NotFoundError(absl::StrCat("no table with id ", id));
  }
  const uint64_t before = expiry_->expired();
  rocksdb::CompactRangeOptions compact;
  // Every level, the last one too: expired rows may sit anywhere.
  compact.bottommost_level_compaction =
      rocksdb::BottommostLevelCompaction::kForce;
  RETURN_IF_ERROR(
      FromRocks(db_->CompactRange(compact, handle, nullptr, nullptr),
                absl::StrCat("compacting table ", id)));
  return expiry_->expired() - before;
}

absl::Status RocksStore::SetLearningRate(const std::string& name,
                                         float learning_rate) {
  absl::MutexLock lock(&create_mu_);
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return FromRocks(
      db_->Put(durable, specs_handle_, absl::StrCat(kLearningRatePrefix, name),
               std::string(reinterpret_cast<const char*>(&learning_rate),
                           sizeof(learning_rate))),
      "recording the learning rate of table " + name);
}

absl::Status RocksStore::SetMovedLedger(uint32_t source_shard,
                                        absl::string_view ledger) {
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return FromRocks(
      db_->Put(durable, specs_handle_,
               absl::StrFormat("%s%010u", kMovedLedgerPrefix, source_shard),
               rocksdb::Slice(ledger.data(), ledger.size())),
      absl::StrCat("recording the push ledger moved from shard ",
                   source_shard));
}

absl::StatusOr<absl::flat_hash_map<uint32_t, std::string>>
RocksStore::ReadMovedLedgers() {
  absl::flat_hash_map<uint32_t, std::string> ledgers;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), specs_handle_));
  for (it->Seek(kMovedLedgerPrefix);
       it->Valid() && it->key().starts_with(kMovedLedgerPrefix); it->Next()) {
    uint32_t shard = 0;
    if (!absl::SimpleAtoi(
            it->key().ToString().substr(strlen(kMovedLedgerPrefix)), &shard)) {
      return absl::DataLossError(
          absl::StrCat("a moved ledger under key ", it->key().ToString()));
    }
    ledgers[shard] = it->value().ToString();
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "reading the moved ledgers"));
  return ledgers;
}

absl::Status RocksStore::Write(Batch* batch) {
  if (batch->empty()) return absl::OkStatus();
  return WriteWith(*write_options_, batch);
}

absl::Status RocksStore::WriteSynced(Batch* batch) {
  rocksdb::WriteOptions synced;
  synced.sync = true;
  return WriteWith(synced, batch);
}

absl::Status RocksStore::WriteWith(const rocksdb::WriteOptions& options,
                                   Batch* batch) {
  // After a failed write RocksDB refuses writes until it is resumed: a full
  // disk that has room again, say.
  if (needs_resume_.load() && db_->Resume().ok()) needs_resume_ = false;
  DisablePerfCounters();
  rocksdb::Status written = db_->Write(options, batch->batch_.get());
  if (written.IsIOError()) needs_resume_ = true;
  return FromRocks(written, "writing rows");
}

absl::Status RocksStore::RequireSlotOrder() const {
  if (!legacy_row_keys_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      options_.path,
      " was written before rows were stored by slot and is open read-only: "
      "it can only be scanned whole (restore it, or open it writable once, "
      "which upgrades it)"));
}

absl::Status RocksStore::MultiGet(TableId table,
                                  absl::Span<const uint64_t> keys,
                                  std::vector<std::string>* values,
                                  std::vector<bool>* found) {
  RETURN_IF_ERROR(RequireSlotOrder());
  DisablePerfCounters();
  std::vector<RowKey> row_keys;
  row_keys.reserve(keys.size());
  for (uint64_t key : keys) row_keys.emplace_back(key);
  std::vector<rocksdb::Slice> key_slices;
  key_slices.reserve(keys.size());
  for (const RowKey& key : row_keys) key_slices.push_back(key.slice());
  // The batched form: lookups of one table grouped per file and block,
  // where the vector-of-strings form looks each key up on its own.
  std::vector<rocksdb::PinnableSlice> pinned(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  db_->MultiGet(rocksdb::ReadOptions(), Handle(table), keys.size(),
                key_slices.data(), pinned.data(), statuses.data());
  values->resize(keys.size());
  found->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (statuses[i].ok()) {
      (*found)[i] = true;
      (*values)[i].assign(pinned[i].data(), pinned[i].size());
    } else if (!statuses[i].IsNotFound()) {
      return FromRocks(statuses[i], "reading rows");
    }
  }
  return absl::OkStatus();
}

absl::Status RocksStore::ReadLogState(
    uint64_t* run, absl::flat_hash_map<uint32_t, uint64_t>* marks,
    std::string* ledger) {
  *run = 0;
  marks->clear();
  ledger->clear();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), log_handle_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (key == kLedgerKey) {
      ledger->assign(value.data(), value.size());
      continue;
    }
    if (value.size() != sizeof(uint64_t)) {
      if (key.size() == 12) {
        return OldPushLogError(options_.path);
      }
      return absl::DataLossError(
          absl::StrCat("push-log entry of ", value.size(), " bytes"));
    }
    uint64_t number = 0;
    std::memcpy(&number, value.data(), sizeof(number));
    if (key == kLogRunKey) {
      *run = number;
      continue;
    }
    if (key.size() != 12) {
      return absl::DataLossError(
          absl::StrCat("push-log key of ", key.size(), " bytes"));
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(key.data());
    uint32_t stripe = 0;
    uint64_t sequence = 0;
    for (int i = 0; i < 4; ++i) stripe = (stripe << 8) | bytes[i];
    for (int i = 4; i < 12; ++i) sequence = (sequence << 8) | bytes[i];
    if (sequence != 0) {
      return OldPushLogError(options_.path);
    }
    (*marks)[stripe] = number;
  }
  return FromRocks(it->status(), "reading the push log's marks");
}

uint64_t RocksStore::EstimatedRows(TableId table) {
  uint64_t rows = 0;
  db_->GetIntProperty(Handle(table), "rocksdb.estimate-num-keys", &rows);
  return rows;
}

uint64_t RocksStore::DiskBytes(TableId table) {
  uint64_t bytes = 0;
  db_->GetIntProperty(Handle(table), "rocksdb.live-sst-files-size", &bytes);
  return bytes;
}

uint64_t RocksStore::TotalDiskBytes() {
  uint64_t bytes = 0;
  db_->GetAggregatedIntProperty("rocksdb.live-sst-files-size", &bytes);
  return bytes;
}

absl::Status RocksStore::SyncWal() {
  return FromRocks(db_->FlushWAL(/*sync=*/true), "syncing the WAL");
}

absl::Status RocksStore::CreateCheckpoint(const std::string& dir) {
  if (std::filesystem::exists(dir)) {
    return absl::AlreadyExistsError(absl::StrCat(dir, " exists already"));
  }
  rocksdb::Checkpoint* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                            "starting a checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush 0: flush the memtables, so the copy is SST files only.
  return FromRocks(checkpoint->CreateCheckpoint(dir, /*log_size_for_flush=*/0),
                   absl::StrCat("writing a checkpoint to ", dir));
}

std::unique_ptr<RocksStore::Snapshot> RocksStore::GetSnapshot() {
  return std::unique_ptr<Snapshot>(new Snapshot(db_.get(), db_->GetSnapshot()));
}

absl::Status RocksStore::Scan(
    TableId table, const Snapshot& snapshot,
    const std::function<absl::Status(uint64_t, absl::string_view)>& fn) {
  rocksdb::ReadOptions options;
  options.snapshot = snapshot.snapshot_;
  // A scan reads every block once: do not push the hot rows out of the
  // block cache.
  options.fill_cache = false;
  // The families have a prefix extractor (the whole key): only a
  // total-order iterator walks every row.
  options.total_order_seek = true;
  DisablePerfCounters();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(options, Handle(table)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(const uint64_t key,
                     DecodeRowKey(it->key(), legacy_row_keys_));
    RETURN_IF_ERROR(
        fn(key, absl::string_view(it->value().data(), it->value().size())));
  }
  return FromRocks(it->status(), "scanning a table");
}

absl::Status RocksStore::ScanFrom(
    TableId table, std::optional<uint64_t> after,
    const std::function<absl::StatusOr<bool>(uint64_t, absl::string_view)>&
        fn) {
  return ScanSlots(table, 0, kNumSlots, after, fn);
}

absl::Status RocksStore::ScanSlots(
    TableId table, uint32_t first_slot, uint32_t end_slot,
    std::optional<uint64_t> after,
    const std::function<absl::StatusOr<bool>(uint64_t, absl::string_view)>&
        fn) {
  RETURN_IF_ERROR(RequireSlotOrder());
  if (first_slot >= end_slot) return absl::OkStatus();
  const RowKey end = RowKey::SlotStart(std::min(end_slot, kNumSlots));
  const rocksdb::Slice upper_bound = end.slice();
  rocksdb::ReadOptions options;
  options.fill_cache = false;
  options.total_order_seek = true;
  options.iterate_upper_bound = &upper_bound;
  DisablePerfCounters();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(options, Handle(table)));
  const RowKey start = RowKey::SlotStart(first_slot);
  it->Seek(start.slice());
  if (after.has_value()) {
    const RowKey after_key(*after);
    if (after_key.slice().compare(start.slice()) >= 0) {
      it->Seek(after_key.slice());
      if (it->Valid() && it->key() == after_key.slice()) it->Next();
    }
  }
  for (; it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(const uint64_t key,
                     DecodeRowKey(it->key(), /*legacy=*/false));
    ASSIGN_OR_RETURN(
        const bool go_on,
        fn(key, absl::string_view(it->value().data(), it->value().size())));
    if (!go_on) return absl::OkStatus();
  }
  return FromRocks(it->status(), "scanning a table");
}

absl::Status RocksStore::IngestRows(TableId table,
                                    std::vector<StoredRow> rows) {
  RETURN_IF_ERROR(RequireSlotOrder());
  if (rows.empty()) return absl::OkStatus();
  rocksdb::ColumnFamilyHandle* handle =
      table < options_.max_tables ? Handle(table) : nullptr;
  if (handle == nullptr) {
    return absl::NotFoundError(absl::StrCat("no table with id ", table));
  }
  // The file's keys must rise strictly, in the order RowKey's bytes sort.
  std::sort(rows.begin(), rows.end(),
            [](const StoredRow& a, const StoredRow& b) {
              return RowKey(a.key).slice().compare(RowKey(b.key).slice()) < 0;
            });
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].key == rows[i - 1].key) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", rows[i].key, " twice in one ingestion"));
    }
  }
  const std::string dir = options_.path + "/ingest";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  // Named for this process: a file a crashed one left here may still be a
  // link to one of the database's own, which writing it would truncate, so
  // whatever has the name is unlinked first.
  const std::string file = absl::StrCat(dir, "/rows-", getpid(), "-",
                                        next_ingest_file_.fetch_add(1), ".sst");
  std::filesystem::remove(file, error);
  const rocksdb::Options file_options(db_->GetDBOptions(), *table_options_);
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), file_options, handle);
  absl::Status written =
      FromRocks(writer.Open(file), absl::StrCat("creating ", file));
  std::string value;
  for (size_t i = 0; i < rows.size() && written.ok(); ++i) {
    const StoredRow& row = rows[i];
    value.assign(reinterpret_cast<const char*>(row.floats.data()),
                 row.floats.size() * sizeof(float));
    value.append(reinterpret_cast<const char*>(&row.position),
                 sizeof(row.position));
    value.append(reinterpret_cast<const char*>(&row.meta), sizeof(row.meta));
    written = FromRocks(writer.Put(RowKey(row.key).slice(), value),
                        absl::StrCat("writing ", file));
  }
  if (written.ok()) {
    written = FromRocks(writer.Finish(), absl::StrCat("finishing ", file));
  }
  if (written.ok()) {
    rocksdb::IngestExternalFileOptions ingest;
    // The file is ours: linked into the database, not copied.
    ingest.move_files = true;
    written = FromRocks(db_->IngestExternalFile(handle, {file}, ingest),
                        absl::StrCat("ingesting ", file));
  }
  std::filesystem::remove(file, error);
  return written;
}

}  // namespace ps::embedding
