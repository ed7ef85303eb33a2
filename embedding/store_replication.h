// File: embedding/store_replication.h
//
// StoreReplication is the part of a shard's store that replication uses
// (server/replication_service.cc): a primary's feed of every change and a
// new replica's first copy (whose ledger StoreLedger::MergeLedger() takes);
// a replica's application of the feed's entries. EmbeddingStore::replication()
// gives it; the store implements it. Thread-safe.

#ifndef PS_EMBEDDING_STORE_REPLICATION_H_
#define PS_EMBEDDING_STORE_REPLICATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "embedding/replication_feed.h"

namespace ps::embedding {

class StoreReplication {
 public:
  virtual ~StoreReplication() = default;

  // Replication (embedding_store_replication.cc). On a primary: every
  // change applied from now on (each push's record, each table declared,
  // dropped or given a learning rate) is appended to `feed`, not owned,
  // which must outlive the store. Call before serving. FAILED_PRECONDITION
  // unless durability is kWal (a push's record is what the feed carries).
  virtual absl::Status SetReplicationFeed(ReplicationFeed* feed) = 0;

  // Where a new replica starts: the follower it is registered as in the
  // feed, the last entry its copy holds, and the exactly-once ledger then
  // (PushLedger::Serialize()), which the copy's RocksDB does not hold.
  struct ReplicaCut {
    uint64_t follower = 0;
    uint64_t start_sequence = 0;
    std::string ledger;
  };

  // Checkpoint() into `dir` for a new replica, registering it as a follower
  // of the feed at the same cut: every push acknowledged before is in the
  // copy, every one after in the feed. FAILED_PRECONDITION without a feed.
  virtual absl::StatusOr<ReplicaCut> CheckpointForReplica(
      const std::string& dir) = 0;

  // On a replica: applies one entry of its primary's feed as the primary
  // applied it: a push with its record's learning-rate scale, past
  // admission and this store's learning-rate multiplier, recorded in the
  // ledger under its origin (an entry applied twice is skipped), and under
  // kWal in this store's push log before returning. A table declared
  // again, or dropped when it is not here, changes nothing (the copy may
  // hold an entry the feed also carries). DATA_LOSS for a record that
  // does not decode; NOT_FOUND for a push to an unknown table.
  virtual absl::Status ApplyFeedEntry(const FeedEntry& entry) = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STORE_REPLICATION_H_
