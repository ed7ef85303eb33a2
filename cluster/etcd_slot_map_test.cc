// EtcdSlotMap on an InMemoryStore: the job's map created from the first
// shard's, a change proposed on one shard adopted by another through the
// watch, a shard beyond the count joining, and a data dir whose map is
// newer than the job's refused. (tests/etcd/etcd_cluster_test runs the same
// over real etcd and real processes.)

#include "cluster/etcd_slot_map.h"

#include <memory>
#include <string>

#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/wait_until.h"
#include "cluster/in_memory_store.h"
#include "cluster/shard_directory.h"
#include "cluster/slot_ownership.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

using absl::StatusCode;

constexpr char kJob[] = "j";

std::unique_ptr<SlotOwnership> Ownership(const std::string& name,
                                         uint32_t num_shards) {
  absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
      SlotOwnership::Open(FreshTestDir(name), num_shards);
  EXPECT_OK(slots);
  return slots.ok() ? *std::move(slots) : nullptr;
}

// Waits up to 10 s for `slots` to be at `epoch`.
bool ReachesEpoch(const SlotOwnership& slots, uint64_t epoch) {
  return WaitUntil([&] { return slots.current()->epoch() == epoch; },
                   absl::Seconds(10));
}

TEST(EtcdSlotMapTest, AChangeOnOneShardIsAdoptedByTheOthers) {
  InMemoryStore store;
  std::unique_ptr<SlotOwnership> first = Ownership("slot_map_first", 2);
  std::unique_ptr<SlotOwnership> second = Ownership("slot_map_second", 2);
  absl::StatusOr<std::unique_ptr<EtcdSlotMap>> first_map = EtcdSlotMap::Start(
      &store, kJob, first.get(), EtcdSlotMap::OwnMap::kEmptyDataDir);
  ASSERT_OK(first_map);
  absl::StatusOr<uint32_t> count = MapShardCount(store, kJob);
  ASSERT_OK(count);
  EXPECT_EQ(*count, 2u);
  // No resync within the test: the change reaches it through the watch.
  absl::StatusOr<std::unique_ptr<EtcdSlotMap>> second_map =
      EtcdSlotMap::Start(&store, kJob, second.get(),
                         EtcdSlotMap::OwnMap::kEmptyDataDir, absl::Hours(1));
  ASSERT_OK(second_map);
  const SlotMap start = *first->current();
  const SlotMap next = start.WithSlotsMoved(0, 99, 1);
  ASSERT_OK((*first_map)->Propose(start.epoch(), next));
  EXPECT_EQ(first->current()->epoch(), next.epoch());
  ASSERT_TRUE(ReachesEpoch(*second, next.epoch()));
  EXPECT_EQ(second->current()->ShardForSlot(0), 1u);
  // A proposal from an epoch that moved on is refused, and changes nothing.
  EXPECT_THAT(
      (*second_map)->Propose(start.epoch(), start.WithSlotsMoved(0, 0, 0)),
      StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_EQ(first->current()->epoch(), next.epoch());
}

TEST(EtcdSlotMapTest, AShardBeyondTheCountJoinsOnce) {
  InMemoryStore store;
  std::unique_ptr<SlotOwnership> first = Ownership("slot_map_join_0", 1);
  absl::StatusOr<std::unique_ptr<EtcdSlotMap>> first_map = EtcdSlotMap::Start(
      &store, kJob, first.get(), EtcdSlotMap::OwnMap::kEmptyDataDir);
  ASSERT_OK(first_map);
  std::unique_ptr<SlotOwnership> joining = Ownership("slot_map_join_1", 2);
  absl::StatusOr<std::unique_ptr<EtcdSlotMap>> joining_map = EtcdSlotMap::Start(
      &store, kJob, joining.get(), EtcdSlotMap::OwnMap::kEmptyDataDir);
  ASSERT_OK(joining_map);
  ASSERT_OK((*joining_map)->Join(1, absl::Seconds(1)));
  absl::StatusOr<uint32_t> count = MapShardCount(store, kJob);
  ASSERT_OK(count);
  EXPECT_EQ(*count, 2u);
  // The joined shard owns nothing until a rebalance gives it slots.
  EXPECT_EQ(joining->current()->SlotsOwned(0, kNumSlots - 1, 1), 0u);
  ASSERT_OK((*joining_map)->Join(1, absl::Seconds(1)));
  count = MapShardCount(store, kJob);
  ASSERT_OK(count);
  EXPECT_EQ(*count, 2u);
  // Shard 3 waits for shard 2, which never comes.
  EXPECT_THAT((*joining_map)->Join(3, absl::Milliseconds(200)),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST(EtcdSlotMapTest, ADataDirWhoseMapIsNewerThanTheJobsIsRefused) {
  InMemoryStore store;
  std::unique_ptr<SlotOwnership> first = Ownership("slot_map_old", 2);
  absl::StatusOr<std::unique_ptr<EtcdSlotMap>> first_map = EtcdSlotMap::Start(
      &store, kJob, first.get(), EtcdSlotMap::OwnMap::kEmptyDataDir);
  ASSERT_OK(first_map);
  const std::string dir = FreshTestDir("slot_map_newer");
  const SlotMap initial = SlotMap::Initial(2);
  ASSERT_OK(SlotOwnership::Create(dir, initial.WithSlotsMoved(0, 9, 1)));
  absl::StatusOr<std::unique_ptr<SlotOwnership>> newer =
      SlotOwnership::Open(dir, 2);
  ASSERT_OK(newer);
  EXPECT_THAT(EtcdSlotMap::Start(&store, kJob, newer->get(),
                                 EtcdSlotMap::OwnMap::kDataDirWithTables)
                  .status(),
              StatusIs(StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace ps::cluster
