// File: embedding/store_snapshots.h
//
// StoreSnapshots is the part of a shard's store that copies it whole, as
// of one moment: a checkpoint (rows with their optimizer state, restorable)
// and an export (weights only, handed to sinks; model/export_format writes
// the files). EmbeddingStore::snapshots() gives it; the store implements
// it. Thread-safe.

#ifndef PS_EMBEDDING_STORE_SNAPSHOTS_H_
#define PS_EMBEDDING_STORE_SNAPSHOTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::embedding {

class StoreSnapshots {
 public:
  virtual ~StoreSnapshots() = default;

  // Writes a snapshot of every table, rows with their optimizer state, into
  // `dir` (which must not exist): every push acknowledged before the call
  // and none that was not. Pushes wait meanwhile; pulls go on.
  virtual absl::Status Checkpoint(const std::string& dir) = 0;

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
  virtual absl::StatusOr<uint32_t> Export(
      const std::vector<ExportTarget>& targets,
      const ExportOptions& options) = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STORE_SNAPSHOTS_H_
