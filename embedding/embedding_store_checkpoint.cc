// EmbeddingStore's copies of itself: checkpoints (RocksDB's, of every table
// with optimizer state) and exports (each table's weights to a sink),
// each taken at the push gate so that it holds every push whole or not at
// all.

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"

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
  for (size_t t = 0; t < targets.size(); ++t) {
    // A row a compaction drops after this read (which the scan below may
    // then miss) is recorded at a time at or after now_s: the next delta
    // deletes it.
    ASSIGN_OR_RETURN(const std::vector<uint64_t> dropped,
                     DroppedForDelta(*tables[t], options));
    RETURN_IF_ERROR(ExportTable(*tables[t], *snapshot, options, now_s, dropped,
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

absl::Status EmbeddingStoreImpl::ExportTable(
    const Table& table, const RocksStore::Snapshot& snapshot,
    const ExportOptions& options, uint32_t now_s,
    const std::vector<uint64_t>& dropped, ExportSink& sink) {
  std::vector<float> row(table.row_floats);
  const auto owned = [&](uint64_t key) {
    // A row of another slot is another shard's.
    return !options.slots.has_value() || (*options.slots)[SlotForKey(key)];
  };
  const std::optional<uint32_t> since_s = options.changed_since_s;
  // The next dropped key to write, merged into the scan's order.
  size_t next_dropped = 0;
  auto put_dropped_before = [&](std::optional<uint64_t> key) -> absl::Status {
    while (next_dropped < dropped.size()) {
      const uint64_t candidate = dropped[next_dropped];
      if (key.has_value()) {
        const auto here = std::make_pair(SlotForKey(*key), *key);
        const auto there = std::make_pair(SlotForKey(candidate), candidate);
        if (there > here) break;
        ++next_dropped;
        if (there == here) continue;  // stored: the scan decides
      } else {
        ++next_dropped;
      }
      if (owned(candidate)) RETURN_IF_ERROR(sink.Delete(candidate));
    }
    return absl::OkStatus();
  };
  auto write = [&](uint64_t key, absl::string_view stored) -> absl::Status {
    RETURN_IF_ERROR(put_dropped_before(key));
    LogPosition position;
    RowMeta meta;
    RETURN_IF_ERROR(
        RocksStore::DecodeRow(stored, absl::MakeSpan(row), &position, &meta));
    // Expired, not yet compacted away: not part of the model. A delta
    // deletes it if it was part of the export before.
    if (table.expiry.Expired(meta, now_s)) {
      if (since_s.has_value() && !table.expiry.Expired(meta, *since_s) &&
          owned(key)) {
        return sink.Delete(key);
      }
      return absl::OkStatus();
    }
    if (since_s.has_value() && meta.updated_at_s < *since_s)
      return absl::OkStatus();
    if (!owned(key)) return absl::OkStatus();
    return sink.Put(key, absl::MakeConstSpan(row.data(), table.dim));
  };
  RETURN_IF_ERROR(rocks_->Scan(table.id, snapshot, write));
  return put_dropped_before(std::nullopt);
}

}  // namespace ps::embedding
