// File: embedding/slot_migration.h
//
// SlotMigration is the part of a shard's store that moving slots between
// shards uses (server/slot_move.cc, the admin service): rows read by slot
// or by key and written, ingested or deleted by slot. The push ledgers that
// travel with them, so that a move keeps every push exactly once, are
// StoreLedger's (store_ledger.h). A move reads the live store, not a
// snapshot: pushes to the moving slots go on while it copies, and the keys
// they change are read again (server/slot_move.h), so a snapshot would only
// pin RocksDB's files for the move's length.
// EmbeddingStore::slots() gives it; the store implements it. Thread-safe.

#ifndef PS_EMBEDDING_SLOT_MIGRATION_H_
#define PS_EMBEDDING_SLOT_MIGRATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "embedding/rocks_store.h"

namespace ps::embedding {

// A stored row as a slot move carries it (SlotMigration::ReadSlotRows):
// its weights and optimizer state, and what expiry goes by.
struct SlotRow {
  uint64_t key = 0;
  std::vector<float> floats;
  RowMeta meta;
};

class SlotMigration {
 public:
  virtual ~SlotMigration() = default;

  // Moving slots to another shard (embedding_store_slots.cc). The caller
  // makes sure that nothing pushes the rows of the slots meanwhile.
  //
  // Up to `max_rows` stored rows of `table` whose keys' slots `in_move`
  // says, in the stored order (by slot, then key) after `after` (the last
  // key an earlier call returned; nullopt: from the first), each with its
  // optimizer state and expiry metadata; *done once none is left. Reads
  // only the moving slots' ranges of keys, what is on disk: Flush() first.
  // NOT_FOUND for an unknown table.
  virtual absl::StatusOr<std::vector<SlotRow>> ReadSlotRows(
      absl::string_view table,
      const std::function<bool(uint32_t slot)>& in_move,
      std::optional<uint64_t> after, size_t max_rows, bool* done) = 0;

  // The rows of `keys` of `table` as they are now (the hot tier's copy, or
  // the stored one), with what ReadSlotRows() reads of each; keys with no
  // row are left out. In key order. NOT_FOUND for an unknown table.
  virtual absl::StatusOr<std::vector<SlotRow>> ReadRowsOfKeys(
      absl::string_view table, absl::Span<const uint64_t> keys) = 0;

  // Stores `rows` of `table` as they are (what ReadSlotRows() read on
  // another shard), replacing what this store holds for their keys, in the
  // hot tier: Flush() makes them durable, and marks every stripe's push log
  // past its records, so that a replay applies none of this shard's older
  // records of the keys to the moved rows (a move flushes once, before its
  // switch). NOT_FOUND for an unknown table;
  // INVALID_ARGUMENT for a row of another size (nothing stored).
  // A primary's replication feed carries the rows (FeedEntry::SLOT_ROWS),
  // so that its replicas hold them too.
  virtual absl::Status WriteSlotRows(absl::string_view table,
                                     absl::Span<const SlotRow> rows) = 0;

  // Stores `rows` of `table` as they are, replacing what this store holds
  // for their keys, as one SST file ingested into RocksDB (durable at
  // once, past the hot tier, which drops its copies of the keys): how a
  // move's first copy of a slot range lands. The keys must be distinct.
  // NOT_FOUND for an unknown table; INVALID_ARGUMENT for a row of another
  // size or a key given twice (nothing stored). Fed as WriteSlotRows().
  virtual absl::Status IngestSlotRows(absl::string_view table,
                                      absl::Span<const SlotRow> rows) = 0;

  // Deletes every row of every table whose key's slot `doomed` says, in
  // the hot tier and on disk (one range deletion per range of slots); how
  // many were on disk. A primary's replication feed carries the deletion
  // (FeedEntry::DELETE_SLOTS).
  virtual absl::StatusOr<uint64_t> DeleteSlotRows(
      const std::function<bool(uint32_t slot)>& doomed) = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_SLOT_MIGRATION_H_
