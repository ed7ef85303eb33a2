#include "base/slot_map.h"

#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(SlotMapTest, InitialMapIsSlotModuloShards) {
  const SlotMap map = SlotMap::Initial(3);
  EXPECT_EQ(map.epoch(), 1u);
  for (uint32_t slot = 0; slot < kNumSlots; ++slot)
    ASSERT_EQ(map.ShardForSlot(slot), slot % 3) << slot;
  for (uint64_t key = 0; key < 1000; ++key)
    ASSERT_EQ(map.ShardForKey(key), ShardForKey(key, 3)) << key;
  EXPECT_EQ(map.HighestShard(), 2u);
}

TEST(SlotMapTest, SpecRoundTripsAsRanges) {
  const SlotMap moved = SlotMap::Initial(2)
                            .WithNumShards(3)
                            .WithSlotsMoved(0, 99, 2)
                            .WithSlotsMoved(200, 200, 0);
  EXPECT_EQ(moved.epoch(), 4u);
  const SlotMapSpec spec = moved.ToSpec();
  EXPECT_EQ(spec.epoch(), 4u);
  EXPECT_EQ(spec.num_shards(), 3u);
  ASSERT_GE(spec.ranges_size(), 2);
  EXPECT_EQ(spec.ranges(0).first(), 0u);
  EXPECT_EQ(spec.ranges(0).last(), 99u);
  EXPECT_EQ(spec.ranges(0).shard(), 2u);
  absl::StatusOr<SlotMap> parsed = SlotMap::FromSpec(spec);
  ASSERT_OK(parsed);
  EXPECT_TRUE(*parsed == moved);
  EXPECT_EQ(parsed->ShardForSlot(99), 2u);
  EXPECT_EQ(parsed->ShardForSlot(100), 0u);
  EXPECT_EQ(parsed->ShardForSlot(101), 1u);
  EXPECT_EQ(parsed->ShardForSlot(200), 0u);
  EXPECT_EQ(parsed->ShardForSlot(201), 1u);
}

TEST(SlotMapTest, TheShardCountTravelsAndChangesTheMap) {
  const SlotMap two = SlotMap::Initial(2);
  EXPECT_EQ(two.num_shards(), 2u);
  // A shard joins owning nothing: another map, of the next epoch.
  const SlotMap three = two.WithNumShards(3);
  EXPECT_EQ(three.num_shards(), 3u);
  EXPECT_EQ(three.epoch(), 2u);
  EXPECT_EQ(three.HighestShard(), 1u);
  EXPECT_FALSE(three == two.WithSlotsMoved(0, 0, 0));
  absl::StatusOr<SlotMap> parsed = SlotMapFromJson(SlotMapToJson(three), 0);
  ASSERT_OK(parsed);
  EXPECT_TRUE(*parsed == three);
  // Moves keep the count.
  EXPECT_EQ(three.WithSlotsMoved(0, 9, 2).num_shards(), 3u);
  EXPECT_EQ(three.WithSlotsMovedFrom(0, 9, 0, 2).num_shards(), 3u);
}

TEST(SlotMapTest, ASpecWithoutItsCountHasTheReadersOrOneBeyondItsShards) {
  SlotMapSpec spec = SlotMap::Initial(2).ToSpec();
  spec.clear_num_shards();
  absl::StatusOr<SlotMap> known = SlotMap::FromSpec(spec, 5);
  ASSERT_OK(known);
  EXPECT_EQ(known->num_shards(), 5u);
  absl::StatusOr<SlotMap> guessed = SlotMap::FromSpec(spec);
  ASSERT_OK(guessed);
  EXPECT_EQ(guessed->num_shards(), 2u);
  // A count at or below a shard it names is no map.
  spec.set_num_shards(1);
  EXPECT_THAT(SlotMap::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SlotMapFromJson("{\"epoch\": ", 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A field a later release adds is passed over.
  std::string json = SlotMapToJson(SlotMap::Initial(2));
  json.insert(1, "\"owner_hint\": 7, ");
  absl::StatusOr<SlotMap> later = SlotMapFromJson(json, 0);
  ASSERT_OK(later);
  EXPECT_TRUE(*later == SlotMap::Initial(2));
}

TEST(SlotMapTest, RangesOfAShard) {
  const SlotMap map =
      SlotMap::Initial(1).WithSlotsMoved(10, 19, 1).WithSlotsMoved(30, 30, 1);
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(map.RangesOf(1), (Ranges{{10, 19}, {30, 30}}));
  EXPECT_EQ(map.RangesOf(0), (Ranges{{0, 9}, {20, 29}, {31, kNumSlots - 1}}));
  EXPECT_EQ(map.RangesOf(5), Ranges{});
  EXPECT_EQ(FormatSlotRanges(map.RangesOf(1)), "10-19,30");
}

TEST(SlotMapTest, MovingTheSlotsOfOneShard) {
  const SlotMap map = SlotMap::Initial(3).WithSlotsMovedFrom(0, 11, 1, 2);
  EXPECT_EQ(map.epoch(), 2u);
  for (uint32_t slot = 0; slot < 12; ++slot) {
    EXPECT_EQ(map.ShardForSlot(slot), slot % 3 == 1 ? 2u : slot % 3) << slot;
  }
  EXPECT_EQ(map.ShardForSlot(13), 1u);
  EXPECT_EQ(map.SlotsOwned(0, 11, 2), 8u);
  EXPECT_EQ(map.SlotsOwned(0, 11, 1), 0u);
  EXPECT_EQ(map.SlotsOwned(0, 11, 0), 4u);
}

TEST(SlotMapTest, SpecsThatDoNotCoverEverySlotOnceAreRefused) {
  SlotMapSpec spec = SlotMap::Initial(2).ToSpec();
  SlotMapSpec no_epoch = spec;
  no_epoch.set_epoch(0);
  EXPECT_THAT(SlotMap::FromSpec(no_epoch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  SlotMapSpec short_of_the_end = spec;
  short_of_the_end.mutable_ranges()->RemoveLast();
  EXPECT_THAT(SlotMap::FromSpec(short_of_the_end),
              StatusIs(absl::StatusCode::kInvalidArgument));
  SlotMapSpec overlapping = spec;
  overlapping.mutable_ranges(1)->set_first(0);
  EXPECT_THAT(SlotMap::FromSpec(overlapping),
              StatusIs(absl::StatusCode::kInvalidArgument));
  SlotMapSpec past_the_end = spec;
  past_the_end.mutable_ranges(spec.ranges_size() - 1)->set_last(kNumSlots);
  EXPECT_THAT(SlotMap::FromSpec(past_the_end),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SlotMap::FromSpec(SlotMapSpec()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SlotMapTest, MovedErrorsCarryTheirEpoch) {
  const absl::Status moved = SlotMovedError("key 7 moved", 12);
  EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MovedEpoch(moved), std::optional<uint64_t>(12));
  EXPECT_EQ(MovedEpoch(absl::FailedPreconditionError("other")), std::nullopt);
  EXPECT_EQ(MovedEpoch(absl::OkStatus()), std::nullopt);
}

}  // namespace
}  // namespace ps
