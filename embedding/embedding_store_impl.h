// File: embedding/embedding_store_impl.h
//
// EmbeddingStoreImpl is the embedding store (embedding_store.h says what it
// does): one class, its definitions split by job like RocksDB's
// db_impl_*.cc (embedding_store.cc says which file holds what). Only the
// store's own files include this header.

#ifndef PS_EMBEDDING_EMBEDDING_STORE_IMPL_H_
#define PS_EMBEDDING_EMBEDDING_STORE_IMPL_H_

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
#include "embedding/embedding_store.h"
#include "embedding/push_ledger.h"
#include "embedding/push_log.h"
#include "embedding/push_record.h"
#include "embedding/replication_feed.h"
#include "embedding/rocks_store.h"
#include "embedding/row_cache.h"
#include "embedding/stripes.h"
#include "proto/ps.pb.h"

namespace ps::embedding {

class EmbeddingStoreImpl final : public EmbeddingStore,
                                 public SlotMigration,
                                 public StoreSnapshots,
                                 public StoreReplication,
                                 public StoreLedger,
                                 public StoreTables {
 public:
  ~EmbeddingStoreImpl() override;

  EmbeddingStoreImpl(const EmbeddingStoreImpl&) = delete;
  EmbeddingStoreImpl& operator=(const EmbeddingStoreImpl&) = delete;

  // EmbeddingStore:
  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> out) override;
  absl::Status PullWithState(absl::string_view table,
                             absl::Span<const uint64_t> keys,
                             absl::Span<float> out) override;
  absl::StatusOr<PushOutcome> Push(absl::string_view table,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const float> gradients,
                                   const PushOrigin& origin,
                                   float learning_rate_scale) override;
  absl::Status GetRow(absl::string_view table, uint64_t key,
                      std::vector<float>* weights, bool* stored,
                      std::vector<float>* state) override;
  absl::Status Flush() override;
  absl::Status PushLogHealth() const override;
  StoreStats Stats() override;
  SlotMigration& slots() override { return *this; }
  StoreSnapshots& snapshots() override { return *this; }
  StoreReplication& replication() override { return *this; }
  StoreLedger& ledger() override { return *this; }
  StoreTables& tables() override { return *this; }

  // SlotMigration:
  absl::StatusOr<std::vector<SlotRow>> ReadSlotRows(
      absl::string_view table,
      const std::function<bool(uint32_t slot)>& in_move,
      std::optional<uint64_t> after, size_t max_rows, bool* done) override;
  absl::StatusOr<std::vector<SlotRow>> ReadRowsOfKeys(
      absl::string_view table, absl::Span<const uint64_t> keys) override;
  absl::Status WriteSlotRows(absl::string_view table,
                             absl::Span<const SlotRow> rows) override;
  absl::Status IngestSlotRows(absl::string_view table,
                              absl::Span<const SlotRow> rows) override;
  absl::StatusOr<uint64_t> DeleteSlotRows(
      const std::function<bool(uint32_t slot)>& doomed) override;

  // StoreSnapshots:
  absl::Status Checkpoint(const std::string& dir) override;
  absl::StatusOr<uint32_t> Export(const std::vector<ExportTarget>& targets,
                                  const ExportOptions& options) override;

  // StoreReplication:
  absl::Status SetReplicationFeed(ReplicationFeed* feed) override;
  absl::StatusOr<ReplicaCut> CheckpointForReplica(
      const std::string& dir) override;
  absl::Status ApplyFeedEntry(const FeedEntry& entry) override;

  // StoreTables:
  absl::StatusOr<bool> DeclareTable(const TableSpec& spec) override;
  absl::Status SetLearningRate(absl::string_view table,
                               float learning_rate) override;
  absl::Status DropTable(absl::string_view table) override;
  absl::StatusOr<ExpireOutcome> Expire(absl::string_view table) override;
  absl::StatusOr<TableSpec> GetTableSpec(
      absl::string_view table) const override;
  absl::StatusOr<TableOptimizer> GetTableOptimizer(
      absl::string_view table) const override;
  std::vector<TableStats> ListTables() override;

  // StoreLedger:
  absl::StatusOr<std::optional<uint32_t>> AppliedPush(
      const PushOrigin& origin) override {
    return ledger_.Applied(origin);
  }
  void NoteRefusedPush(const PushOrigin& origin) override {
    ledger_.NoteRefused(origin);
  }
  absl::StatusOr<std::optional<uint32_t>> MovedPushApplied(
      uint32_t source_shard, const PushOrigin& origin) override;
  std::string SerializeLedger() const override { return ledger_.Serialize(); }
  std::vector<std::pair<uint32_t, std::string>> SerializeMovedLedgers()
      override;
  absl::Status MergeMovedLedger(uint32_t source_shard,
                                absl::string_view ledger) override;
  absl::Status MergeLedger(absl::string_view ledger) override {
    return ledger_.Merge(ledger);
  }

 private:
  friend class EmbeddingStore;  // Open()

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
    Stripe(uint32_t index, size_t budget_bytes, bool huge_pages)
        : index(index), cache(budget_bytes, huge_pages) {}
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

  EmbeddingStoreImpl(const StoreOptions& options,
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
  // in a REQUIRES clause: each step that reads or writes guarded state is
  // marked ABSL_NO_THREAD_SAFETY_ANALYSIS for that reason alone (the others
  // touch only the rows the push loaded), ApplyPush() is the one caller,
  // between its Lock and Unlock of push.stripes, and UpdateLockedStripes()
  // asserts the locks are held.
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
  absl::Status UpdatePushRows(const Table& table, PendingPush& push);
  absl::Status WritePushRecord(PendingPush& push)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void CommitPush(PendingPush& push, uint32_t now_s);
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

  // Checkpoints and exports (embedding_store_checkpoint.cc; an export's
  // rows are snapshot_export.h's).
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
  // Which of `stripes_` holds a key.
  const StripeMap stripe_map_;

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

#endif  // PS_EMBEDDING_EMBEDDING_STORE_IMPL_H_
