// RocksStore's opening: the directory, the database and its families, the
// tables recorded in it, and the upgrades of stores older versions wrote.

#include <algorithm>
#include <filesystem>
#include <utility>

#include "embedding/rocks_store.h"
#include "embedding/rocks_store_internal.h"

namespace ps::embedding {
namespace {

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
  // Every interval's write-back rewrites the hot rows, so each level-0 file
  // overlaps the whole of level 1: a compaction rewrites level 1 however
  // few level-0 files it takes. Eight rather than RocksDB's four halves the
  // bytes compacted per byte written back; a cold row's read checks up to
  // eight more files' bloom filters.
  family.level0_file_num_compaction_trigger = 8;
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
    const TableId table_id = id;
    const auto table =
        std::find_if(tables.begin(), tables.end(),
                     [&](const StoredTable& t) { return t.id == table_id; });
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
  *store->table_options_ = family;
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
      write_options_(std::make_unique<rocksdb::WriteOptions>()),
      table_options_(std::make_unique<rocksdb::ColumnFamilyOptions>()),
      db_(db),
      specs_handle_(specs_handle),
      log_handle_(log_handle),
      table_handles_(
          new std::atomic<rocksdb::ColumnFamilyHandle*>[options.max_tables]),
      opened_tables_(std::move(opened_tables)) {
  write_options_->sync = options.sync_wal;
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

}  // namespace ps::embedding
