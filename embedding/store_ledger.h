// File: embedding/store_ledger.h
//
// StoreLedger is the part of a shard's store that applies each tracked push
// once (push_ledger.h), however often it arrives, across retries, restarts,
// slot moves and replicas: the answers to pushes applied here, to pushes a
// move brought from another shard, and the ledgers a move or a new replica
// carries. EmbeddingStore::ledger() gives it; the store implements it, and
// Push() records into the same ledger. Thread-safe.

#ifndef PS_EMBEDDING_STORE_LEDGER_H_
#define PS_EMBEDDING_STORE_LEDGER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "embedding/push_ledger.h"

namespace ps::embedding {

class StoreLedger {
 public:
  virtual ~StoreLedger() = default;

  // The first answer to a tracked push if this shard applied it
  // (PushLedger::Applied).
  virtual absl::StatusOr<std::optional<uint32_t>> AppliedPush(
      const PushOrigin& origin) = 0;

  // A tracked push refused before it reached Push() (the shard was busy):
  // its retry is applied however many later pushes come first
  // (PushLedger::NoteRefused).
  virtual void NoteRefusedPush(const PushOrigin& origin) = 0;

  // The first answer to `origin` if `source_shard` had applied it by a move
  // here (0 when it left the window); nothing if no move from that shard
  // brought it. Errors as PushLedger::Applied().
  virtual absl::StatusOr<std::optional<uint32_t>> MovedPushApplied(
      uint32_t source_shard, const PushOrigin& origin) = 0;

  // This store's push ledger (PushLedger::Serialize()): a move's source
  // hands it to the target once the slots' pushes paused, with the ledgers
  // earlier moves brought here (by source shard).
  virtual std::string SerializeLedger() const = 0;
  virtual std::vector<std::pair<uint32_t, std::string>>
  SerializeMovedLedgers() = 0;

  // A move's target: the push ledger of `source_shard` as it stood once the
  // moved slots' pushes paused there, merged into what earlier moves from
  // that shard brought, recorded durably and fed to replicas. A push the
  // source applied but whose answer was lost comes back re-routed with the
  // source's origin (PushRequest.moved_from_*), and MovedPushApplied()
  // finds it here even when the source, or a replica promoted in its
  // place, no longer knows it. DATA_LOSS for bytes that do not parse.
  virtual absl::Status MergeMovedLedger(uint32_t source_shard,
                                        absl::string_view ledger) = 0;

  // On a replica opened from its primary's copy: merges the copy's ledger
  // (StoreReplication::ReplicaCut::ledger), which its RocksDB does not hold.
  virtual absl::Status MergeLedger(absl::string_view ledger) = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STORE_LEDGER_H_
