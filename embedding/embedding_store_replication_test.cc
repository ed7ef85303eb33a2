// A replica made as ps_server makes one (a copy cut with
// CheckpointForReplica(), then the feed's entries applied) holds what its
// primary holds, bit for bit, and its ledger answers the primary's pushes.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/routing.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/replication_feed.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

class ReplicationTest : public EmbeddingStoreTest {
 protected:
  // Pushes `round`'s gradients of keys 0..keys-1 to `table` as worker 1.
  void PushRound(EmbeddingStore& store, const std::string& table, uint32_t dim,
                 int round, int keys, float scale = 1.0f) {
    std::vector<uint64_t> pushed;
    std::vector<float> gradients;
    for (int k = 0; k < keys; ++k) {
      pushed.push_back(static_cast<uint64_t>(k * 7919 + round % 3));
      for (uint32_t d = 0; d < dim; ++d)
        gradients.push_back(0.01f * ((k + d + round) % 5) - 0.02f);
    }
    PushOrigin origin{/*worker=*/1, /*incarnation=*/1,
                      /*sequence=*/static_cast<uint64_t>(++sequence_)};
    ASSERT_OK(store.Push(table, pushed, gradients, origin, scale).status());
  }

  // Every row of keys 0..keys*7919+2 of `table`, weights and state.
  static std::vector<float> Rows(EmbeddingStore& store,
                                 const std::string& table, int keys) {
    std::vector<float> all;
    for (int k = 0; k < keys; ++k) {
      for (int r = 0; r < 3; ++r) {
        std::vector<float> weights, state;
        bool stored = false;
        EXPECT_OK(store.GetRow(table, k * 7919 + r, &weights, &stored, &state));
        all.push_back(stored ? 1.0f : 0.0f);
        all.insert(all.end(), weights.begin(), weights.end());
        all.insert(all.end(), state.begin(), state.end());
      }
    }
    return all;
  }

  // Where a replica's copy goes.
  std::string CopyDir() const { return options_.data_dir + "-copy"; }

  // A replica's copy of `primary` cut into CopyDir() (emptied first).
  absl::StatusOr<StoreReplication::ReplicaCut> CutCopy(
      EmbeddingStore& primary) {
    std::filesystem::remove_all(CopyDir());
    return primary.replication().CheckpointForReplica(CopyDir());
  }

  int sequence_ = 0;
};

TEST_F(ReplicationTest, ACopyPlusTheFeedHoldsWhatThePrimaryHolds) {
  ReplicationFeed feed;
  std::unique_ptr<EmbeddingStore> primary = OpenStore(options_);
  ASSERT_OK(primary->replication().SetReplicationFeed(&feed));
  TableSpec adagrad = SgdTable("adagrad", 8);
  adagrad.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  adagrad.mutable_optimizer()->set_learning_rate(0.05f);
  ASSERT_OK(primary->tables().DeclareTable(adagrad).status());
  for (int round = 0; round < 5; ++round)
    PushRound(*primary, "adagrad", 8, round, 300);

  const std::string copy = CopyDir();
  absl::StatusOr<StoreReplication::ReplicaCut> cut_or = CutCopy(*primary);
  ASSERT_OK(cut_or.status());
  const StoreReplication::ReplicaCut cut = *cut_or;
  EXPECT_EQ(cut.start_sequence, feed.head());

  // After the cut: more pushes (one scaled), a new learning rate, a new
  // table with admission (the replica must apply what the primary applied,
  // not count again), a dropped table.
  for (int round = 5; round < 9; ++round)
    PushRound(*primary, "adagrad", 8, round, 300, round == 6 ? 0.5f : 1.0f);
  ASSERT_OK(primary->tables().SetLearningRate("adagrad", 0.1f));
  PushRound(*primary, "adagrad", 8, 9, 300);
  TableSpec admitted = SgdTable("admitted", 4);
  admitted.set_admit_after(2);
  ASSERT_OK(primary->tables().DeclareTable(admitted).status());
  for (int round = 0; round < 4; ++round)
    PushRound(*primary, "admitted", 4, round, 50);
  ASSERT_OK(primary->tables().DeclareTable(SgdTable("doomed", 2)).status());
  PushRound(*primary, "doomed", 2, 0, 10);
  ASSERT_OK(primary->tables().DropTable("doomed"));

  std::vector<FeedEntry> entries;
  ASSERT_OK(feed.Read(cut.follower, cut.start_sequence, 1000,
                      absl::ZeroDuration(), &entries));
  ASSERT_EQ(entries.size(), feed.head() - cut.start_sequence);

  StoreOptions replica_options = options_;
  replica_options.data_dir = copy;
  std::unique_ptr<EmbeddingStore> replica = OpenStore(replica_options);
  ASSERT_OK(replica->ledger().MergeLedger(cut.ledger));
  for (const FeedEntry& entry : entries) {
    ASSERT_OK(replica->replication().ApplyFeedEntry(entry))
        << entry.ShortDebugString();
  }
  EXPECT_EQ(Rows(*replica, "adagrad", 300), Rows(*primary, "adagrad", 300));
  EXPECT_EQ(Rows(*replica, "admitted", 50), Rows(*primary, "admitted", 50));
  EXPECT_FALSE(replica->tables().GetTableSpec("doomed").ok());
  absl::StatusOr<TableOptimizer> optimizer =
      replica->tables().GetTableOptimizer("adagrad");
  ASSERT_OK(optimizer.status());
  EXPECT_FLOAT_EQ(optimizer->learning_rate_multiplier, 2.0f);

  // An entry read twice (a follower that retried) changes nothing: the
  // ledger knows its origin. So does a push from before the cut, from the
  // copied ledger.
  ASSERT_OK(replica->replication().ApplyFeedEntry(entries.front()));
  EXPECT_EQ(Rows(*replica, "adagrad", 300), Rows(*primary, "adagrad", 300));
  absl::StatusOr<std::optional<uint32_t>> first =
      replica->ledger().AppliedPush(PushOrigin{1, 1, 1});
  ASSERT_OK(first.status());
  EXPECT_TRUE(first->has_value());

  // And the replica's own push log keeps what it applied across a restart.
  replica.reset();
  replica = OpenStore(replica_options);
  EXPECT_EQ(Rows(*replica, "adagrad", 300), Rows(*primary, "adagrad", 300));
}

// Rows a slot move writes into the primary (through the hot tier and as an
// ingested file) and the slots it deletes reach the replica through the
// feed, durable there before the entry counts as applied.
TEST_F(ReplicationTest, SlotRowsWrittenAndDeletedAreFed) {
  ReplicationFeed feed;
  std::unique_ptr<EmbeddingStore> primary = OpenStore(options_);
  ASSERT_OK(primary->replication().SetReplicationFeed(&feed));
  ASSERT_OK(primary->tables().DeclareTable(SgdTable("t", 4)).status());
  const std::string copy = CopyDir();
  absl::StatusOr<StoreReplication::ReplicaCut> cut = CutCopy(*primary);
  ASSERT_OK(cut.status());

  std::vector<SlotRow> written, ingested;
  for (uint64_t key = 1; key <= 200; ++key) {
    SlotRow row;
    row.key = key * 2654435761ULL;
    row.floats = {0.5f * key, 1.0f, -2.0f, 3.0f};
    row.meta.updated_at_s = 1000 + key;
    row.meta.push_count = key;
    (key <= 100 ? written : ingested).push_back(row);
  }
  ASSERT_OK(primary->slots().WriteSlotRows("t", written));
  ASSERT_OK(primary->slots().IngestSlotRows("t", ingested));
  const uint32_t doomed = SlotForKey(written.front().key);
  ASSERT_OK(
      primary->slots()
          .DeleteSlotRows([doomed](uint32_t slot) { return slot == doomed; })
          .status());

  std::vector<FeedEntry> entries;
  ASSERT_OK(feed.Read(cut->follower, cut->start_sequence, 1000,
                      absl::ZeroDuration(), &entries));
  ASSERT_EQ(entries.size(), 3u);
  StoreOptions replica_options = options_;
  replica_options.data_dir = copy;
  std::unique_ptr<EmbeddingStore> replica = OpenStore(replica_options);
  for (const FeedEntry& entry : entries) {
    ASSERT_OK(replica->replication().ApplyFeedEntry(entry))
        << entry.ShortDebugString();
  }
  // Durable: the same after a restart.
  replica.reset();
  replica = OpenStore(replica_options);
  int stored_rows = 0;
  for (const std::vector<SlotRow>* rows : {&written, &ingested}) {
    for (const SlotRow& row : *rows) {
      std::vector<float> weights, state;
      bool stored = false;
      ASSERT_OK(replica->GetRow("t", row.key, &weights, &stored, &state));
      if (SlotForKey(row.key) == doomed) {
        EXPECT_FALSE(stored) << row.key;
        continue;
      }
      ASSERT_TRUE(stored) << row.key;
      ++stored_rows;
      EXPECT_EQ(weights, row.floats) << row.key;
    }
  }
  EXPECT_EQ(stored_rows, 199);

  // An entry whose bytes do not add up is refused, nothing applied.
  FeedEntry torn = entries.front();
  torn.mutable_slot_floats()->resize(torn.slot_floats().size() - 1);
  EXPECT_EQ(replica->replication().ApplyFeedEntry(torn).code(),
            absl::StatusCode::kDataLoss);
  FeedEntry odd;
  odd.set_kind(FeedEntry::DELETE_SLOTS);
  odd.add_deleted_slots(5);
  EXPECT_EQ(replica->replication().ApplyFeedEntry(odd).code(),
            absl::StatusCode::kDataLoss);
  odd.add_deleted_slots(kNumSlots + 1);
  EXPECT_EQ(replica->replication().ApplyFeedEntry(odd).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ReplicationTest, AMovedLedgerIsKeptDurablyAndFed) {
  ReplicationFeed feed;
  std::unique_ptr<EmbeddingStore> primary = OpenStore(options_);
  ASSERT_OK(primary->replication().SetReplicationFeed(&feed));
  absl::StatusOr<StoreReplication::ReplicaCut> cut = CutCopy(*primary);
  ASSERT_OK(cut.status());
  // Shard 3's ledger: worker 5 applied sequences 1 and 2; a later move
  // brings sequence 3.
  PushLedger source;
  for (uint64_t sequence : {1, 2, 3}) {
    const PushOrigin origin{5, 9, sequence};
    ASSERT_OK(source.Begin(origin).status());
    source.Finish(origin, /*applied=*/true, 10 * sequence);
    if (sequence == 2) {
      ASSERT_OK(primary->ledger().MergeMovedLedger(3, source.Serialize()));
    }
  }
  ASSERT_OK(primary->ledger().MergeMovedLedger(3, source.Serialize()));
  auto applied = [](EmbeddingStore& store, uint32_t shard, uint64_t sequence) {
    absl::StatusOr<std::optional<uint32_t>> rows =
        store.ledger().MovedPushApplied(shard, PushOrigin{5, 9, sequence});
    EXPECT_OK(rows.status());
    return rows.ok() ? rows->value_or(0) : 0;
  };
  EXPECT_EQ(applied(*primary, 3, 2), 20u);
  EXPECT_EQ(applied(*primary, 3, 3), 30u);
  EXPECT_EQ(applied(*primary, 3, 4), 0u);
  EXPECT_EQ(applied(*primary, 2, 2), 0u);  // another source shard
  // Durable.
  primary.reset();
  primary = OpenStore(options_);
  EXPECT_EQ(applied(*primary, 3, 3), 30u);
  // Handed on by a move from this store, by source shard.
  const auto handed = primary->ledger().SerializeMovedLedgers();
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0].first, 3u);
  EXPECT_EQ(handed[0].second, source.Serialize());
  // Fed: a replica applying the entries knows it too.
  std::vector<FeedEntry> entries;
  ASSERT_OK(feed.Read(cut->follower, cut->start_sequence, 1000,
                      absl::ZeroDuration(), &entries));
  ASSERT_EQ(entries.size(), 2u);
  StoreOptions replica_options = options_;
  replica_options.data_dir = CopyDir();
  std::unique_ptr<EmbeddingStore> replica = OpenStore(replica_options);
  for (const FeedEntry& entry : entries) {
    ASSERT_OK(replica->replication().ApplyFeedEntry(entry));
  }
  EXPECT_EQ(applied(*replica, 3, 1), 10u);
  EXPECT_EQ(applied(*replica, 3, 3), 30u);
  FeedEntry damaged = entries.back();
  damaged.set_record("not a ledger");
  EXPECT_EQ(replica->replication().ApplyFeedEntry(damaged).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ReplicationTest, ARetryThePrimaryLetThroughLateIsAppliedOnTheReplica) {
  ReplicationFeed feed;
  std::unique_ptr<EmbeddingStore> primary = OpenStore(options_);
  ASSERT_OK(primary->replication().SetReplicationFeed(&feed));
  ASSERT_OK(primary->tables().DeclareTable(SgdTable("t", 4)).status());
  const std::string copy = CopyDir();
  absl::StatusOr<StoreReplication::ReplicaCut> cut = CutCopy(*primary);
  ASSERT_OK(cut.status());
  // Push 1 is refused as busy, 2..400 are applied, then 1's retry: the
  // primary's ledger remembers the refusal and applies it.
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> gradients(keys.size() * 4, 0.5f);
  primary->ledger().NoteRefusedPush(PushOrigin{1, 1, 1});
  for (uint64_t sequence = 2; sequence <= 400; ++sequence) {
    ASSERT_OK(primary->Push("t", keys, gradients, PushOrigin{1, 1, sequence})
                  .status());
  }
  absl::StatusOr<PushOutcome> late =
      primary->Push("t", keys, gradients, PushOrigin{1, 1, 1});
  ASSERT_OK(late.status());
  ASSERT_FALSE(late->duplicate);

  std::vector<FeedEntry> entries;
  ASSERT_OK(feed.Read(cut->follower, cut->start_sequence, 1000,
                      absl::ZeroDuration(), &entries));
  StoreOptions replica_options = options_;
  replica_options.data_dir = copy;
  std::unique_ptr<EmbeddingStore> replica = OpenStore(replica_options);
  ASSERT_OK(replica->ledger().MergeLedger(cut->ledger));
  for (const FeedEntry& entry : entries) {
    ASSERT_OK(replica->replication().ApplyFeedEntry(entry)) << entry.sequence();
  }
  EXPECT_EQ(PullRows(*replica, "t", keys, 4), PullRows(*primary, "t", keys, 4));
}

TEST_F(ReplicationTest, APrimaryWithoutAPushLogFeedsNobody) {
  options_.durability = Durability::kPeriodic;
  ReplicationFeed feed;
  std::unique_ptr<EmbeddingStore> store = OpenStore(options_);
  EXPECT_EQ(store->replication().SetReplicationFeed(&feed).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->replication()
                .CheckpointForReplica(options_.data_dir + "-copy")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::embedding
