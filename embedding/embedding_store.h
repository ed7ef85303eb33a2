// File: embedding/embedding_store.h
//
// EmbeddingStore holds one shard's tables: named sets of rows (key -> `dim`
// float weights plus optimizer state). Every stored row lives in RocksDB (see
// rocks_store.h); a hot tier in memory, bounded by `cache_bytes`, absorbs
// reads and writes. A key that was never pushed is not stored: Pull() returns
// its deterministic initial value (see initializer.h).
//
// Durability:
//   kWal       Push() returns only after a record of it (per stripe it
//              touched: the summed gradients of its keys, with a sequence
//              number taken when the update was applied; push_record.h) is
//              appended to a push log of files under <data_dir>/push_log
//              (push_log.h).
//              Every stripe's dirty rows are written back every
//              `write_back_interval`, atomically with the stripe's *mark*
//              (the sequence its rows now include); records below a mark are
//              ignored on replay, and a segment goes once every stripe has
//              moved its mark past it. A dirty row evicted in between is
//              written alone, with the sequence of its last update (its
//              LogPosition), and replay skips that key's records up to it.
//              Opening the store replays the records above each mark, so a
//              killed process loses no acknowledged push. The default: losing
//              acknowledged updates silently is the worse surprise.
//   kPeriodic  Push() updates the hot tier only; dirty rows are written back
//              every `write_back_interval` and when evicted. A crash loses at
//              most the last interval's updates. Faster.
//
// A push applies whole or not at all: the request is validated, duplicate
// keys are summed and checked, and every stripe it touches is locked (in
// stripe order) while its rows are loaded, updated, checked for NaN/Inf,
// and under kWal its record written to the push log; if anything fails
// before the record is written, every row is put back as it was.
//
// Exactly once: a push that names its origin (worker, incarnation,
// sequence; push_ledger.h) is applied once however often it arrives. Under
// kWal the origin travels in the push's record, and the ledger's snapshot
// opens every push-log segment and is stored with each new log run, so a
// restart knows every push whose record it replays or has written back.
//
// Why a log of gradients and not the rows: a push then costs one sequential
// write, where writing every updated row through RocksDB's memtable costs
// ~0.5 us per row and memtable flushes. It lives in plain files, not in
// RocksDB, which would flush and compact every record before its mark
// deletes it (docs/perf-history.md).
//
// Concurrency: the hot tier is split into `num_stripes` stripes by key, each
// with its own mutex. A pull locks one stripe at a time; a push locks all
// the stripes it touches, in stripe order, while it updates them (and
// writes its record). Rows reach RocksDB in the order their values were
// taken: under the stripe's lock, or, for the periodic write-back, copied
// under it and written while the stripe admits no other row write (no
// eviction, no second write-back). Thread-safe.

#ifndef PS_EMBEDDING_EMBEDDING_STORE_H_
#define PS_EMBEDDING_EMBEDDING_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/initializer.h"
#include "base/optimizer.h"
#include "embedding/admission_sketch.h"
#include "embedding/dropped_row_log.h"
#include "embedding/push_ledger.h"
#include "embedding/push_log.h"
#include "embedding/push_record.h"
#include "embedding/replication_feed.h"
#include "embedding/rocks_store.h"
#include "embedding/row_cache.h"
#include "proto/ps.pb.h"

namespace ps::embedding {

enum class Durability { kWal, kPeriodic };

struct StoreOptions {
  // Where RocksDB keeps this shard's rows. REQUIRES: not empty.
  std::string data_dir;
  // Budget of the in-memory hot tier, over all tables. Default: 256 MiB.
  size_t cache_bytes = 256 << 20;
  // Default: kWal (see above).
  Durability durability = Durability::kWal;
  // fdatasync the push log on each append (and RocksDB's WAL on each
  // write), so acknowledged pushes survive a machine crash too, not only a
  // process crash. Default: false.
  bool sync_wal = false;
  // How often dirty rows are written back. kPeriodic: the most updates a
  // crash can lose. kWal: each stripe's log mark moves with it; loses
  // nothing either way, and bounds the log replayed when the store next
  // opens. Default (zero): the durability's, WriteBackInterval().
  absl::Duration write_back_interval = absl::ZeroDuration();
  // kWal: once the push log on disk passes this, the stripes holding its
  // oldest segment are written back early, which bounds the log on disk and
  // the replay at the next open; segments are an eighth of it, at most
  // 64 MiB. Default: 1 GiB.
  uint64_t max_push_log_bytes = uint64_t{1} << 30;
  // Lock stripes of the hot tier: more let more pulls and pushes run at
  // once, fewer cost less per request. Default (0): DefaultStripeCount().
  int num_stripes = 0;
  // Largest row dimension a table may declare. Default: 4096.
  uint32_t max_dim = 4096;
  // Most tables the store may hold. Default: 1024.
  uint32_t max_tables = 1024;
  // RocksDB's own memory: block cache and all memtables together.
  // Defaults: 16 MiB and 64 MiB.
  size_t rocksdb_block_cache_bytes = 16 << 20;
  size_t rocksdb_write_buffer_bytes = 64 << 20;
  // kWal: what opening does with a push-log record damaged anywhere but at
  // the log's torn end (push_log.h). Default: kStrict (refuse to open).
  PushLogRecovery push_log_recovery = PushLogRecovery::kStrict;
  // Memory of each admission sketch: one per table whose spec has
  // admit_after >= 2 (admission_sketch.h). Default: 16 MiB.
  size_t admission_sketch_bytes = 16 << 20;
  // Rows dropped for good (expired rows RocksDB's compactions remove)
  // remembered for delta exports, 16 bytes each (dropped_row_log.h); past
  // it, a delta since before the oldest one remembered is refused.
  // Default: 1M.
  size_t max_dropped_rows_remembered = size_t{1} << 20;
  // Workers whose pushes the ledger tracks for exactly-once (push_ledger.h).
  // Default: 4096.
  size_t max_workers = 4096;
  // Testing only: after this many push-log records are written (and
  // synced), the process kills itself with SIGKILL before the push returns,
  // as a crash between logging a push and answering it would. 0: never.
  uint64_t testing_kill_after_push_records = 0;
};

// `options.write_back_interval`, or where that is zero the durability's
// default: 1 s under kPeriodic, 10 s under kWal.
absl::Duration WriteBackInterval(const StoreOptions& options);

// Four lock stripes per hardware thread, at least 8 and at most 256: each
// request locks the stripes its keys fall in one at a time and pays per
// stripe it touches (8 stripes pushed 15-20% more rows/s than 64 on 2
// cores), while more threads want more stripes.
int DefaultStripeCount();

// What Push() did.
struct PushOutcome {
  // Distinct keys updated (for a duplicate: what the first attempt said).
  size_t rows_updated = 0;
  // The push was applied before (same origin): nothing was applied now.
  bool duplicate = false;
};

struct TableStats {
  TableSpec spec;
  // The rate pushes use now: the spec's, or what SetLearningRate() set.
  float learning_rate = 0.0f;
  uint64_t estimated_rows = 0;
  uint64_t disk_bytes = 0;
};

struct StoreStats {
  uint64_t hot_tier_bytes = 0;
  uint64_t hot_tier_budget_bytes = 0;
  // Slots allocated, used or free (RowCache::allocated_slot_bytes()).
  uint64_t hot_tier_allocated_bytes = 0;
  uint64_t hot_tier_hits = 0;
  uint64_t hot_tier_misses = 0;
  uint64_t rows_pulled = 0;
  uint64_t rows_pushed = 0;
  // kWal: bytes of push-log segments on disk (a restart reads them).
  uint64_t push_log_bytes = 0;
  // Keys looked up in RocksDB because the hot tier did not hold them.
  uint64_t disk_lookups = 0;
  uint64_t disk_bytes = 0;
  // Pushes answered as duplicates of ones applied before.
  uint64_t duplicate_pushes = 0;
  // Bytes of damaged push log that point-in-time recovery dropped at open.
  uint64_t push_log_dropped_bytes = 0;
  // Tables with admit_after: keys stored at their admit_after-th push, and
  // (key, push) pairs whose gradients were counted but not applied.
  uint64_t rows_admitted = 0;
  uint64_t keys_held_back = 0;
  // Tables with row_ttl_s: expired rows dropped from the hot tier, and by
  // RocksDB's compactions.
  uint64_t rows_expired_in_memory = 0;
  uint64_t rows_expired_on_disk = 0;
};

// A stored row as a slot move carries it (EmbeddingStore::ReadSlotRows):
// its weights and optimizer state, and what expiry goes by.
struct SlotRow {
  uint64_t key = 0;
  std::vector<float> floats;
  RowMeta meta;
};

// What Expire() dropped.
struct ExpireOutcome {
  uint64_t rows_in_memory = 0;
  uint64_t rows_on_disk = 0;
};

class EmbeddingStore {
 public:
  // Opens the store at options.data_dir, with every table it held.
  static absl::StatusOr<std::unique_ptr<EmbeddingStore>> Open(
      const StoreOptions& options);

  // Writes back dirty rows and closes RocksDB.
  ~EmbeddingStore();

  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  // Declares a table. Idempotent: returns true when created, false when an
  // identical table (after optimizer defaults) exists. ALREADY_EXISTS when a
  // table of that name differs; INVALID_ARGUMENT for a bad name, dim, or
  // hyper-parameter; RESOURCE_EXHAUSTED past max_dim or max_tables.
  absl::StatusOr<bool> DeclareTable(const TableSpec& spec);

  // Sets the learning rate (FTRL's alpha) of `table` for every push from
  // the next on, durably. It multiplies each push's rate by `learning_rate`
  // over the declared one, so a push-log record keeps the rate it was
  // applied with; for FTRL, as for a worker's learning-rate schedule, it
  // scales each gradient's step into z rather than alpha itself, which
  // would rescale every stored weight at once. The spec keeps the declared
  // rate (so the table's workers still declare it alike). NOT_FOUND for an
  // unknown table; INVALID_ARGUMENT unless positive and finite.
  absl::Status SetLearningRate(absl::string_view table, float learning_rate);

  // Drops `table` with every row, in memory and on disk (its files go when
  // the store closes). Pushes wait meanwhile; later pulls and pushes of it
  // get NOT_FOUND, and declaring it again makes a new, empty table. A pull
  // already running may still answer from the dropped rows. NOT_FOUND if
  // unknown.
  absl::Status DropTable(absl::string_view table);

  // Drops `table`'s expired rows now (TableSpec.row_ttl_s): from the hot
  // tier, and from disk by compacting the table whole. Expiry also runs by
  // itself: each stripe's expired rows leave memory once per write-back
  // interval, RocksDB drops them as it compacts, and a load treats an
  // expired row as absent. NOT_FOUND for an unknown table;
  // FAILED_PRECONDITION for one without row_ttl_s.
  absl::StatusOr<ExpireOutcome> Expire(absl::string_view table);

  // The spec of `table` (optimizer defaults filled in). NOT_FOUND if unknown.
  absl::StatusOr<TableSpec> GetTableSpec(absl::string_view table) const;

  // Writes the weights of `keys`, in order, to `out` (keys.size() * dim
  // floats). NOT_FOUND for an unknown table; INVALID_ARGUMENT if `out` has
  // the wrong size.
  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> out);

  // How a table applies pushes now: its optimizer (defaults filled in), the
  // factor SetLearningRate() puts on each push's learning_rate_scale (1 if
  // none), and the floats of optimizer state per row. NOT_FOUND if unknown.
  struct TableOptimizer {
    OptimizerSpec spec;
    float learning_rate_multiplier = 1.0f;
    int state_floats = 0;
  };
  absl::StatusOr<TableOptimizer> GetTableOptimizer(
      absl::string_view table) const;

  // Pull() with each row's optimizer state after its weights: keys.size() *
  // (dim + state_floats) floats to `out`, a row never pushed as its first
  // push would find it (initial weights, fresh state). What a worker needs to
  // replay its own push, not yet applied, onto rows it pulled
  // (worker/own_updates.h). Errors as Pull()'s.
  absl::Status PullWithState(absl::string_view table,
                             absl::Span<const uint64_t> keys,
                             absl::Span<float> out);

  // Applies `gradients` (keys.size() * dim floats, row i for keys[i]) with the
  // table's optimizer; duplicate keys are summed first. All or nothing:
  // NOT_FOUND for an unknown table; INVALID_ARGUMENT for a size mismatch, a
  // NaN/Inf gradient or sum of gradients, or an update that would make a
  // weight or optimizer state NaN/Inf; RESOURCE_EXHAUSTED (full disk) or
  // another I/O error from loading rows or writing the push-log record; in
  // each case nothing is applied. One case is not undone: under `sync_wal`
  // a failed fdatasync after the record is written leaves the update in
  // memory (the next write-back stores it) while the push reports the
  // error. After a push-log failure every later push is refused before it
  // is applied: while the disk is full (RESOURCE_EXHAUSTED, transient), or
  // for any other failure until the store is reopened. With a tracked `origin`,
  // a push applied before is answered with its first outcome (duplicate) and
  // FAILED_PRECONDITION comes for a superseded incarnation. The table's
  // learning rate is multiplied by `learning_rate_scale` for this push
  // (and so in its push-log record); INVALID_ARGUMENT unless it is positive
  // and finite.
  absl::StatusOr<PushOutcome> Push(absl::string_view table,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const float> gradients,
                                   const PushOrigin& origin = PushOrigin(),
                                   float learning_rate_scale = 1.0f);

  // One row's weights, whether it is stored (pushed at least once), and if
  // `state` is set its optimizer state.
  absl::Status GetRow(absl::string_view table, uint64_t key,
                      std::vector<float>* weights, bool* stored,
                      std::vector<float>* state = nullptr);

  // A tracked push refused before it reached Push() (the shard was busy):
  // its retry is applied however many later pushes come first
  // (PushLedger::NoteRefused).
  void NoteRefusedPush(const PushOrigin& origin) {
    ledger_.NoteRefused(origin);
  }

  // The first answer to a tracked push if this shard applied it
  // (PushLedger::Applied).
  absl::StatusOr<std::optional<uint32_t>> AppliedPush(
      const PushOrigin& origin) {
    return ledger_.Applied(origin);
  }

  // This store's push ledger (PushLedger::Serialize()): a move's source
  // hands it to the target once the slots' pushes paused, with the ledgers
  // earlier moves brought here (by source shard).
  std::string SerializeLedger() const { return ledger_.Serialize(); }
  std::vector<std::pair<uint32_t, std::string>> SerializeMovedLedgers();

  // A move's target: the push ledger of `source_shard` as it stood once the
  // moved slots' pushes paused there, merged into what earlier moves from
  // that shard brought, recorded durably and fed to replicas. A push the
  // source applied but whose answer was lost comes back re-routed with the
  // source's origin (PushRequest.moved_from_*), and MovedPushApplied()
  // finds it here even when the source, or a replica promoted in its
  // place, no longer knows it. DATA_LOSS for bytes that do not parse.
  absl::Status MergeMovedLedger(uint32_t source_shard,
                                absl::string_view ledger);
  // The first answer to `origin` if `source_shard` had applied it by a move
  // here (0 when it left the window); nothing if no move from that shard
  // brought it. Errors as PushLedger::Applied().
  absl::StatusOr<std::optional<uint32_t>> MovedPushApplied(
      uint32_t source_shard, const PushOrigin& origin);

  // Moving slots to another shard (embedding_store_slots.cc). The caller
  // makes sure that nothing pushes the rows of the slots meanwhile.
  //
  // Up to `max_rows` stored rows of `table` whose keys' slots `in_move`
  // says, in the stored order (by slot, then key) after `after` (the last
  // key an earlier call returned; nullopt: from the first), each with its
  // optimizer state and expiry metadata; *done once none is left. Reads
  // only the moving slots' ranges of keys, what is on disk: Flush() first.
  // NOT_FOUND for an unknown table.
  absl::StatusOr<std::vector<SlotRow>> ReadSlotRows(
      absl::string_view table,
      const std::function<bool(uint32_t slot)>& in_move,
      std::optional<uint64_t> after, size_t max_rows, bool* done);

  // The rows of `keys` of `table` as they are now (the hot tier's copy, or
  // the stored one), with what ReadSlotRows() reads of each; keys with no
  // row are left out. In key order. NOT_FOUND for an unknown table.
  absl::StatusOr<std::vector<SlotRow>> ReadRowsOfKeys(
      absl::string_view table, absl::Span<const uint64_t> keys);

  // Stores `rows` of `table` as they are (what ReadSlotRows() read on
  // another shard), replacing what this store holds for their keys, in the
  // hot tier: Flush() makes them durable, and marks every stripe's push log
  // past its records, so that a replay applies none of this shard's older
  // records of the keys to the moved rows (a move flushes once, before its
  // switch). NOT_FOUND for an unknown table;
  // INVALID_ARGUMENT for a row of another size (nothing stored).
  // A primary's replication feed carries the rows (FeedEntry::SLOT_ROWS),
  // so that its replicas hold them too.
  absl::Status WriteSlotRows(absl::string_view table,
                             absl::Span<const SlotRow> rows);

  // Stores `rows` of `table` as they are, replacing what this store holds
  // for their keys, as one SST file ingested into RocksDB (durable at
  // once, past the hot tier, which drops its copies of the keys): how a
  // move's first copy of a slot range lands. The keys must be distinct.
  // NOT_FOUND for an unknown table; INVALID_ARGUMENT for a row of another
  // size or a key given twice (nothing stored). Fed as WriteSlotRows().
  absl::Status IngestSlotRows(absl::string_view table,
                              absl::Span<const SlotRow> rows);

  // Deletes every row of every table whose key's slot `doomed` says, in
  // the hot tier and on disk (one range deletion per range of slots); how
  // many were on disk. A primary's replication feed carries the deletion
  // (FeedEntry::DELETE_SLOTS).
  absl::StatusOr<uint64_t> DeleteSlotRows(
      const std::function<bool(uint32_t slot)>& doomed);

  // Writes every dirty row back and syncs the WAL.
  absl::Status Flush();

  // OK while pushes can be acknowledged; else the error that stopped the
  // push log (--durability=wal): marked transient (base/transient_error.h)
  // for a full disk, which writes retry, and not for anything else (a failed
  // write or sync), which refuses every push until a restart.
  absl::Status PushLogHealth() const;

  // Writes a snapshot of every table, rows with their optimizer state, into
  // `dir` (which must not exist): every push acknowledged before the call
  // and none that was not. Pushes wait meanwhile; pulls go on.
  absl::Status Checkpoint(const std::string& dir);

  // Exports the weights (no optimizer state) of tables as of the call:
  // each table's rows go to its sink, in the store's order (by slot, then
  // key: SlotOrderedKey's), each key once. Pushes wait while dirty rows are
  // written back; the rows are read from a snapshot after. The export's
  // files are model/export_format.h's business, not the store's.
  class ExportSink {
   public:
    virtual ~ExportSink() = default;
    // A row's first `dim` weights.
    virtual absl::Status Put(uint64_t key, absl::Span<const float> row) = 0;
    // A delta's row that is no longer part of the model.
    virtual absl::Status Delete(uint64_t key) = 0;
  };
  struct ExportTarget {
    std::string table;
    // Not owned; must outlive the call.
    ExportSink* sink = nullptr;
  };
  struct ExportOptions {
    // Set: a delta. Only the rows updated at or after this time (Unix
    // seconds of this shard's clock: an earlier export's time), and a
    // Delete() of each row that expired since (found expired, or dropped
    // by a compaction). Default: unset (every row).
    std::optional<uint32_t> changed_since_s;
    // Set: only the rows (and deletions) of the slots marked here, by slot
    // (kNumSlots entries): the slots the export's slot map gives this shard.
    // A row of another slot (left by a move in progress or cut short) is
    // its owner's to export. Default: unset (every row).
    std::optional<std::vector<bool>> slots;
  };
  // Returns the time of the export (Unix seconds, this shard's clock,
  // taken before the snapshot): the changed_since_s of a delta after it.
  // NOT_FOUND for an unknown table. FAILED_PRECONDITION for a delta since
  // before this store knows what changed: it opened after that time (what
  // an earlier process dropped is not known), a table was declared after
  // it (a table dropped and declared again), or more rows were dropped
  // since than max_dropped_rows_remembered.
  absl::StatusOr<uint32_t> Export(const std::vector<ExportTarget>& targets,
                                  const ExportOptions& options);

  // Replication (embedding_store_replication.cc). On a primary: every
  // change applied from now on (each push's record, each table declared,
  // dropped or given a learning rate) is appended to `feed`, not owned,
  // which must outlive the store. Call before serving. FAILED_PRECONDITION
  // unless durability is kWal (a push's record is what the feed carries).
  absl::Status SetReplicationFeed(ReplicationFeed* feed);

  // Where a new replica starts: the follower it is registered as in the
  // feed, the last entry its copy holds, and the exactly-once ledger then
  // (PushLedger::Serialize()), which the copy's RocksDB does not hold.
  struct ReplicaCut {
    uint64_t follower = 0;
    uint64_t start_sequence = 0;
    std::string ledger;
  };
  // Checkpoint() into `dir` for a new replica, registering it as a follower
  // of the feed at the same cut: every push acknowledged before is in the
  // copy, every one after in the feed. FAILED_PRECONDITION without a feed.
  absl::StatusOr<ReplicaCut> CheckpointForReplica(const std::string& dir);

  // On a replica, opened from such a copy: merges its cut's ledger.
  absl::Status MergeLedger(absl::string_view ledger) {
    return ledger_.Merge(ledger);
  }

  // On a replica: applies one entry of its primary's feed as the primary
  // applied it: a push with its record's learning-rate scale, past
  // admission and this store's learning-rate multiplier, recorded in the
  // ledger under its origin (an entry applied twice is skipped), and under
  // kWal in this store's push log before returning. A table declared
  // again, or dropped when it is not here, changes nothing (the copy may
  // hold an entry the feed also carries). DATA_LOSS for a record that
  // does not decode; NOT_FOUND for a push to an unknown table.
  absl::Status ApplyFeedEntry(const FeedEntry& entry);

  std::vector<TableStats> ListTables();
  StoreStats Stats();

 private:
  // A table's description, immutable but for the two atomics; owned by the
  // store and kept after a drop, so that pointers to it stay valid (a
  // dropped table is only left out of `tables_by_name_`).
  struct Table {
    TableId id;
    TableSpec spec;
    int dim;
    // dim + optimizer state.
    int row_floats;
    std::unique_ptr<Optimizer> optimizer;
    Initializer initializer;
    // Declared by this process into an empty column family: RocksDB holds
    // only rows the hot tier wrote back, so a stripe that never evicted a
    // row still caches every stored row of this table, and a miss there
    // means "never pushed" without asking RocksDB.
    bool created_empty;
    // SetLearningRate()'s rate over the spec's (1: none set), and the rate
    // itself (the spec's when none was set).
    mutable std::atomic<float> learning_rate_multiplier{1.0f};
    mutable std::atomic<float> learning_rate{0.0f};
    // Set by DropTable() while no push applies (under push_gate_).
    mutable std::atomic<bool> dropped{false};
    // When its rows expire (ttl_s 0: never).
    ExpiryRule expiry = ExpiryRule();
    // spec.admit_after >= 2: counts the pushes of keys not yet stored.
    std::unique_ptr<AdmissionSketch> admission = nullptr;
    // When this process added it (at open, or declared): a delta export
    // since before then is refused.
    uint32_t added_at_s = 0;
  };

  struct Stripe {
    Stripe(uint32_t index, size_t budget_bytes)
        : index(index), cache(budget_bytes) {}
    const uint32_t index;
    absl::Mutex mu;
    RowCache cache ABSL_GUARDED_BY(mu);
    // kWal: the sequence number of this stripe's next push-log record,
    // taken under `mu` when the update is applied, so that sequence order is
    // application order whatever order the records are appended in. Starts
    // at 1 in each run of the log.
    uint64_t next_log_sequence ABSL_GUARDED_BY(mu) = 1;
    // kWal: every record of this stripe at or above its last mark written to
    // RocksDB lies in this push-log segment or a later one.
    std::atomic<uint64_t> log_start_segment{0};
    // Some row left this stripe's hot tier since the store opened, or
    // reached disk past it (IngestSlotRows()).
    bool evicted_rows ABSL_GUARDED_BY(mu) = false;
    // FlushStripe() is writing copies of this stripe's dirty rows without
    // holding `mu`. Meanwhile nothing is evicted from the stripe (so no newer
    // copy of a row can reach RocksDB first) and no other write-back starts.
    bool write_back_in_flight ABSL_GUARDED_BY(mu) = false;
  };

  EmbeddingStore(const StoreOptions& options,
                 std::shared_ptr<DroppedRowLog> dropped_rows,
                 std::unique_ptr<RocksStore> rocks);

  // The member functions live by job: the shared core in
  // embedding_store.cc, the rest in embedding_store_<job>.cc as marked.

  absl::StatusOr<const Table*> FindTable(absl::string_view name) const;
  absl::StatusOr<const Table*> FindTableById(TableId id) const;
  // INVALID_ARGUMENT unless every row of `rows` has table's row_floats.
  absl::Status CheckSlotRows(const Table& table,
                             absl::Span<const SlotRow> rows) const;
  // Appends to the replication feed, if there is one, the rows a move wrote
  // (SLOT_ROWS), or the slot ranges [first, end) it deleted (DELETE_SLOTS).
  // In embedding_store_replication.cc.
  void FeedSlotRows(const Table& table, absl::Span<const SlotRow> rows);
  void FeedDeletedSlots(absl::Span<const std::pair<uint32_t, uint32_t>> ranges);
  // A replica's side of the two: rows stored and made durable, or deleted.
  absl::Status ApplySlotRows(const FeedEntry& entry);
  absl::Status ApplyDeletedSlots(const FeedEntry& entry);
  size_t StripeOf(uint64_t key) const;

  // Groups positions 0..keys.size()-1 by stripe: on return, positions of
  // stripe s are (*order)[(*starts)[s] .. (*starts)[s + 1]).
  void GroupByStripe(absl::Span<const uint64_t> keys,
                     std::vector<uint32_t>* order,
                     std::vector<uint32_t>* starts) const;

  // Makes sure every key in `keys` (distinct) is cached in `stripe`, loading
  // it from RocksDB or, if not stored and `create` is set, creating it with
  // initial weights and fresh optimizer state. Keys neither cached nor stored
  // are left out when `create` is false; for those the caller uses the
  // initializer. If `rows` is set, (*rows)[i] is keys[i]'s cached row
  // (nullptr for those left out); if `created` is set, the rows created are
  // appended to it.
  absl::Status LoadRows(const Table& table, Stripe& stripe,
                        absl::Span<const uint64_t> keys, bool create,
                        std::vector<CachedRow*>* rows = nullptr,
                        std::vector<CachedRow*>* created = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  static uint32_t NowSeconds();

  // Tables (embedding_store_tables.cc). Builds `stored`'s table in memory
  // and, unless dropped, names it.
  absl::Status AddTable(const StoredTable& stored, bool created_empty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tables_mu_);

  // Expiry (embedding_store_expiry.cc).
  // Hands table's expiry rule to RocksDB's compaction filter, with a grace
  // of twice the write-back interval (see the .cc); for every
  // expiring table, once the push log is replayed.
  void StartTableExpiry(const Table& table);
  void StartExpiry();

  // A clean row of `table` in the hot tier that expired (not while the
  // store opens, when the push log's updates land on loaded rows).
  bool ExpiredInMemory(const Table& table, const CachedRow& row) const;

  // Drops `stripe`'s clean rows that expired, of `only_table` or of every
  // table with an expiry rule (nullptr); returns how many.
  size_t ExpireRowsInMemory(Stripe& stripe, const Table* only_table);

  // Pulls (embedding_store_pull.cc).
  // Pull() and PullWithState(): the first `floats_per_row` floats of each
  // row (dim, or the whole row) to `out`.
  absl::Status PullRows(const Table& table, absl::Span<const uint64_t> keys,
                        size_t floats_per_row, absl::Span<float> out);

  // Pushes (embedding_store_push.cc).
  // Push() once the request is valid and new: behind the push gate, the
  // table's state checked, admission applied, then ApplyPush(); counts the
  // admitted and held-back keys of a push applied.
  absl::StatusOr<size_t> ApplyGated(const Table& table,
                                    absl::string_view table_name,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<const float> gradients,
                                    const PushOrigin& origin,
                                    float learning_rate_scale);

  // For a table with admission: returns the keys to apply (stored, or
  // admitted by this push) with their gradients in `kept_keys` and
  // `kept_gradients`; the other keys' gradients are dropped. The keys the
  // table does not store go to `to_count` (distinct), for the caller to
  // count (AdmissionSketch::CountPush) once the push is applied, so that a
  // refused push and its retries count once. Returns how many distinct keys
  // were held back.
  absl::StatusOr<size_t> FilterAdmitted(const Table& table,
                                        absl::Span<const uint64_t> keys,
                                        absl::Span<const float> gradients,
                                        std::vector<uint64_t>* kept_keys,
                                        std::vector<float>* kept_gradients,
                                        std::vector<uint64_t>* to_count,
                                        size_t* admitted);

  // A push being applied: its distinct keys and summed gradients, grouped
  // by stripe, and what it changed so far (to undo on failure).
  struct PendingPush;

  // Applies a validated push whole or not at all (see Push()); returns the
  // number of distinct keys updated. Locks the stripes the push touches, in
  // stripe order (a set the thread-safety analysis cannot follow).
  absl::StatusOr<size_t> ApplyPush(
      const Table& table, absl::Span<const uint64_t> keys,
      absl::Span<const float> gradients, const PushOrigin& origin,
      float learning_rate_scale) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Fills in the stripes `push` touches and, under kWal, builds its record
  // (sequence numbers still 0). REQUIRES: push.keys grouped by stripe.
  void PreparePush(const Table& table, PendingPush& push);
  // The steps below run with every stripe of `push` locked and read and
  // write those stripes' guarded rows. The locks held are a set chosen at
  // run time (push.stripes), which the thread-safety analysis cannot name
  // in a REQUIRES clause: each step is marked ABSL_NO_THREAD_SAFETY_ANALYSIS
  // for that reason alone, and ApplyPush() is the one caller, between its
  // Lock and Unlock of push.stripes.
  // With every stripe of `push` locked: loads and updates its rows, checks
  // them, and under kWal writes its record; on error, undoes it all.
  absl::Status UpdateLockedStripes(const Table& table, PendingPush& push)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // The steps of UpdateLockedStripes(), the first three undoing the push
  // on error: loads (or creates) every row; applies the optimizer to each,
  // refusing a row that leaves the finite numbers; under kWal numbers each
  // stripe's section and writes the record; then marks the rows updated at
  // `now_s`, with their sections' sequences.
  absl::Status LoadPushRows(const Table& table,
                            PendingPush& push) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  absl::Status UpdatePushRows(const Table& table,
                              PendingPush& push) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  absl::Status WritePushRecord(PendingPush& push)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void CommitPush(PendingPush& push,
                  uint32_t now_s) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Puts every row `push` changed back as it was. REQUIRES: every stripe of
  // `push` locked.
  void UndoPush(PendingPush& push) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Under kWal, after the stripes are unlocked: syncs the push's record
  // (with `sync_wal`), and wakes the flusher if the log is over budget.
  absl::Status FinishLoggedPush(const PendingPush& push);

  // Write-back (embedding_store_write_back.cc).
  // Evicts `stripe` down to its budget and writes the evicted dirty rows,
  // each with its log position (and anything already in `batch`), to
  // RocksDB.
  absl::Status EvictAndWrite(Stripe& stripe, RocksStore::Batch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  // EvictAndWrite() with nothing else in the batch; a failed write (a full
  // disk) keeps the rows in memory, dirty, and is logged: the call that
  // evicts (a pull, a push) stands.
  void EvictOrKeep(Stripe& stripe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  // Waits until no write-back of `stripe` is in flight.
  static void AwaitWriteBackLanded(Stripe& stripe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  // What TakeDirtyRows() copied: the rows with their versions, and under
  // kWal where the stripe's log starts once the copies are written.
  struct TakenRows {
    std::vector<std::pair<CachedRow*, uint32_t>> rows;
    uint64_t log_start_segment = 0;
  };

  // Adds a copy of every dirty row of `stripe` to `batch` and, under kWal,
  // the mark of the stripe's log.
  TakenRows TakeDirtyRows(Stripe& stripe, RocksStore::Batch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  // Under kWal, after `taken` is written: moves the stripe's log start and
  // deletes the segments no stripe needs any more.
  absl::Status ReleaseLog(Stripe& stripe, const TakenRows& taken)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

  // Writes `stripe`'s dirty rows back (and marks its log under kWal) without
  // holding its lock during the RocksDB write, so that pulls and pushes of
  // the stripe go on meanwhile; the periodic write-back and Flush() use it.
  absl::Status FlushStripe(Stripe& stripe);
  // The flusher thread's body: a stripe at a time, spread over the
  // write-back interval, the log's oldest first while it is over budget.
  void PeriodicFlushLoop();

  // Replay (embedding_store_replay.cc).
  // Applies the push log left by the previous process (its run, above
  // each stripe's mark), then writes the rows back and starts a new run in
  // one synced write, deletes the old segments, and appends to the new
  // run from then on.
  absl::Status ReplayPushLog();

  // One replay's state: the run replayed, the stripes' marks, the reader,
  // and the sections to apply.
  struct Replay;
  // The steps of ReplayPushLog(). Reads the run, marks and ledger
  // RocksDB holds and opens the run's segments.
  absl::Status OpenReplay(Replay& replay);
  // First pass: feeds every record's header to the ledger and notes each
  // section above its stripe's mark, in stripe and sequence order.
  absl::Status IndexPushLog(Replay& replay);
  absl::Status IndexRecord(Replay& replay, PushLog::Location location,
                           absl::string_view record);
  // Decodes a record's header and feeds its origin or ledger snapshot to
  // the ledger: a push's origin is applied whether or not its sections are
  // above their marks.
  absl::StatusOr<PushRecordHeader> ReadRecordHeader(absl::string_view record);
  // Second pass: applies the noted sections to the rows, in order.
  absl::Status ApplyReplayedSections(Replay& replay);
  // Writes the replayed rows back with the new run, deletes the old one's
  // segments and starts appending to the new one.
  absl::Status StartNextRun(Replay& replay);

  // Checkpoints and exports (embedding_store_checkpoint.cc).
  // Hands `table`'s stored rows as of `snapshot` and `now_s` (a delta's:
  // changed and dropped since options.changed_since_s, the keys in
  // `dropped` sorted in the store's order) to `sink`, in the store's order.
  absl::Status ExportTable(const Table& table,
                           const RocksStore::Snapshot& snapshot,
                           const ExportOptions& options, uint32_t now_s,
                           const std::vector<uint64_t>& dropped,
                           ExportSink& sink);
  // The keys of `table` dropped since options.changed_since_s, in the
  // store's order, for a delta (none for a full export); the refusals of
  // Export().
  absl::StatusOr<std::vector<uint64_t>> DroppedForDelta(
      const Table& table, const ExportOptions& options) const;

  const StoreOptions options_;
  // Shared with RocksDB's compaction filters, which record into it.
  const std::shared_ptr<DroppedRowLog> dropped_rows_;
  const std::unique_ptr<RocksStore> rocks_;
  // Declared before the push log, whose segment preamble reads it.
  PushLedger ledger_;
  // MergeMovedLedger()'s, by source shard.
  absl::Mutex moved_ledgers_mu_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<PushLedger>> moved_ledgers_
      ABSL_GUARDED_BY(moved_ledgers_mu_);
  std::unique_ptr<PushLog> push_log_;
  // SetReplicationFeed()'s, or null.
  std::atomic<ReplicationFeed*> feed_{nullptr};
  // The push log's run that rows' log positions refer to: the replayed
  // one while ReplayPushLog() runs, the new one after. Set before any other
  // thread starts.
  uint64_t log_run_ = 0;
  std::vector<std::unique_ptr<Stripe>> stripes_;

  // Pushes hold it shared while they apply; Checkpoint() holds it alone,
  // so that a snapshot has every push whole or not at all.
  absl::Mutex push_gate_;

  // Serialises DropTable() and SetLearningRate().
  absl::Mutex admin_mu_;
  mutable absl::Mutex tables_mu_;
  // Indexed by id; null for an id no table was found with at open.
  std::vector<std::unique_ptr<Table>> tables_ ABSL_GUARDED_BY(tables_mu_);
  absl::flat_hash_map<std::string, const Table*> tables_by_name_
      ABSL_GUARDED_BY(tables_mu_);

  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> rows_pulled_{0};
  std::atomic<uint64_t> rows_pushed_{0};
  std::atomic<uint64_t> disk_lookups_{0};
  std::atomic<uint64_t> duplicate_pushes_{0};
  std::atomic<uint64_t> push_records_written_{0};
  std::atomic<uint64_t> rows_admitted_{0};
  std::atomic<uint64_t> rows_expired_in_memory_{0};
  // Some table has an expiry rule.
  std::atomic<bool> any_expiry_{false};
  std::atomic<uint64_t> keys_held_back_{0};
  // Open() succeeded: the destructor writes back (a failed open leaves the
  // data dir untouched).
  bool opened_ = false;
  uint64_t push_log_dropped_bytes_ = 0;  // set at open

  // The flusher's wake-ups: stop, or the push log has grown past
  // max_push_log_bytes. Lock order: a stripe's mu, then flush_mu_.
  absl::Mutex flush_mu_;
  bool stop_flushing_ ABSL_GUARDED_BY(flush_mu_) = false;
  bool log_over_budget_ ABSL_GUARDED_BY(flush_mu_) = false;
  std::thread flusher_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_EMBEDDING_STORE_H_
