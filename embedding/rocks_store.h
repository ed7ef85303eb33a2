// File: embedding/rocks_store.h
//
// The durable tier: one RocksDB database per shard, one column family per
// table, rows keyed by their slot (base/routing.h) and then their 8-byte key,
// with the row's floats (weights, then optimizer state) as the value: one
// slot's rows are one range of keys, read (ScanSlots), deleted (DeleteSlots)
// and ingested (IngestRows) as a whole when slots move. Table specs are kept
// in the default column family, so reopening the same directory brings every
// table back.
//
// A store written before rows were stored by slot (keys of 8 bytes) is
// upgraded in place by the first Open() that may write: every row is
// rewritten under its new key, a batch at a time (a process stopped
// part-way goes on at the next Open()), then the format is recorded. Opened
// read-only, such a store can only be scanned whole (Scan()), which is all
// a restore from an old checkpoint needs.
//
// A "push log" column family holds what EmbeddingStore needs to replay its
// push log (push_log.h) under --durability=wal: the log's run, per lock
// stripe the mark (the sequence up to which rows are written back), and the
// push ledger (push_ledger.h) as it stood when the run started.
//
// A table is created in two steps, its column family and then its spec (with
// its id); a process stopped between them leaves a family without a spec,
// which Open() drops (nothing was ever written to it). Dropping a table
// replaces its spec with a tombstone under its id, then drops its family; a
// process stopped in between leaves a family Open() drops. Ids are never
// reused: push-log records name tables by id, and a record of a dropped
// table must not be read as one of a newer table.
//
// Thread-safe: RocksDB serialises what it must; concurrent Write() calls are
// group-committed into one WAL write.

#ifndef PS_EMBEDDING_ROCKS_STORE_H_
#define PS_EMBEDDING_ROCKS_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

// RocksDB stays behind this header: its users (the embedding store, and
// through it server/) do not compile RocksDB's headers.
namespace rocksdb {
class ColumnFamilyHandle;
struct ColumnFamilyOptions;
class DB;
class Snapshot;
class WriteBatch;
struct WriteOptions;
}  // namespace rocksdb

namespace ps::embedding {

struct RocksStoreOptions {
  // Directory of the database. REQUIRES: not empty. Created if missing.
  std::string path;
  // Memory for RocksDB's block cache (uncompressed blocks read from SSTs).
  // Default: 16 MiB.
  size_t block_cache_bytes = 16 << 20;
  // Memory for all memtables together, across tables. Default: 64 MiB.
  size_t write_buffer_bytes = 64 << 20;
  // fsync the WAL on every Write(), so acknowledged writes survive a machine
  // crash and not only a process crash. Default: false.
  bool sync_wal = false;
  // Most tables the store can hold. Default: 1024.
  uint32_t max_tables = 1024;
  // Open an existing database (a checkpoint's part) read-only: nothing in
  // `path` changes, and writes fail. Default: false.
  bool read_only = false;
  // Called for each row an expiry rule (SetExpiry) drops as RocksDB
  // compacts: its table, key and when (Unix seconds, at the call).
  // Called from RocksDB's threads, several at once. Default: none.
  std::function<void(uint32_t table, uint64_t key, uint32_t when_s)> on_expired;
};

// A stored table's id in this store: stable for the store's life and never
// given to another table, also after a drop. Below max_tables.
using TableId = uint32_t;

// A table found on disk at Open().
struct StoredTable {
  TableId id = 0;
  TableSpec spec;
  // Dropped: only its id and spec remain (to read old push-log records).
  bool dropped = false;
  // The learning rate SetLearningRate() last set; 0 when none was (the
  // spec's applies).
  float learning_rate = 0.0f;
};

// Where a stored row stands in the push log: the log's run, and the
// sequence of the last update the row includes (embedding_store.h). Stored
// after the row's floats; rows written before it existed read as {0, 0}.
struct LogPosition {
  uint64_t run = 0;
  uint64_t sequence = 0;
};

// What expiry goes by, stored after the log position: when a push last
// updated the row (seconds since the Unix run; 0: not known, for rows
// stored before rows carried it, which never expire until updated) and how
// many pushes did (saturating).
struct RowMeta {
  uint32_t updated_at_s = 0;
  uint32_t push_count = 0;
};

// A row for IngestRows(): its floats (weights and optimizer state), log
// position and meta.
struct StoredRow {
  uint64_t key = 0;
  absl::Span<const float> floats;
  LogPosition position;
  RowMeta meta;
};

// When a table's stored rows expire (TableSpec.row_ttl_s): not updated for
// `ttl_s` seconds and, if `evict_below_count` > 0, pushed fewer than that many
// times. Times are whole seconds, so a row is kept at least `ttl_s` seconds
// after its last update and expires within the second after that, never
// before. `row_floats` is the table's floats per row (weights and optimizer
// state), which locates the RowMeta in a stored value.
struct ExpiryRule {
  int row_floats = 0;
  uint32_t ttl_s = 0;
  uint32_t evict_below_count = 0;

  bool Expired(const RowMeta& meta, uint32_t now_s) const {
    return ttl_s > 0 && meta.updated_at_s != 0 &&
           now_s > meta.updated_at_s + uint64_t{ttl_s} &&
           (evict_below_count == 0 || meta.push_count < evict_below_count);
  }
};

// Row writes, reads and scans set RocksDB's perf level of the calling thread
// to kDisable (rocksdb::SetPerfLevel): nothing here reads RocksDB's
// per-thread perf counters, and counting the write-back's key comparisons
// cost a shard ~3% of its CPU. A caller that wants RocksDB's perf context
// sets the level again after each call.
class RocksStore {
 public:
  // A set of row writes applied atomically by Write(). Move-only; a
  // moved-from Batch may only be destroyed or assigned to.
  class Batch {
   public:
    Batch(Batch&& other) noexcept;
    Batch& operator=(Batch&& other) noexcept;
    ~Batch();

    void Put(TableId table, uint64_t key, absl::Span<const float> row,
             LogPosition position, RowMeta meta);
    void Delete(TableId table, uint64_t key);
    // Deletes every row of `table` whose key's slot is in [first_slot,
    // end_slot) (one range deletion).
    void DeleteSlots(TableId table, uint32_t first_slot, uint32_t end_slot);
    // Records that the push log of `stripe` (push_log.h) is written back up
    // to, not including, `end_sequence`.
    void SetLogMark(uint32_t stripe, uint64_t end_sequence);
    // Deletes every mark and records `run` as the push log's, with the
    // push ledger's snapshot `ledger` (PushLedger::Serialize()).
    void StartLogRun(uint64_t run, absl::string_view ledger);
    bool empty() const;

   private:
    friend class RocksStore;
    explicit Batch(const RocksStore* store);
    const RocksStore* store_;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
  };

  // Opens (or creates) the database at options.path with every table found
  // there.
  static absl::StatusOr<std::unique_ptr<RocksStore>> Open(
      const RocksStoreOptions& options);

  ~RocksStore();

  // The tables found on disk at Open(), dropped ones included, in id order.
  const std::vector<StoredTable>& opened_tables() const {
    return opened_tables_;
  }

  // Creates a column family for `spec` and records the spec durably. Returns
  // the new table's id; RESOURCE_EXHAUSTED once max_tables ids are used
  // (dropped tables keep theirs).
  absl::StatusOr<TableId> CreateTable(const TableSpec& spec);

  // Dropping table `id` (named `spec.name()`), in two steps. RecordDrop()
  // durably replaces its spec with a tombstone: from then on Open() no
  // longer finds the table, and drops its family if it is still there.
  // DropFamily() then drops the column family with every row; RocksDB
  // deletes the files once the store closes (readers that hold the family
  // may still read it until then). Between the two, the caller makes sure
  // nothing writes the table's rows any more.
  absl::Status RecordDrop(TableId id, const TableSpec& spec);
  absl::Status DropFamily(TableId id);

  // Records `learning_rate` durably as table `name`'s (see StoredTable).
  absl::Status SetLearningRate(const std::string& name, float learning_rate);

  // Records `ledger` durably as the push ledger slot moves brought from
  // shard `source_shard` (StoreLedger::MergeMovedLedger), replacing the
  // one recorded before; and every one recorded, by source shard.
  absl::Status SetMovedLedger(uint32_t source_shard, absl::string_view ledger);
  absl::StatusOr<absl::flat_hash_map<uint32_t, std::string>> ReadMovedLedgers();

  Batch NewBatch() const { return Batch(this); }

  // Writes `batch` through the WAL (synced if options.sync_wal).
  // RESOURCE_EXHAUSTED, marked transient (base/transient_error.h), for a
  // full disk; writes work again once it has room.
  absl::Status Write(Batch* batch);
  // Writes `batch` and syncs the WAL, whatever options.sync_wal says.
  absl::Status WriteSynced(Batch* batch);

  // Reads `keys` of `table`. For each key, (*values)[i] holds the stored row
  // (decode it with DecodeRow) and (*found)[i] says whether there was one.
  absl::Status MultiGet(TableId table, absl::Span<const uint64_t> keys,
                        std::vector<std::string>* values,
                        std::vector<bool>* found);

  // Splits a value MultiGet() read into the row's `row.size()` floats, its
  // log position and (if `meta` is set) its RowMeta; values stored before
  // either existed read as zeros. DATA_LOSS for a value of another size.
  static absl::Status DecodeRow(absl::string_view value, absl::Span<float> row,
                                LogPosition* position, RowMeta* meta = nullptr);

  // Sets when table `id`'s stored rows expire: RocksDB drops them as it
  // compacts (a CompactionFilter), so expiry costs no scan.
  void SetExpiry(TableId id, const ExpiryRule& rule);

  // Compacts table `id` whole now (with its memtable), so that every
  // expired row goes; returns how many the filter dropped meanwhile.
  absl::StatusOr<uint64_t> CompactTable(TableId id);

  // Rows the expiry filter dropped since the store opened.
  uint64_t rows_expired() const;

  // The push log's run (0 if never started), each stripe's mark, and the
  // ledger recorded with the run (empty if none). FAILED_PRECONDITION for
  // a push log an older version kept in RocksDB.
  absl::Status ReadLogState(uint64_t* run,
                            absl::flat_hash_map<uint32_t, uint64_t>* marks,
                            std::string* ledger);

  // RocksDB's estimates for one table.
  uint64_t EstimatedRows(TableId table);
  uint64_t DiskBytes(TableId table);
  // Live SST bytes over all tables.
  uint64_t TotalDiskBytes();

  // Makes the WAL durable on disk (used at shutdown).
  absl::Status SyncWal();

  // A consistent view of every table as of the moment it was taken; owns a
  // RocksDB snapshot, released at destruction. Must not outlive the store.
  class Snapshot {
   public:
    ~Snapshot();
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;

   private:
    friend class RocksStore;
    Snapshot(rocksdb::DB* db, const rocksdb::Snapshot* snapshot)
        : db_(db), snapshot_(snapshot) {}
    rocksdb::DB* const db_;
    const rocksdb::Snapshot* const snapshot_;
  };
  std::unique_ptr<Snapshot> GetSnapshot();

  // Calls fn(key, stored value) for every row of `table` as of `snapshot`,
  // in the order of the stored keys (by slot, then key); stops at the first
  // error fn returns.
  absl::Status Scan(
      TableId table, const Snapshot& snapshot,
      const std::function<absl::Status(uint64_t key, absl::string_view value)>&
          fn);

  // Calls fn(key, stored value) for the rows of `table` after the key
  // `after` (nullopt: from the first), in the order of the stored keys (by
  // slot, then key), as of the call, until fn returns false or an error.
  absl::Status ScanFrom(TableId table, std::optional<uint64_t> after,
                        const std::function<absl::StatusOr<bool>(
                            uint64_t key, absl::string_view value)>& fn);
  // The same for the rows whose key's slot is in [first_slot, end_slot):
  // one range of stored keys, read from its start, or if `after` is set
  // and its slot is at or past first_slot, from after it (nothing if its
  // slot is at or past end_slot).
  absl::Status ScanSlots(TableId table, uint32_t first_slot, uint32_t end_slot,
                         std::optional<uint64_t> after,
                         const std::function<absl::StatusOr<bool>(
                             uint64_t key, absl::string_view value)>& fn);

  // Writes `rows` of `table` (distinct keys, any order) into one SST file
  // and ingests it (RocksDB's IngestExternalFile): durable once this
  // returns, replacing what was stored for their keys, without the
  // memtable or the WAL. NOT_FOUND for an unknown table; INVALID_ARGUMENT
  // for a key given twice (nothing stored).
  absl::Status IngestRows(TableId table, std::vector<StoredRow> rows);

  // Writes a consistent copy of the database into `dir` (RocksDB's
  // Checkpoint: files hard-linked where the file system allows, memtables
  // flushed first, so the copy needs no WAL). ALREADY_EXISTS if `dir` does.
  absl::Status CreateCheckpoint(const std::string& dir);

 private:
  class ExpiryFilterFactory;

  RocksStore(
      const RocksStoreOptions& options, rocksdb::DB* db,
      rocksdb::ColumnFamilyHandle* specs_handle,
      const std::vector<std::pair<TableId, rocksdb::ColumnFamilyHandle*>>&
          table_handles,
      rocksdb::ColumnFamilyHandle* log_handle,
      std::vector<StoredTable> opened_tables);

  rocksdb::ColumnFamilyHandle* Handle(TableId table) const;
  // FAILED_PRECONDITION for a store whose row keys are not by slot (a
  // store of an older version opened read-only).
  absl::Status RequireSlotOrder() const;
  // Writes `batch`, resuming RocksDB first after an earlier failed write.
  absl::Status WriteWith(const rocksdb::WriteOptions& options, Batch* batch);

  const RocksStoreOptions options_;
  const std::unique_ptr<rocksdb::WriteOptions> write_options_;
  const std::unique_ptr<rocksdb::ColumnFamilyOptions> table_options_;
  std::unique_ptr<rocksdb::DB> db_;
  // The default family, which holds the specs.
  rocksdb::ColumnFamilyHandle* specs_handle_ = nullptr;
  rocksdb::ColumnFamilyHandle* log_handle_ = nullptr;
  // Serialises CreateTable() and DropTable().
  absl::Mutex create_mu_;
  // Table i's family is table_handles_[i]: a fixed array so that readers need
  // no lock; null for ids never used. A dropped table's handle stays until
  // the store closes.
  const std::unique_ptr<std::atomic<rocksdb::ColumnFamilyHandle*>[]>
      table_handles_;
  // The id the next CreateTable() takes.
  uint32_t next_table_id_ ABSL_GUARDED_BY(create_mu_) = 0;
  // A write failed: RocksDB holds a background error until Resume().
  std::atomic<bool> needs_resume_{false};
  const std::vector<StoredTable> opened_tables_;
  // Every table family's compaction filters come from it.
  std::shared_ptr<ExpiryFilterFactory> expiry_;
  // Rows are under 8-byte keys (an older store opened read-only).
  bool legacy_row_keys_ = false;
  // Numbers the files IngestRows() writes.
  std::atomic<uint64_t> next_ingest_file_{0};
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ROCKS_STORE_H_
