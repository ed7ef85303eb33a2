// EmbeddingStore's replication: feeding a primary's changes
// (replication_feed.h), cutting a copy for a new replica, and applying the
// feed's entries on the replica.

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store_impl.h"
#include "embedding/push_record.h"

namespace ps::embedding {

absl::Status EmbeddingStoreImpl::SetReplicationFeed(ReplicationFeed* feed) {
  if (options_.durability != Durability::kWal) {
    return absl::FailedPreconditionError(
        "replicas follow a shard's push log: the primary needs "
        "--durability=wal");
  }
  feed_ = feed;
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingStoreImpl::ReplicaCut>
EmbeddingStoreImpl::CheckpointForReplica(const std::string& dir) {
  ReplicationFeed* feed = feed_.load();
  if (feed == nullptr) {
    return absl::FailedPreconditionError(
        "this shard keeps no replication feed");
  }
  // As Checkpoint(): no push applies meanwhile, so each is in the copy or
  // after the cut in the feed. A table change may land on both sides of the
  // cut; applying it twice changes nothing.
  absl::WriterMutexLock gate(&push_gate_);
  RETURN_IF_ERROR(Flush());
  ReplicaCut cut;
  cut.follower = feed->AddFollower(&cut.start_sequence);
  cut.ledger = ledger_.Serialize();
  if (absl::Status copied = rocks_->CreateCheckpoint(dir); !copied.ok()) {
    feed->RemoveFollower(cut.follower);
    return copied;
  }
  return cut;
}

void EmbeddingStoreImpl::FeedSlotRows(const Table& table,
                                      absl::Span<const SlotRow> rows) {
  ReplicationFeed* feed = feed_.load();
  if (feed == nullptr || rows.empty()) return;
  FeedEntry entry;
  entry.set_kind(FeedEntry::SLOT_ROWS);
  entry.set_table(table.spec.name());
  std::string* keys = entry.mutable_slot_keys();
  std::string* floats = entry.mutable_slot_floats();
  std::string* metas = entry.mutable_slot_metas();
  keys->reserve(rows.size() * sizeof(uint64_t));
  floats->reserve(rows.size() * table.row_floats * sizeof(float));
  metas->reserve(rows.size() * 2 * sizeof(uint32_t));
  for (const SlotRow& row : rows) {
    keys->append(reinterpret_cast<const char*>(&row.key), sizeof(row.key));
    floats->append(reinterpret_cast<const char*>(row.floats.data()),
                   row.floats.size() * sizeof(float));
    const uint32_t meta[2] = {row.meta.updated_at_s, row.meta.push_count};
    metas->append(reinterpret_cast<const char*>(meta), sizeof(meta));
  }
  feed->Append(std::move(entry));
}

absl::Status EmbeddingStoreImpl::MergeMovedLedger(uint32_t source_shard,
                                                  absl::string_view ledger) {
  absl::MutexLock lock(&moved_ledgers_mu_);
  std::unique_ptr<PushLedger>& merged = moved_ledgers_[source_shard];
  if (merged == nullptr) merged = std::make_unique<PushLedger>();
  RETURN_IF_ERROR(merged->Merge(ledger));
  const std::string serialized = merged->Serialize();
  RETURN_IF_ERROR(rocks_->SetMovedLedger(source_shard, serialized));
  if (ReplicationFeed* feed = feed_.load(); feed != nullptr) {
    FeedEntry entry;
    entry.set_kind(FeedEntry::MOVED_LEDGER);
    entry.set_moved_from_shard(source_shard);
    entry.set_record(serialized);
    feed->Append(std::move(entry));
  }
  return absl::OkStatus();
}

std::vector<std::pair<uint32_t, std::string>>
EmbeddingStoreImpl::SerializeMovedLedgers() {
  absl::MutexLock lock(&moved_ledgers_mu_);
  std::vector<std::pair<uint32_t, std::string>> ledgers;
  for (const auto& [source, ledger] : moved_ledgers_)
    ledgers.emplace_back(source, ledger->Serialize());
  return ledgers;
}

absl::StatusOr<std::optional<uint32_t>> EmbeddingStoreImpl::MovedPushApplied(
    uint32_t source_shard, const PushOrigin& origin) {
  PushLedger* ledger = nullptr;
  {
    absl::MutexLock lock(&moved_ledgers_mu_);
    auto found = moved_ledgers_.find(source_shard);
    if (found == moved_ledgers_.end()) return std::optional<uint32_t>();
    ledger = found->second.get();  // never removed: outlives the lock
  }
  return ledger->Applied(origin);
}

void EmbeddingStoreImpl::FeedDeletedSlots(
    absl::Span<const std::pair<uint32_t, uint32_t>> ranges) {
  ReplicationFeed* feed = feed_.load();
  if (feed == nullptr) return;
  FeedEntry entry;
  entry.set_kind(FeedEntry::DELETE_SLOTS);
  for (const auto& [first, end] : ranges) {
    entry.add_deleted_slots(first);
    entry.add_deleted_slots(end);
  }
  feed->Append(std::move(entry));
}

absl::Status EmbeddingStoreImpl::ApplySlotRows(const FeedEntry& entry) {
  ASSIGN_OR_RETURN(const Table* table, FindTable(entry.table()));
  const size_t count = entry.slot_keys().size() / sizeof(uint64_t);
  const size_t row_bytes =
      static_cast<size_t>(table->row_floats) * sizeof(float);
  if (entry.slot_keys().size() % sizeof(uint64_t) != 0 ||
      entry.slot_floats().size() != count * row_bytes ||
      entry.slot_metas().size() != count * 2 * sizeof(uint32_t)) {
    return absl::DataLossError(absl::StrCat(
        "feed entry ", entry.sequence(), ": slot rows of table ", entry.table(),
        " with ", entry.slot_keys().size(), " bytes of keys, ",
        entry.slot_floats().size(), " of floats and ",
        entry.slot_metas().size(), " of metadata do not go together"));
  }
  std::vector<SlotRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&rows[i].key, entry.slot_keys().data() + i * sizeof(uint64_t),
                sizeof(uint64_t));
    rows[i].floats.resize(table->row_floats);
    std::memcpy(rows[i].floats.data(),
                entry.slot_floats().data() + i * row_bytes, row_bytes);
    uint32_t meta[2];
    std::memcpy(meta, entry.slot_metas().data() + i * sizeof(meta),
                sizeof(meta));
    rows[i].meta.updated_at_s = meta[0];
    rows[i].meta.push_count = meta[1];
  }
  // Durable before the entry counts as applied, as a push is in the push
  // log: the primary's move may complete once its replicas have applied it.
  RETURN_IF_ERROR(WriteSlotRows(entry.table(), rows));
  return Flush();
}

absl::Status EmbeddingStoreImpl::ApplyDeletedSlots(const FeedEntry& entry) {
  const auto& bounds = entry.deleted_slots();
  if (bounds.size() % 2 != 0) {
    return absl::DataLossError(absl::StrCat("feed entry ", entry.sequence(),
                                            ": an odd count of slot bounds"));
  }
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (int i = 0; i < bounds.size(); i += 2) {
    if (bounds[i] >= bounds[i + 1] || bounds[i + 1] > kNumSlots ||
        (!ranges.empty() && bounds[i] < ranges.back().second)) {
      return absl::DataLossError(absl::StrCat(
          "feed entry ", entry.sequence(), ": slots ", bounds[i], "-",
          bounds[i + 1], " are not a range after the one before"));
    }
    ranges.emplace_back(bounds[i], bounds[i + 1]);
  }
  return DeleteSlotRows([&ranges](uint32_t slot) {
           for (const auto& [first, end] : ranges)
             if (slot >= first && slot < end) return true;
           return false;
         })
      .status();
}

absl::Status EmbeddingStoreImpl::ApplyFeedEntry(const FeedEntry& entry) {
  switch (entry.kind()) {
    case FeedEntry::DECLARE_TABLE:
      return DeclareTable(entry.spec()).status();
    case FeedEntry::DROP_TABLE: {
      absl::Status dropped = DropTable(entry.table());
      return absl::IsNotFound(dropped) ? absl::OkStatus() : dropped;
    }
    case FeedEntry::SET_LEARNING_RATE:
      return SetLearningRate(entry.table(), entry.learning_rate());
    case FeedEntry::SLOT_ROWS:
      return ApplySlotRows(entry);
    case FeedEntry::DELETE_SLOTS:
      return ApplyDeletedSlots(entry);
    case FeedEntry::MOVED_LEDGER:
      return MergeMovedLedger(entry.moved_from_shard(), entry.record());
    case FeedEntry::PUSH:
      break;
    default:
      return absl::DataLossError(absl::StrCat("feed entry ", entry.sequence(),
                                              " is of unknown kind ",
                                              static_cast<int>(entry.kind())));
  }
  ASSIGN_OR_RETURN(const Table* table, FindTable(entry.table()));
  ASSIGN_OR_RETURN(const PushRecordHeader header,
                   DecodePushRecordHeader(entry.record()));
  if (header.kind != PushRecordHeader::Kind::kPush) {
    return absl::DataLossError(absl::StrCat("feed entry ", entry.sequence(),
                                            " is not a push's record"));
  }
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  PushSection section;
  absl::string_view rest =
      absl::string_view(entry.record()).substr(header.sections_offset);
  while (!rest.empty()) {
    ASSIGN_OR_RETURN(const PushSectionHeader section_header,
                     DecodePushSectionHeader(rest));
    ASSIGN_OR_RETURN(const uint64_t bytes,
                     MeasurePushSection(rest, section_header, table->dim));
    RETURN_IF_ERROR(
        DecodePushSection(rest.substr(0, bytes), table->dim, &section));
    keys.insert(keys.end(), section.keys.begin(), section.keys.end());
    gradients.insert(gradients.end(), section.gradients.begin(),
                     section.gradients.end());
    rest.remove_prefix(bytes);
  }
  // The primary applied it, so it is applied here too, unless the ledger
  // knows it applied already (ledger_.Begin() could refuse it: the
  // primary's ledger also held refusals it let through later).
  const PushOrigin& origin = header.origin;
  if (origin.tracked()) {
    const absl::StatusOr<std::optional<uint32_t>> applied =
        ledger_.Applied(origin);
    if (applied.ok() && applied->has_value()) return absl::OkStatus();
  }
  absl::StatusOr<size_t> updated;
  {
    absl::ReaderMutexLock gate(&push_gate_);
    updated =
        ApplyPush(*table, keys, gradients, origin, header.learning_rate_scale);
  }
  RETURN_IF_ERROR(updated.status());
  if (origin.tracked()) ledger_.MergeApplied(origin, header.rows_updated);
  rows_pushed_ += *updated;
  return absl::OkStatus();
}

}  // namespace ps::embedding
