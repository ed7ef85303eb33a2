// EmbeddingStore: rows read, written and deleted by slot, for moving slots
// between shards.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/embedding_store_internal.h"

namespace ps::embedding {
namespace {

// Ranges of slots holding at most this many rows are deleted row by row.
constexpr uint64_t kFewRowsToDelete = 64;

// A range of slots, [first, end).
struct SlotRange {
  uint32_t first = 0;
  uint32_t end = 0;
};

// The slots `in` says, as ranges in slot order.
std::vector<SlotRange> SlotRanges(const std::function<bool(uint32_t)>& in) {
  std::vector<SlotRange> ranges;
  for (uint32_t slot = 0; slot < kNumSlots; ++slot) {
    if (!in(slot)) continue;
    if (!ranges.empty() && ranges.back().end == slot) {
      ++ranges.back().end;
    } else {
      ranges.push_back({slot, slot + 1});
    }
  }
  return ranges;
}

}  // namespace

absl::StatusOr<std::vector<SlotRow>> EmbeddingStoreImpl::ReadSlotRows(
    absl::string_view table_name,
    const std::function<bool(uint32_t slot)>& in_move,
    std::optional<uint64_t> after, size_t max_rows, bool* done) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  std::vector<SlotRow> rows;
  *done = true;
  // Rows are stored by slot: each range of slots is one range of keys.
  const uint32_t after_slot = after.has_value() ? SlotForKey(*after) : 0;
  for (const SlotRange& range : SlotRanges(in_move)) {
    if (range.end <= after_slot) continue;  // read by earlier calls
    RETURN_IF_ERROR(rocks_->ScanSlots(
        table->id, range.first, range.end, after,
        [&](uint64_t key, absl::string_view value) -> absl::StatusOr<bool> {
          if (rows.size() == max_rows) {
            *done = false;
            return false;
          }
          SlotRow& row = rows.emplace_back();
          row.key = key;
          row.floats.resize(table->row_floats);
          LogPosition position;
          RETURN_IF_ERROR(RocksStore::DecodeRow(
              value, absl::MakeSpan(row.floats), &position, &row.meta));
          return true;
        }));
    if (!*done) break;
  }
  return rows;
}

absl::StatusOr<std::vector<SlotRow>> EmbeddingStoreImpl::ReadRowsOfKeys(
    absl::string_view table_name, absl::Span<const uint64_t> keys) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  std::vector<uint32_t> order;
  std::vector<uint32_t> starts;
  GroupByStripe(keys, &order, &starts);
  std::vector<SlotRow> rows;
  std::vector<uint64_t> stripe_keys;
  std::vector<CachedRow*> loaded;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    internal::GatherKeys(keys, order, starts[s], starts[s + 1], &stripe_keys);
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    // The hot tier's copy is the newest; a row only on disk comes in.
    RETURN_IF_ERROR(
        LoadRows(*table, stripe, stripe_keys, /*create=*/false, &loaded));
    for (size_t i = 0; i < stripe_keys.size(); ++i) {
      const CachedRow* row = loaded[i];
      if (row == nullptr) continue;
      SlotRow& copy = rows.emplace_back();
      copy.key = stripe_keys[i];
      copy.floats.assign(row->floats(), row->floats() + table->row_floats);
      copy.meta.updated_at_s = row->updated_at_s;
      copy.meta.push_count = row->push_count;
    }
    EvictOrKeep(stripe);
  }
  std::sort(rows.begin(), rows.end(),
            [](const SlotRow& a, const SlotRow& b) { return a.key < b.key; });
  return rows;
}

absl::Status EmbeddingStoreImpl::CheckSlotRows(
    const Table& table, absl::Span<const SlotRow> rows) const {
  for (const SlotRow& row : rows) {
    if (row.floats.size() != static_cast<size_t>(table.row_floats)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a row of ", row.floats.size(), " floats for table ",
                       table.spec.name(), ", whose rows have ",
                       table.row_floats, " (weights and optimizer state)"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::WriteSlotRows(absl::string_view table_name,
                                               absl::Span<const SlotRow> rows) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  RETURN_IF_ERROR(CheckSlotRows(*table, rows));
  std::vector<uint32_t> order;
  std::vector<uint32_t> starts;
  std::vector<uint64_t> keys;
  for (const SlotRow& row : rows) keys.push_back(row.key);
  GroupByStripe(keys, &order, &starts);
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
      const SlotRow& moved = rows[order[i]];
      // A copy the hot tier holds (an earlier move that did not finish) is
      // replaced; either way the row is dirty, so that the write-back below
      // stores it.
      CachedRow* row = stripe.cache.Find(table->id, moved.key);
      if (row == nullptr) {
        row = stripe.cache.Insert(table->id, moved.key, moved.floats,
                                  /*dirty=*/true);
      } else {
        std::copy(moved.floats.begin(), moved.floats.end(), row->floats());
      }
      ++row->version;
      row->dirty = true;
      row->updated_at_s = moved.meta.updated_at_s;
      row->push_count = moved.meta.push_count;
    }
    EvictOrKeep(stripe);
  }
  FeedSlotRows(*table, rows);
  return absl::OkStatus();
}

absl::Status EmbeddingStoreImpl::IngestSlotRows(
    absl::string_view table_name, absl::Span<const SlotRow> rows) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(table_name));
  RETURN_IF_ERROR(CheckSlotRows(*table, rows));
  std::vector<uint32_t> order;
  std::vector<uint32_t> starts;
  std::vector<uint64_t> keys;
  for (const SlotRow& row : rows) keys.push_back(row.key);
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end());
      twice != sorted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", *twice, " twice in one ingestion"));
  }
  GroupByStripe(keys, &order, &starts);
  // A copy the hot tier holds (an earlier move that did not finish) would
  // hide the ingested row: it goes, once no write-back of it is in flight.
  // The stripe then has rows on disk that it never held.
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    AwaitWriteBackLanded(stripe);
    stripe.evicted_rows = true;
    for (uint32_t i = starts[s]; i < starts[s + 1]; ++i) {
      if (CachedRow* row = stripe.cache.Find(table->id, keys[order[i]]))
        stripe.cache.Erase(table->id, row);
    }
  }
  std::vector<StoredRow> stored;
  stored.reserve(rows.size());
  for (const SlotRow& row : rows) {
    // Position {0, 0}: like a row written back from WriteSlotRows(), the
    // next Flush() marks the push log past every record of this shard.
    stored.push_back({row.key, row.floats, LogPosition(), row.meta});
  }
  RETURN_IF_ERROR(rocks_->IngestRows(table->id, std::move(stored)));
  FeedSlotRows(*table, rows);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> EmbeddingStoreImpl::DeleteSlotRows(
    const std::function<bool(uint32_t slot)>& doomed) {
  std::vector<const Table*> tables;
  {
    absl::ReaderMutexLock lock(&tables_mu_);
    for (const auto& table : tables_) {
      if (table != nullptr && !table->dropped) tables.push_back(table.get());
    }
  }
  const std::vector<SlotRange> ranges = SlotRanges(doomed);
  uint64_t deleted = 0;
  for (const Table* table : tables) {
    for (auto& stripe : stripes_) {
      absl::MutexLock lock(&stripe->mu);
      // A write-back in flight must not bring a deleted row back.
      AwaitWriteBackLanded(*stripe);
      std::vector<CachedRow*> erased;
      stripe->cache.ForEachRow(
          [&](uint32_t table_id, CachedRow& row, absl::Span<float>) {
            if (table_id == table->id && doomed(SlotForKey(row.key))) {
              erased.push_back(&row);
            }
          });
      for (CachedRow* row : erased) stripe->cache.Erase(table->id, row);
    }
    // Each range of slots is one range of stored keys: counted, then
    // deleted as a whole, or row by row when it holds few (a range
    // deletion's tombstone costs every later read of the range).
    RocksStore::Batch batch = rocks_->NewBatch();
    std::vector<uint64_t> few;
    for (const SlotRange& range : ranges) {
      few.clear();
      uint64_t in_range = 0;
      RETURN_IF_ERROR(rocks_->ScanSlots(
          table->id, range.first, range.end, std::nullopt,
          [&](uint64_t key, absl::string_view) -> absl::StatusOr<bool> {
            if (++in_range <= kFewRowsToDelete) few.push_back(key);
            return true;
          }));
      deleted += in_range;
      if (in_range <= kFewRowsToDelete) {
        for (uint64_t key : few) batch.Delete(table->id, key);
      } else {
        batch.DeleteSlots(table->id, range.first, range.end);
      }
    }
    if (!batch.empty()) RETURN_IF_ERROR(rocks_->WriteSynced(&batch));
  }
  std::vector<std::pair<uint32_t, uint32_t>> deleted_ranges;
  for (const SlotRange& range : ranges)
    deleted_ranges.emplace_back(range.first, range.end);
  if (!deleted_ranges.empty()) FeedDeletedSlots(deleted_ranges);
  return deleted;
}

}  // namespace ps::embedding
