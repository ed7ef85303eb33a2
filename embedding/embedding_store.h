// File: embedding/embedding_store.h
//
// EmbeddingStore holds one shard's tables: named sets of rows (key -> `dim`
// float weights plus optimizer state). This header is its public face: the
// pulls and pushes, and five parts, each an interface of its own: the
// tables (store_tables.h), and what slot moves, snapshots, replication and
// exactly-once use (slot_migration.h, store_snapshots.h,
// store_replication.h, store_ledger.h); EmbeddingStoreImpl
// (embedding_store_impl.h) is the one implementation, and RocksDB stays
// behind it. An export's rows are read by a class of their own over one
// snapshot (snapshot_export.h). Every stored row lives in
// RocksDB (see rocks_store.h); a hot tier in memory, bounded by `cache_bytes`,
// absorbs reads and writes. A key that was never pushed is not stored: Pull()
// returns its deterministic initial value (see initializer.h).
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
// Concurrency: the hot tier is split into `num_stripes` stripes by the
// key's slot (stripes.h), each with its own mutex. A pull locks one stripe
// at a time; a push locks all the stripes it touches, in stripe order,
// while it updates them (and writes its record). Rows reach RocksDB in the order their values were
// taken: under the stripe's lock, or, for the periodic write-back, copied
// under it and written while the stripe admits no other row write (no
// eviction, no second write-back). Thread-safe.

#ifndef PS_EMBEDDING_EMBEDDING_STORE_H_
#define PS_EMBEDDING_EMBEDDING_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/push_ledger.h"
#include "embedding/push_log.h"
#include "embedding/slot_migration.h"
#include "embedding/store_ledger.h"
#include "embedding/store_replication.h"
#include "embedding/store_snapshots.h"
#include "embedding/store_tables.h"
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
  // Hot-tier rows on transparent huge pages (MADV_HUGEPAGE regions:
  // chunk_arena.h), which spare most TLB misses of random row reads; off,
  // they are on the heap's 4 KiB pages (for a kernel whose THP compaction
  // stalls page faults). Default: true.
  bool hot_tier_huge_pages = true;
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

struct StoreStats {
  uint64_t hot_tier_bytes = 0;
  uint64_t hot_tier_budget_bytes = 0;
  // Entries allocated, used or free (RowCache::allocated_entry_bytes()).
  uint64_t hot_tier_allocated_bytes = 0;
  // Bytes of the huge-page regions hot-tier chunks come from, in use or
  // partly free: the process's (ChunkArena::Global()), whatever store uses
  // them.
  uint64_t hot_tier_mapped_bytes = 0;
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

class EmbeddingStore {
 public:
  // Opens the store at options.data_dir, with every table it held.
  static absl::StatusOr<std::unique_ptr<EmbeddingStore>> Open(
      const StoreOptions& options);

  // Writes back dirty rows and closes RocksDB.
  virtual ~EmbeddingStore() = default;

  // Writes the weights of `keys`, in order, to `out` (keys.size() * dim
  // floats). NOT_FOUND for an unknown table; INVALID_ARGUMENT if `out` has
  // the wrong size.
  virtual absl::Status Pull(absl::string_view table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<float> out) = 0;

  // Pull() with each row's optimizer state after its weights: keys.size() *
  // (dim + state_floats) floats to `out`, a row never pushed as its first
  // push would find it (initial weights, fresh state). What a worker needs to
  // replay its own push, not yet applied, onto rows it pulled
  // (worker/own_updates.h). On OK every float of `out` is written (a
  // server sends it as it is). Errors as Pull()'s.
  virtual absl::Status PullWithState(absl::string_view table,
                                     absl::Span<const uint64_t> keys,
                                     absl::Span<float> out) = 0;

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
  virtual absl::StatusOr<PushOutcome> Push(
      absl::string_view table, absl::Span<const uint64_t> keys,
      absl::Span<const float> gradients,
      const PushOrigin& origin = PushOrigin(),
      float learning_rate_scale = 1.0f) = 0;

  // One row's weights, whether it is stored (pushed at least once), and if
  // `state` is set its optimizer state.
  virtual absl::Status GetRow(absl::string_view table, uint64_t key,
                              std::vector<float>* weights, bool* stored,
                              std::vector<float>* state = nullptr) = 0;

  // Writes every dirty row back and syncs the WAL.
  virtual absl::Status Flush() = 0;

  // OK while pushes can be acknowledged; else the error that stopped the
  // push log (--durability=wal): marked transient (base/transient_error.h)
  // for a full disk, which writes retry, and not for anything else (a failed
  // write or sync), which refuses every push until a restart.
  virtual absl::Status PushLogHealth() const = 0;

  virtual StoreStats Stats() = 0;

  // The parts other jobs use, all of this store.
  virtual SlotMigration& slots() = 0;
  virtual StoreSnapshots& snapshots() = 0;
  virtual StoreReplication& replication() = 0;
  virtual StoreLedger& ledger() = 0;
  virtual StoreTables& tables() = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_EMBEDDING_STORE_H_
