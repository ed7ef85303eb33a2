#include "cluster/slot_ownership.h"

#include <atomic>
#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

TEST(SlotOwnershipTest, ANewDirStartsFromTheInitialMapAndKeepsChanges) {
  const std::string dir = FreshTestDir("slot_ownership");
  {
    absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
        SlotOwnership::Open(dir, 3);
    ASSERT_OK(slots);
    EXPECT_TRUE(*(*slots)->current() == SlotMap::Initial(3));
    const SlotMap moved = SlotMap::Initial(3).WithSlotsMoved(0, 9, 2);
    ASSERT_OK((*slots)->Replace(1, moved));
    EXPECT_TRUE(*(*slots)->current() == moved);
  }
  absl::StatusOr<std::unique_ptr<SlotOwnership>> reopened =
      SlotOwnership::Open(dir, 3);
  ASSERT_OK(reopened);
  EXPECT_EQ((*reopened)->current()->epoch(), 2u);
  EXPECT_EQ((*reopened)->current()->ShardForSlot(0), 2u);
  EXPECT_EQ((*reopened)->current()->ShardForSlot(10), 1u);
}

TEST(SlotOwnershipTest, AChangeMustNameTheCurrentEpochAndGrowIt) {
  absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
      SlotOwnership::Open(FreshTestDir("slot_ownership_cas"), 2);
  ASSERT_OK(slots);
  const SlotMap first = SlotMap::Initial(2).WithSlotsMoved(0, 0, 1);
  ASSERT_OK((*slots)->Replace(1, first));
  // A second administrator who read epoch 1 too.
  EXPECT_THAT((*slots)->Replace(1, SlotMap::Initial(2).WithSlotsMoved(5, 5, 0)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Another map of the same epoch.
  EXPECT_THAT((*slots)->Replace(2, SlotMap::Initial(2).WithSlotsMoved(7, 7, 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // A shard the cluster does not have: the count changes only by Adopt()
  // (a shard joined under etcd).
  EXPECT_THAT(
      (*slots)->Replace(2, first.WithNumShards(3).WithSlotsMoved(1, 1, 2)),
      StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(*(*slots)->current() == first);
  // The same change again is no change.
  EXPECT_OK((*slots)->Replace(1, first));
}

TEST(SlotOwnershipTest, AdoptTakesOnlyNewerMaps) {
  const std::string dir = FreshTestDir("slot_ownership_adopt");
  absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
      SlotOwnership::Open(dir, 2);
  ASSERT_OK(slots);
  const SlotMap third =
      SlotMap::Initial(2).WithSlotsMoved(0, 0, 1).WithSlotsMoved(2, 2, 1);
  ASSERT_OK((*slots)->Adopt(third));
  EXPECT_TRUE(*(*slots)->current() == third);
  ASSERT_OK((*slots)->Adopt(SlotMap::Initial(2).WithSlotsMoved(4, 4, 1)));
  EXPECT_TRUE(*(*slots)->current() == third);
  // A map of more shards (one joined, under etcd) is adopted, and kept
  // with its count.
  const SlotMap joined = third.WithNumShards(6).WithSlotsMoved(6, 6, 5);
  ASSERT_OK((*slots)->Adopt(joined));
  EXPECT_EQ((*slots)->num_shards(), 6u);
  absl::StatusOr<std::unique_ptr<SlotOwnership>> reopened =
      SlotOwnership::Open(dir, 2);
  ASSERT_OK(reopened);
  EXPECT_TRUE(*(*reopened)->current() == joined);
}

TEST(SlotOwnershipTest, AChangeWaitsForThePushesInFlight) {
  absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
      SlotOwnership::Open(FreshTestDir("slot_ownership_lock"), 2);
  ASSERT_OK(slots);
  SlotOwnership& ownership = **slots;
  const SlotMap second = SlotMap::Initial(2).WithSlotsMoved(0, 0, 1);
  std::atomic<int> changes{0};
  std::thread changer;
  {
    // A push in flight (data_service.cc holds the lock shared).
    absl::ReaderMutexLock push(&ownership.push_lock());
    changer = std::thread([&] {
      EXPECT_OK(ownership.Replace(1, second));
      ++changes;
      EXPECT_OK(ownership.Adopt(second.WithSlotsMoved(2, 2, 1)));
      ++changes;
    });
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(changes.load(), 0);
    EXPECT_EQ(ownership.current()->epoch(), 1u);
  }
  changer.join();
  EXPECT_EQ(changes.load(), 2);
  EXPECT_EQ(ownership.current()->epoch(), 3u);
  // AdoptAgreed runs its agreement under the lock too.
  {
    absl::ReaderMutexLock push(&ownership.push_lock());
    changer = std::thread([&] {
      EXPECT_OK(ownership.AdoptAgreed([&]() -> absl::StatusOr<SlotMap> {
        return ownership.current()->WithSlotsMoved(4, 4, 1);
      }));
      ++changes;
    });
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(changes.load(), 2);
  }
  changer.join();
  EXPECT_EQ(ownership.current()->epoch(), 4u);
}

TEST(SlotOwnershipTest, ADamagedFileIsRefused) {
  const std::string dir = FreshTestDir("slot_ownership_damaged");
  std::ofstream(dir + "/SLOT_MAP.json") << "{\"epoch\": \"3\", \"ranges\": [";
  EXPECT_THAT(SlotOwnership::Open(dir, 2),
              StatusIs(absl::StatusCode::kDataLoss));
  std::ofstream(dir + "/SLOT_MAP.json", std::ios::trunc)
      << "{\"epoch\": \"3\", \"ranges\": [{\"first\": 0, \"last\": 100}]}";
  EXPECT_THAT(SlotOwnership::Open(dir, 2),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(SlotOwnershipTest, AFileWithoutItsShardCountHasTheFlagsCount) {
  // As written before maps held their count: every slot on shard 0.
  const std::string dir = FreshTestDir("slot_ownership_uncounted");
  std::ofstream(dir + "/SLOT_MAP.json")
      << "{\"epoch\": \"4\", \"ranges\": [{\"first\": 0, \"last\": 16383}]}";
  absl::StatusOr<std::unique_ptr<SlotOwnership>> slots =
      SlotOwnership::Open(dir, 3);
  ASSERT_OK(slots);
  EXPECT_EQ((*slots)->num_shards(), 3u);
  EXPECT_EQ((*slots)->current()->epoch(), 4u);
  // Shard 2 exists though it owns nothing: a map that gives it slots is a
  // change of the same count.
  ASSERT_OK((*slots)->Replace(4, (*slots)->current()->WithSlotsMoved(0, 9, 2)));
}

}  // namespace
}  // namespace ps::cluster
