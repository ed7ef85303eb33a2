// EmbeddingStore's replication: feeding a primary's changes
// (replication_feed.h), cutting a copy for a new replica, and applying the
// feed's entries on the replica.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/embedding_store.h"
#include "embedding/push_record.h"

namespace ps::embedding {

absl::Status EmbeddingStore::SetReplicationFeed(ReplicationFeed* feed) {
  if (options_.durability != Durability::kWal) {
    return absl::FailedPreconditionError(
        "replicas follow a shard's push log: the primary needs "
        "--durability=wal");
  }
  feed_ = feed;
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingStore::ReplicaCut> EmbeddingStore::CheckpointForReplica(
    const std::string& dir) {
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

absl::Status EmbeddingStore::ApplyFeedEntry(const FeedEntry& entry) {
  switch (entry.kind()) {
    case FeedEntry::DECLARE_TABLE:
      return DeclareTable(entry.spec()).status();
    case FeedEntry::DROP_TABLE: {
      absl::Status dropped = DropTable(entry.table());
      return absl::IsNotFound(dropped) ? absl::OkStatus() : dropped;
    }
    case FeedEntry::SET_LEARNING_RATE:
      return SetLearningRate(entry.table(), entry.learning_rate());
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
