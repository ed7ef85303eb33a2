#include "embedding/snapshot_export.h"

#include <utility>
#include <vector>

#include "base/routing.h"
#include "base/status_macros.h"

namespace ps::embedding {
namespace {

// A key's place in the store's order.
std::pair<uint32_t, uint64_t> StoreOrder(uint64_t key) {
  return {SlotForKey(key), key};
}

}  // namespace

SnapshotExport::SnapshotExport(RocksStore& rocks,
                               const RocksStore::Snapshot& snapshot,
                               uint32_t now_s,
                               const StoreSnapshots::ExportOptions& options)
    : rocks_(rocks), snapshot_(snapshot), now_s_(now_s), options_(options) {}

bool SnapshotExport::Owned(uint64_t key) const {
  return !options_.slots.has_value() || (*options_.slots)[SlotForKey(key)];
}

absl::Status SnapshotExport::WriteTable(const Table& table,
                                        absl::Span<const uint64_t> dropped,
                                        StoreSnapshots::ExportSink& sink) {
  std::vector<float> row(table.row_floats);
  const std::optional<uint32_t> since_s = options_.changed_since_s;
  // The next dropped key to write, merged into the scan's order.
  size_t next_dropped = 0;
  auto delete_dropped_before =
      [&](std::optional<uint64_t> key) -> absl::Status {
    while (next_dropped < dropped.size()) {
      const uint64_t candidate = dropped[next_dropped];
      if (key.has_value()) {
        if (StoreOrder(candidate) > StoreOrder(*key)) break;
        ++next_dropped;
        if (candidate == *key) continue;  // stored: the scan decides
      } else {
        ++next_dropped;
      }
      if (Owned(candidate)) RETURN_IF_ERROR(sink.Delete(candidate));
    }
    return absl::OkStatus();
  };
  auto write = [&](uint64_t key, absl::string_view stored) -> absl::Status {
    RETURN_IF_ERROR(delete_dropped_before(key));
    LogPosition position;
    RowMeta meta;
    RETURN_IF_ERROR(
        RocksStore::DecodeRow(stored, absl::MakeSpan(row), &position, &meta));
    // Expired, not yet compacted away: not part of the model. A delta
    // deletes it if it was part of the export before.
    if (table.expiry.Expired(meta, now_s_)) {
      if (since_s.has_value() && !table.expiry.Expired(meta, *since_s) &&
          Owned(key)) {
        return sink.Delete(key);
      }
      return absl::OkStatus();
    }
    if (since_s.has_value() && meta.updated_at_s < *since_s)
      return absl::OkStatus();
    if (!Owned(key)) return absl::OkStatus();
    return sink.Put(key, absl::MakeConstSpan(row.data(), table.dim));
  };
  RETURN_IF_ERROR(rocks_.Scan(table.id, snapshot_, write));
  return delete_dropped_before(std::nullopt);
}

}  // namespace ps::embedding
