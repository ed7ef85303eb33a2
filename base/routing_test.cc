#include "base/routing.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(RoutingTest, SlotsArePinned) {
  // A change to these values would strand every stored row (and every
  // checkpoint) on the wrong shard: the mapping is pinned to values
  // computed outside this code (splitmix64's finalizer, mod 16384).
  EXPECT_EQ(SlotForKey(0), 0u);
  EXPECT_EQ(SlotForKey(1), 1509u);
  EXPECT_EQ(SlotForKey(2), 5258u);
  EXPECT_EQ(SlotForKey(12345), 7505u);
  EXPECT_EQ(SlotForKey(0xdeadbeefcafef00dULL), 4547u);
  EXPECT_EQ(SlotForKey(~uint64_t{0}), 15739u);
  EXPECT_EQ(ShardForKey(2, 3), 2u);
  EXPECT_EQ(ShardForKey(~uint64_t{0}, 3), 1u);
}

TEST(RoutingTest, SlotsAreInRange) {
  for (uint64_t key = 0; key < 100000; ++key) {
    ASSERT_LT(SlotForKey(key * 0x9E3779B97F4A7C15ULL), kNumSlots);
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
