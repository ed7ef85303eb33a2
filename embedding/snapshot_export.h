// File: embedding/snapshot_export.h
//
// SnapshotExport hands the rows of one RocksDB snapshot of a shard's store
// to export sinks (StoreSnapshots::Export()): each table's live weights in
// the store's order (by slot, then key), only the slots the export owns,
// and for a delta the rows changed since a time and a Delete() of each row
// that expired or was dropped since. It reads nothing but the snapshot it
// is given; the store takes that snapshot at its push gate, which is what
// makes an export hold every push whole or not at all. One per export; not
// thread-safe.

#ifndef PS_EMBEDDING_SNAPSHOT_EXPORT_H_
#define PS_EMBEDDING_SNAPSHOT_EXPORT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/rocks_store.h"
#include "embedding/store_snapshots.h"

namespace ps::embedding {

class SnapshotExport {
 public:
  // What an export reads of a table: where its rows are, their width, and
  // when they expire.
  struct Table {
    TableId id = 0;
    // Weights per row, the floats a sink gets.
    int dim = 0;
    // Floats per stored row: weights, then optimizer state.
    int row_floats = 0;
    ExpiryRule expiry;
  };

  // Reads `snapshot` of `rocks`, both not owned and outliving this, as of
  // `now_s` (the export's time, Unix seconds: a row expired then is not
  // part of the model), with `options`' delta and slots. REQUIRES:
  // options.slots, if set, has kNumSlots entries.
  SnapshotExport(RocksStore& rocks, const RocksStore::Snapshot& snapshot,
                 uint32_t now_s, const StoreSnapshots::ExportOptions& options);

  // Hands `table`'s rows to `sink`: a Put() of each live row (for a delta,
  // each updated at or after changed_since_s), and for a delta a Delete()
  // of each row that expired since, merged in order with the Delete()s of
  // `dropped` (keys dropped from disk since, in the store's order; a key
  // the snapshot still stores is decided by its stored row). Stops at the
  // first error: a sink's, or DATA_LOSS for a stored row that does not
  // decode.
  absl::Status WriteTable(const Table& table,
                          absl::Span<const uint64_t> dropped,
                          StoreSnapshots::ExportSink& sink);

 private:
  // Whether `key`'s slot is the export's (every slot without options.slots).
  bool Owned(uint64_t key) const;

  RocksStore& rocks_;
  const RocksStore::Snapshot& snapshot_;
  const uint32_t now_s_;
  const StoreSnapshots::ExportOptions& options_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_SNAPSHOT_EXPORT_H_
