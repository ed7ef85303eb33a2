#include "embedding/rocks_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "glog/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_buffer_manager.h"

namespace ps::embedding {
namespace {

constexpr char kSpecPrefix[] = "table_spec/";
constexpr char kIdPrefix[] = "table_id/";
constexpr char kLearningRatePrefix[] = "table_lr/";
constexpr char kDroppedPrefix[] = "dropped_table/";
constexpr char kMovedLedgerPrefix[] = "moved_ledger/";
constexpr char kFamilyPrefix[] = "table.";
constexpr char kLogFamily[] = "push_log";
constexpr char kEpochKey[] = "epoch";
constexpr char kLedgerKey[] = "ledger";
// In the default family: how rows are keyed. Absent in a store written
// before rows were stored by slot (8-byte keys), which Open() upgrades.
constexpr char kRowKeyFormatKey[] = "row_key_format";
constexpr char kSlotOrderedFormat[] = "slot,key";
// Rows rewritten per batch while upgrading a store's row keys.
constexpr size_t kUpgradeBatchRows = 8192;

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace()) {
    return MarkTransient(absl::ResourceExhaustedError(message));
  }
  if (status.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

// A row's key as stored (base/routing.h): one slot's rows are one range
// of keys, in key order, and slots follow each other in order.
constexpr size_t kRowKeyBytes = SlotOrderedKey::kBytes;
class RowKey : public SlotOrderedKey {
 public:
  explicit RowKey(uint64_t key) : SlotOrderedKey(key) {}
  static RowKey SlotStart(uint32_t slot) {
    return RowKey(SlotOrderedKey::SlotStart(slot));
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(data(), size()); }

 private:
  explicit RowKey(const SlotOrderedKey& key) : SlotOrderedKey(key) {}
};

// The row key of stored key bytes: a RowKey, or in a store written before
// rows were stored by slot (`legacy`), a key's 8 bytes in the machine's
// order.
absl::StatusOr<uint64_t> DecodeRowKey(const rocksdb::Slice& bytes,
                                      bool legacy) {
  if (bytes.size() == kRowKeyBytes) return SlotOrderedKey::Decode(bytes.data());
  if (legacy && bytes.size() == sizeof(uint64_t)) {
    uint64_t key = 0;
    std::memcpy(&key, bytes.data(), sizeof(key));
    return key;
  }
  return absl::DataLossError(absl::StrCat("a key of ", bytes.size(), " bytes"));
}

// A push-log key in the log family: the stripe and the sequence, big-endian.
// Only marks (sequence 0) are written there; the records are in push_log.h's
// files, and a family holding records under other sequences is a data dir
// this version does not read (OldPushLogError).
std::string LogKey(uint32_t stripe, uint64_t sequence) {
  std::string key(12, '\0');
  for (int i = 0; i < 4; ++i)
    key[i] = static_cast<char>(stripe >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i)
    key[4 + i] = static_cast<char>(sequence >> (56 - 8 * i));
  return key;
}

// A tombstone's key: the id in ten digits, so that keys sort by id.
std::string DroppedKey(TableId id) {
  return absl::StrFormat("%s%010u", kDroppedPrefix, id);
}

std::string FixedBytes(uint32_t value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

bool FamilyIsEmpty(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* family) {
  std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), family));
  it->SeekToFirst();
  return !it->Valid() && it->status().ok();
}

// Records in the push-log family (sequence > 0) come from a version that
// kept the log in RocksDB; this one cannot replay them.
absl::Status OldPushLogError(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      path,
      " holds a push log in RocksDB, as versions before the push log moved "
      "to files wrote it: open it once with such a version, which replays "
      "it, stop that server cleanly, then start this one"));
}

// The database RocksStore::Open() opened, with the handles of its column
// families, until a RocksStore takes them. Whatever handle it still holds
// when it goes (after an error) is destroyed, then the database.
struct OpenedDatabase {
  OpenedDatabase() = default;
  OpenedDatabase(const OpenedDatabase&) = delete;
  OpenedDatabase& operator=(const OpenedDatabase&) = delete;
  ~OpenedDatabase() {
    if (db == nullptr) return;
    if (specs != nullptr) db->DestroyColumnFamilyHandle(specs);
    for (auto* handle : table_families)
      if (handle != nullptr) db->DestroyColumnFamilyHandle(handle);
    for (auto [id, handle] : table_handles)
      db->DestroyColumnFamilyHandle(handle);
    if (log != nullptr) db->DestroyColumnFamilyHandle(log);
  }

  std::unique_ptr<rocksdb::DB> db;
  // The default family, which holds the specs.
  rocksdb::ColumnFamilyHandle* specs = nullptr;
  rocksdb::ColumnFamilyHandle* log = nullptr;
  // The table families on disk: table_families[i] is the family of the table
  // named table_names[i], or null once table_handles holds it or the family
  // is dropped.
  std::vector<std::string> table_names;
  std::vector<rocksdb::ColumnFamilyHandle*> table_families;
  // The families of the tables found, with their ids.
  std::vector<std::pair<TableId, rocksdb::ColumnFamilyHandle*>> table_handles;
};

// Checks the options that need no database, and makes sure options.path is
// there: created if missing, unless the store is read-only.
absl::Status PrepareStoreDirectory(const RocksStoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("RocksStore needs a path");
  }
  if (options.max_tables == 0) {
    return absl::InvalidArgumentError("max_tables must be at least 1");
  }
  std::error_code error;
  if (options.read_only) {
    if (!std::filesystem::exists(options.path, error)) {
      return absl::NotFoundError(absl::StrCat(options.path, " does not exist"));
    }
  } else {
    std::filesystem::create_directories(options.path, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", options.path, ": ", error.message()));
    }
  }
  return absl::OkStatus();
}

rocksdb::DBOptions DatabaseOptions(const RocksStoreOptions& options) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = !options.read_only;
  db_options.create_missing_column_families = !options.read_only;
  db_options.write_buffer_manager =
      std::make_shared<rocksdb::WriteBufferManager>(options.write_buffer_bytes);
  db_options.max_background_jobs = 2;
  // A WAL file goes only once every family with writes in it has flushed,
  // and a table written rarely (a dense one) flushes rarely: without a cap
  // the WAL outgrows the tables' live files. Past the cap, RocksDB flushes
  // the families that hold the oldest WAL file.
  db_options.max_total_wal_size = 2 * options.write_buffer_bytes;
  db_options.keep_log_file_num = 4;
  return db_options;
}

// The options of every table's family (and the default family's), whose
// compactions take their filters from `expiry`.
rocksdb::ColumnFamilyOptions TableFamilyOptions(
    const RocksStoreOptions& options,
    std::shared_ptr<rocksdb::CompactionFilterFactory> expiry) {
  rocksdb::ColumnFamilyOptions family;
  family.write_buffer_size =
      std::max<size_t>(options.write_buffer_bytes / 4, 1 << 20);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Index and filter blocks stay with the table readers, outside the block
  // cache: in a small block cache, data blocks would evict them and every
  // read of a cold row would read them again (docs/perf-history.md).
  table.cache_index_and_filter_blocks = false;
  family.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  family.compression = rocksdb::kNoCompression;  // float rows barely compress
  // Rows reach RocksDB only from the hot tier: a stripe's periodic
  // write-back (a row at most once per interval), sorted by key
  // (EmbeddingStore::TakeDirtyRows), and single evicted rows. The default
  // skiplist memtable takes sorted inserts cheaply and flushes without
  // sorting. In-place updates would add
  // a lookup to every insert for rows that are rarely in the memtable twice;
  // a hash memtable sorts itself into a skiplist on every flush
  // (docs/perf-history.md).
  family.inplace_update_support = false;
  // Keys (RowKey) are looked up one at a time: a bloom filter of whole
  // keys (the prefix is the whole key) answers most memtable misses of rows
  // never written, which every new key's first pull is.
  family.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kRowKeyBytes));
  family.memtable_prefix_bloom_size_ratio = 0.1;
  family.compaction_filter_factory = std::move(expiry);
  return family;
}

// The push log's family: written and deleted in ranges, never updated in
// place.
rocksdb::ColumnFamilyOptions LogFamilyOptions(
    const rocksdb::ColumnFamilyOptions& table_family) {
  rocksdb::ColumnFamilyOptions log_family;
  log_family.write_buffer_size = table_family.write_buffer_size;
  log_family.compression = rocksdb::kNoCompression;
  return log_family;
}

// Opens the database at options.path with its default family, every table
// family there and the push log's family, into `opened`.
absl::Status OpenDatabase(const RocksStoreOptions& options,
                          const rocksdb::DBOptions& db_options,
                          const rocksdb::ColumnFamilyOptions& family,
                          OpenedDatabase* opened) {
  std::vector<std::string> family_names;
  rocksdb::Status listed =
      rocksdb::DB::ListColumnFamilies(db_options, options.path, &family_names);
  if (!listed.ok()) family_names = {rocksdb::kDefaultColumnFamilyName};

  // The default family first, to read the specs of the tables.
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, family}};
  std::vector<std::string> table_names;
  for (const std::string& name : family_names) {
    if (absl::StartsWith(name, kFamilyPrefix)) {
      table_names.push_back(name.substr(strlen(kFamilyPrefix)));
      descriptors.push_back({name, family});
    }
  }
  descriptors.push_back({kLogFamily, LogFamilyOptions(family)});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw_db = nullptr;
  rocksdb::Status status =
      options.read_only
          ? rocksdb::DB::OpenForReadOnly(db_options, options.path, descriptors,
                                         &handles, &raw_db)
          : rocksdb::DB::Open(db_options, options.path, descriptors, &handles,
                              &raw_db);
  if (!status.ok()) {
    // RocksDB's LOCK file is held: by another process ("While lock file")
    // or by another store in this one ("lock hold by current process").
    if (status.IsIOError() && absl::StrContains(status.ToString(), "/LOCK")) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.path, " is in use by another store or process (",
                       status.ToString(), ")"));
    }
    return FromRocks(status, absl::StrCat("opening RocksDB at ", options.path));
  }
  opened->db.reset(raw_db);
  opened->specs = handles.front();
  opened->log = handles.back();
  opened->table_names = std::move(table_names);
  opened->table_families.assign(handles.begin() + 1, handles.end() - 1);
  return absl::OkStatus();
}

// Appends the tombstones of dropped tables, in id order, to `tables`.
absl::Status ReadDroppedTables(const OpenedDatabase& opened,
                               const std::string& path,
                               std::vector<StoredTable>* tables) {
  std::unique_ptr<rocksdb::Iterator> it(
      opened.db->NewIterator(rocksdb::ReadOptions(), opened.specs));
  for (it->Seek(kDroppedPrefix);
       it->Valid() && it->key().starts_with(kDroppedPrefix); it->Next()) {
    StoredTable dropped;
    dropped.dropped = true;
    const std::string id_text =
        it->key().ToString().substr(strlen(kDroppedPrefix));
    if (!absl::SimpleAtoi(id_text, &dropped.id) ||
        !dropped.spec.ParseFromArray(it->value().data(),
                                     static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("unreadable tombstone of a dropped table in ", path));
    }
    tables->push_back(std::move(dropped));
  }
  return absl::OkStatus();
}

// Table `name`'s family has no spec: CreateTable() or DropTable() stopped
// between the family and the spec, and the table is gone for everyone. Drops
// the family (unless read-only) and destroys `*handle`, setting it to null.
// DATA_LOSS for a family with rows that no tombstone names.
absl::Status DropFamilyWithoutSpec(const RocksStoreOptions& options,
                                   const std::string& name, bool being_dropped,
                                   rocksdb::DB* db,
                                   rocksdb::ColumnFamilyHandle** handle) {
  if (!being_dropped && !FamilyIsEmpty(db, *handle)) {
    return absl::DataLossError(
        absl::StrCat("table ", name, " has no spec in ", options.path));
  }
  LOG(WARNING) << "table " << name << " in " << options.path << " was "
               << (being_dropped ? "being dropped" : "being created")
               << " when the process stopped; its column family is "
               << (options.read_only ? "left out" : "dropped");
  rocksdb::Status dropped =
      options.read_only ? rocksdb::Status::OK() : db->DropColumnFamily(*handle);
  db->DestroyColumnFamilyHandle(*handle).PermitUncheckedError();
  *handle = nullptr;
  if (!dropped.ok()) {
    return FromRocks(dropped, "dropping the column family of " + name);
  }
  return absl::OkStatus();
}

// Reads table `name`'s id and learning rate into `table`. A table of a store
// written before tables could be dropped has no recorded id: its id is
// `place`, its family's place among the table families, and a Put into
// `legacy_ids` records it.
void ReadTableIdAndLearningRate(const OpenedDatabase& opened,
                                const std::string& name, size_t place,
                                StoredTable* table,
                                rocksdb::WriteBatch* legacy_ids) {
  std::string bytes;
  table->id = static_cast<TableId>(place);
  if (opened.db
          ->Get(rocksdb::ReadOptions(), opened.specs,
                absl::StrCat(kIdPrefix, name), &bytes)
          .ok() &&
      bytes.size() == sizeof(uint32_t)) {
    std::memcpy(&table->id, bytes.data(), sizeof(uint32_t));
  } else {
    legacy_ids->Put(opened.specs, absl::StrCat(kIdPrefix, name),
                    FixedBytes(table->id));
  }
  if (opened.db
          ->Get(rocksdb::ReadOptions(), opened.specs,
                absl::StrCat(kLearningRatePrefix, name), &bytes)
          .ok() &&
      bytes.size() == sizeof(float)) {
    std::memcpy(&table->learning_rate, bytes.data(), sizeof(float));
  }
}

// Appends every table family with a spec to `tables` (which holds the
// dropped tables) and moves its handle into opened->table_handles; drops the
// families without one. The ids of tables written before ids were recorded
// go into `legacy_ids`.
absl::Status ReadLiveTables(const RocksStoreOptions& options,
                            OpenedDatabase* opened,
                            std::vector<StoredTable>* tables,
                            rocksdb::WriteBatch* legacy_ids) {
  const size_t num_dropped = tables->size();
  for (size_t t = 0; t < opened->table_names.size(); ++t) {
    const std::string& name = opened->table_names[t];
    rocksdb::ColumnFamilyHandle*& handle = opened->table_families[t];
    std::string bytes;
    rocksdb::Status got =
        opened->db->Get(rocksdb::ReadOptions(), opened->specs,
                        absl::StrCat(kSpecPrefix, name), &bytes);
    if (got.IsNotFound()) {
      const bool being_dropped =
          std::any_of(tables->begin(), tables->begin() + num_dropped,
                      [&](const StoredTable& dropped) {
                        return dropped.spec.name() == name;
                      });
      RETURN_IF_ERROR(DropFamilyWithoutSpec(options, name, being_dropped,
                                            opened->db.get(), &handle));
      continue;
    }
    StoredTable table;
    if (!got.ok() || !table.spec.ParseFromString(bytes)) {
      return absl::DataLossError(absl::StrCat(
          "table ", name, " has no readable spec in ", options.path));
    }
    ReadTableIdAndLearningRate(*opened, name, t, &table, legacy_ids);
    opened->table_handles.emplace_back(table.id, handle);
    handle = nullptr;
    tables->push_back(std::move(table));
  }
  return absl::OkStatus();
}

// Sorts `tables` by id. RESOURCE_EXHAUSTED for an id at or past max_tables,
// or one held twice.
absl::Status SortAndCheckTableIds(const RocksStoreOptions& options,
                                  std::vector<StoredTable>* tables) {
  std::sort(
      tables->begin(), tables->end(),
      [](const StoredTable& a, const StoredTable& b) { return a.id < b.id; });
  for (size_t i = 0; i < tables->size(); ++i) {
    const TableId id = (*tables)[i].id;
    if (id >= options.max_tables || (i > 0 && id == (*tables)[i - 1].id)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          options.path, " holds table id ", id,
          (id >= options.max_tables
               ? absl::StrCat(", not below max_tables ", options.max_tables)
               : std::string(" twice"))));
    }
  }
  return absl::OkStatus();
}

// Rewrites the rows of `family` (table `name`) stored under their key's 8
// bytes under their RowKey: each row's Put and its old key's Delete go in
// one batch, so a process stopped part-way leaves every row under one key,
// and the next Open() goes on with the rest.
absl::Status UpgradeFamilyRowKeys(const RocksStoreOptions& options,
                                  rocksdb::DB* db,
                                  rocksdb::ColumnFamilyHandle* family,
                                  const std::string& name) {
  rocksdb::ReadOptions read;
  read.total_order_seek = true;
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read, family));
  rocksdb::WriteBatch batch;
  uint64_t rewritten = 0;
  auto write = [&]() -> absl::Status {
    if (batch.Count() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(FromRocks(db->Write(rocksdb::WriteOptions(), &batch),
                              "rewriting rows under slot-ordered keys"));
    batch.Clear();
    return absl::OkStatus();
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != sizeof(uint64_t)) continue;  // rewritten already
    ASSIGN_OR_RETURN(const uint64_t key,
                     DecodeRowKey(it->key(), /*legacy=*/true));
    batch.Put(family, RowKey(key).slice(), it->value());
    batch.Delete(family, it->key());
    if (++rewritten % kUpgradeBatchRows == 0) RETURN_IF_ERROR(write());
    if (rewritten % (1 << 20) == 0) {
      LOG(INFO) << "upgrading " << options.path << ": table " << name << ", "
                << rewritten << " rows so far";
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "reading rows to upgrade"));
  RETURN_IF_ERROR(write());
  if (rewritten > 0) {
    LOG(INFO) << "upgraded " << options.path << ": table " << name << ", "
              << rewritten << " rows now stored by slot";
  }
  return absl::OkStatus();
}

// Whether the store's rows are stored under RowKey. If not (a store
// written before rows were stored by slot), a writable store is upgraded
// in place (every table's rows rewritten, then the format recorded, synced)
// and a read-only one is left as it is: *legacy_row_keys says so.
absl::Status UpgradeRowKeys(const RocksStoreOptions& options,
                            const OpenedDatabase& opened,
                            const std::vector<StoredTable>& tables,
                            bool* legacy_row_keys) {
  *legacy_row_keys = false;
  std::string format;
  rocksdb::Status got = opened.db->Get(rocksdb::ReadOptions(), opened.specs,
                                       kRowKeyFormatKey, &format);
  if (got.ok()) {
    if (format == kSlotOrderedFormat) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(options.path, " stores rows keyed as \"", format,
                     "\", which this version does not read"));
  }
  if (!got.IsNotFound()) return FromRocks(got, "reading the row key format");
  if (options.read_only) {
    *legacy_row_keys = true;
    return absl::OkStatus();
  }
  for (const auto& [id, handle] : opened.table_handles) {
    const auto table =
        std::find_if(tables.begin(), tables.end(),
                     [&](const StoredTable& t) { return t.id == id; });
    RETURN_IF_ERROR(UpgradeFamilyRowKeys(
        options, opened.db.get(), handle,
        table == tables.end() ? absl::StrCat(id) : table->spec.name()));
  }
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return FromRocks(opened.db->Put(durable, opened.specs, kRowKeyFormatKey,
                                  kSlotOrderedFormat),
                   "recording the row key format");
}

// Writes the ids of tables written before ids were recorded, synced: before
// a drop can change the families' places.
absl::Status RecordLegacyIds(rocksdb::DB* db, rocksdb::WriteBatch* legacy_ids) {
  rocksdb::WriteOptions durable;
  durable.sync = true;
  return FromRocks(db->Write(durable, legacy_ids), "recording the tables' ids");
}

}  // namespace

void RocksStore::Batch::SetLogMark(uint32_t stripe, uint64_t end_sequence) {
  batch_.Put(store_->log_handle_, LogKey(stripe, 0),
             rocksdb::Slice(reinterpret_cast<const char*>(&end_sequence),
                            sizeof(end_sequence)));
}

void RocksStore::Batch::StartLogEpoch(uint64_t epoch,
                                      absl::string_view ledger) {
  // Every key of the family sorts below 13 0xff bytes, the epoch's and the
  // ledger's included; the Puts below come later in the batch, so they
  // stand.
  batch_.DeleteRange(store_->log_handle_, rocksdb::Slice(),
                     std::string(13, '\xff'));
  batch_.Put(
      store_->log_handle_, kEpochKey,
      rocksdb::Slice(reinterpret_cast<const char*>(&epoch), sizeof(epoch)));
  batch_.Put(store_->log_handle_, kLedgerKey,
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
  batch_.Put(store_->Handle(table), rocksdb::SliceParts(&key_slice, 1),
             rocksdb::SliceParts(parts, 3));
}

void RocksStore::Batch::Delete(TableId table, uint64_t key) {
  batch_.Delete(store_->Handle(table), RowKey(key).slice());
}

void RocksStore::Batch::DeleteSlots(TableId table, uint32_t first_slot,
                                    uint32_t end_slot) {
  batch_.DeleteRange(store_->Handle(table),
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

// Hands each compaction of a table family with an expiry rule a filter
// that drops the rows the rule says expired, as of the compaction's start,
// and tells `on_expired` (RocksStoreOptions) of each.
class RocksStore::ExpiryFilterFactory
    : public rocksdb::CompactionFilterFactory {
 public:
  explicit ExpiryFilterFactory(
      std::function<void(TableId, uint64_t, uint32_t)> on_expired)
      : on_expired_(std::move(on_expired)) {}

  void Set(uint32_t family_id, TableId table, const ExpiryRule& rule) {
    absl::MutexLock lock(&mu_);
    rules_[family_id] = TableRule{table, rule};
  }
  uint64_t expired() const { return expired_.load(); }

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override {
    TableRule rule;
    {
      absl::MutexLock lock(&mu_);
      auto found = rules_.find(context.column_family_id);
      if (found == rules_.end() || found->second.rule.ttl_s == 0)
        return nullptr;
      rule = found->second;
    }
    return std::make_unique<ExpiryFilter>(
        rule, static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())),
        &expired_, &on_expired_);
  }
  const char* Name() const override { return "ps.ExpiryFilterFactory"; }

 private:
  struct TableRule {
    TableId table = 0;
    ExpiryRule rule;
  };

  class ExpiryFilter : public rocksdb::CompactionFilter {
   public:
    ExpiryFilter(
        const TableRule& rule, uint32_t now_s, std::atomic<uint64_t>* expired,
        const std::function<void(TableId, uint64_t, uint32_t)>* on_expired)
        : rule_(rule),
          now_s_(now_s),
          expired_(expired),
          on_expired_(on_expired) {}
    bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value,
                std::string*, bool*) const override {
      const size_t with_meta = rule_.rule.row_floats * sizeof(float) +
                               sizeof(LogPosition) + sizeof(RowMeta);
      if (value.size() != with_meta) return false;
      RowMeta meta;
      std::memcpy(&meta, value.data() + value.size() - sizeof(RowMeta),
                  sizeof(meta));
      if (!rule_.rule.Expired(meta, now_s_)) return false;
      ++*expired_;
      if (*on_expired_) {
        absl::StatusOr<uint64_t> row_key = DecodeRowKey(key, /*legacy=*/true);
        // Stamped when dropped, not when the compaction began: an export
        // that read the record before has a time at or below it.
        if (row_key.ok()) {
          (*on_expired_)(
              rule_.table, *row_key,
              static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now())));
        }
      }
      return true;
    }
    const char* Name() const override { return "ps.ExpiryFilter"; }

   private:
    const TableRule rule_;
    const uint32_t now_s_;
    std::atomic<uint64_t>* const expired_;
    const std::function<void(TableId, uint64_t, uint32_t)>* const on_expired_;
  };

  const std::function<void(TableId, uint64_t, uint32_t)> on_expired_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, TableRule> rules_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> expired_{0};
};

absl::StatusOr<std::unique_ptr<RocksStore>> RocksStore::Open(
    const RocksStoreOptions& options) {
  RETURN_IF_ERROR(PrepareStoreDirectory(options));
  const rocksdb::DBOptions db_options = DatabaseOptions(options);
  auto expiry = std::make_shared<ExpiryFilterFactory>(options.on_expired);
  const rocksdb::ColumnFamilyOptions family =
      TableFamilyOptions(options, expiry);
  OpenedDatabase opened;
  RETURN_IF_ERROR(OpenDatabase(options, db_options, family, &opened));

  std::vector<StoredTable> tables;
  RETURN_IF_ERROR(ReadDroppedTables(opened, options.path, &tables));
  rocksdb::WriteBatch legacy_ids;
  RETURN_IF_ERROR(ReadLiveTables(options, &opened, &tables, &legacy_ids));
  RETURN_IF_ERROR(SortAndCheckTableIds(options, &tables));
  if (legacy_ids.Count() > 0 && !options.read_only) {
    RETURN_IF_ERROR(RecordLegacyIds(opened.db.get(), &legacy_ids));
  }
  bool legacy_row_keys = false;
  RETURN_IF_ERROR(UpgradeRowKeys(options, opened, tables, &legacy_row_keys));
  auto store = std::unique_ptr<RocksStore>(new RocksStore(
      options, opened.db.release(), std::exchange(opened.specs, nullptr),
      std::exchange(opened.table_handles, {}),
      std::exchange(opened.log, nullptr), std::move(tables)));
  store->table_options_ = family;
  store->expiry_ = std::move(expiry);
  store->legacy_row_keys_ = legacy_row_keys;
  return store;
}

RocksStore::RocksStore(
    const RocksStoreOptions& options, rocksdb::DB* db,
    rocksdb::ColumnFamilyHandle* specs_handle,
    const std::vector<std::pair<TableId, rocksdb::ColumnFamilyHandle*>>&
        table_handles,
    rocksdb::ColumnFamilyHandle* log_handle,
    std::vector<StoredTable> opened_tables)
    : options_(options),
      db_(db),
      specs_handle_(specs_handle),
      log_handle_(log_handle),
      table_handles_(
          new std::atomic<rocksdb::ColumnFamilyHandle*>[options.max_tables]),
      opened_tables_(std::move(opened_tables)) {
  write_options_.sync = options.sync_wal;
  for (uint32_t i = 0; i < options.max_tables; ++i)
    table_handles_[i].store(nullptr);
  for (auto [id, handle] : table_handles) table_handles_[id].store(handle);
  absl::MutexLock lock(&create_mu_);
  if (!opened_tables_.empty()) next_table_id_ = opened_tables_.back().id + 1;
}

RocksStore::~RocksStore() {
  for (uint32_t i = 0; i < options_.max_tables; ++i) {
    if (rocksdb::ColumnFamilyHandle* handle = table_handles_[i].load())
      db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  }
  db_->DestroyColumnFamilyHandle(log_handle_).PermitUncheckedError();
  db_->DestroyColumnFamilyHandle(specs_handle_).PermitUncheckedError();
  db_->Close().PermitUncheckedError();
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
      table_options_, absl::StrCat(kFamilyPrefix, spec.name()), &handle);
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
  return WriteWith(write_options_, batch);
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
  rocksdb::Status written = db_->Write(options, &batch->batch_);
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
    uint64_t* epoch, absl::flat_hash_map<uint32_t, uint64_t>* marks,
    std::string* ledger) {
  *epoch = 0;
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
    if (key == kEpochKey) {
      *epoch = number;
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
  const rocksdb::Options file_options(db_->GetDBOptions(), table_options_);
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
