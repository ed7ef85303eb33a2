#include "ops/slot_mover.h"

#include <vector>

#include "base/routing.h"
#include "base/slot_map.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// `map` after `moves`, as the shards would apply them.
SlotMap Apply(SlotMap map, const std::vector<SlotMoveOptions>& moves) {
  for (const SlotMoveOptions& move : moves) {
    EXPECT_TRUE(move.from_shard.has_value());
    EXPECT_GT(map.SlotsOwned(move.first_slot, move.last_slot, *move.from_shard),
              0u);
    map = map.WithSlotsMovedFrom(move.first_slot, move.last_slot,
                                 *move.from_shard, move.to_shard);
  }
  return map;
}

uint32_t Owned(const SlotMap& map, uint32_t shard) {
  return map.SlotsOwned(0, kNumSlots - 1, shard);
}

TEST(PlanRebalanceTest, ANewShardGetsItsShare) {
  // Shards 0 and 1 own everything; shard 2 joined with nothing.
  const SlotMap two = SlotMap::Initial(2);
  const std::vector<SlotMoveOptions> moves =
      PlanRebalance(two, 3, std::nullopt);
  ASSERT_FALSE(moves.empty());
  const SlotMap after = Apply(two, moves);
  for (uint32_t shard = 0; shard < 3; ++shard) {
    EXPECT_GE(Owned(after, shard), kNumSlots / 3) << shard;
    EXPECT_LE(Owned(after, shard), kNumSlots / 3 + 1) << shard;
  }
  // One range per (giver, taker) pair here: two moves.
  EXPECT_EQ(moves.size(), 2u);
  EXPECT_TRUE(PlanRebalance(after, 3, std::nullopt).empty());
}

TEST(PlanRebalanceTest, ADrainedShardKeepsNothing) {
  const SlotMap three = SlotMap::Initial(3);
  const SlotMap after = Apply(three, PlanRebalance(three, 3, 2u));
  EXPECT_EQ(Owned(after, 2), 0u);
  EXPECT_EQ(Owned(after, 0), kNumSlots / 2);
  EXPECT_EQ(Owned(after, 1), kNumSlots / 2);
  // And back: every shard its share again.
  const SlotMap back = Apply(after, PlanRebalance(after, 3, std::nullopt));
  for (uint32_t shard = 0; shard < 3; ++shard) {
    EXPECT_GE(Owned(back, shard), kNumSlots / 3) << shard;
    EXPECT_LE(Owned(back, shard), kNumSlots / 3 + 1) << shard;
  }
}

TEST(PlanRebalanceTest, ABalancedMapPlansNothing) {
  for (uint32_t shards = 1; shards <= 5; ++shards)
    EXPECT_TRUE(
        PlanRebalance(SlotMap::Initial(shards), shards, std::nullopt).empty())
        << shards;
}

TEST(PlanRebalanceTest, UnevenMapsAreEvenedOut) {
  const SlotMap skewed =
      SlotMap::Initial(4).WithSlotsMovedFrom(0, kNumSlots - 1, 3, 0);
  const SlotMap after = Apply(skewed, PlanRebalance(skewed, 4, std::nullopt));
  for (uint32_t shard = 0; shard < 4; ++shard)
    EXPECT_EQ(Owned(after, shard), kNumSlots / 4) << shard;
}

}  // namespace
}  // namespace ps
