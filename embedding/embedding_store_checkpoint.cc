// EmbeddingStore's copies of itself: checkpoints (RocksDB's, of every table
// with optimizer state) and exports (each table's weights to a sink, by a
// SnapshotExport), each taken at the push gate so that it holds every push
// whole or not at all.

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/snapshot_export.h"

namespace ps::embedding {

absl::Status EmbeddingStoreImpl::Checkpoint(const std::string& dir) {
  absl::WriterMutexLock gate(&push_gate_);
  RETURN_IF_ERROR(Flush());
  return rocks_->CreateCheckpoint(dir);
}

absl::StatusOr<uint32_t> EmbeddingStoreImpl::Export(
    const std::vector<ExportTarget>& targets, const ExportOptions& options) {
  if (options.slots.has_value() && options.slots->size() != kNumSlots) {
    return absl::InvalidArgumentError(absl::StrCat("an export's slots name ",
                                                   options.slots->size(),
                                                   " slots, not ", kNumSlots));
  }
  std::vector<const Table*> tables;
  for (const ExportTarget& target : targets) {
    if (target.sink == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("an export of table ", target.table, " has no sink"));
    }
    ASSIGN_OR_RETURN(const Table* table, FindTable(target.table));
    tables.push_back(table);
  }
  // Taken before the snapshot: a row updated in this second after the
  // snapshot is in the next delta too (it compares at or after).
  const uint32_t now_s = NowSeconds();
  std::unique_ptr<RocksStore::Snapshot> snapshot;
  {
    absl::WriterMutexLock gate(&push_gate_);
    RETURN_IF_ERROR(Flush());
    snapshot = rocks_->GetSnapshot();
  }
  SnapshotExport snapshot_export(*rocks_, *snapshot, now_s, options);
  for (size_t t = 0; t < targets.size(); ++t) {
    // A row a compaction drops after this read (which the scan below may
    // then miss) is recorded at a time at or after now_s: the next delta
    // deletes it.
    ASSIGN_OR_RETURN(const std::vector<uint64_t> dropped,
                     DroppedForDelta(*tables[t], options));
    const Table& table = *tables[t];
    RETURN_IF_ERROR(snapshot_export.WriteTable(
        {table.id, table.dim, table.row_floats, table.expiry}, dropped,
        *targets[t].sink));
  }
  return now_s;
}

absl::StatusOr<std::vector<uint64_t>> EmbeddingStoreImpl::DroppedForDelta(
    const Table& table, const ExportOptions& options) const {
  if (!options.changed_since_s.has_value()) return std::vector<uint64_t>();
  const uint32_t since_s = *options.changed_since_s;
  if (since_s < table.added_at_s) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table.spec.name(), " is known to this shard only since ",
        table.added_at_s, " (Unix seconds; the shard started, or the table ",
        "was declared, then), not since ", since_s,
        ": what changed before is not known"));
  }
  ASSIGN_OR_RETURN(std::vector<uint64_t> dropped,
                   dropped_rows_->DroppedSince(table.id, since_s));
  auto store_order = [](uint64_t a, uint64_t b) {
    return std::make_pair(SlotForKey(a), a) < std::make_pair(SlotForKey(b), b);
  };
  std::sort(dropped.begin(), dropped.end(), store_order);
  dropped.erase(std::unique(dropped.begin(), dropped.end()), dropped.end());
  return dropped;
}

}  // namespace ps::embedding
