// StripeForKey(): one stripe per slot, and slots spread evenly over the
// stripes for the sets of slots a shard may own.
#include "embedding/stripes.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

TEST(StripesTest, EveryKeyOfASlotIsInOneStripe) {
  std::mt19937_64 rng(1);
  std::map<uint32_t, size_t> stripe_of_slot;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t key = rng();
    const size_t stripe = StripeForKey(key, 8);
    ASSERT_LT(stripe, 8u);
    const auto [it, first] = stripe_of_slot.emplace(SlotForKey(key), stripe);
    EXPECT_EQ(it->second, stripe) << "key " << key;
  }
  // Most slots were seen, several keys each.
  EXPECT_GT(stripe_of_slot.size(), kNumSlots * 9 / 10);
}

TEST(StripesTest, AShardsSlotsSpreadEvenlyOverTheStripes) {
  // A key of every slot.
  std::vector<uint64_t> key_of_slot(kNumSlots, 0);
  std::vector<bool> found(kNumSlots, false);
  std::mt19937_64 rng(2);
  for (size_t missing = kNumSlots; missing > 0;) {
    const uint64_t key = rng();
    const uint32_t slot = SlotForKey(key);
    if (found[slot]) continue;
    found[slot] = true;
    key_of_slot[slot] = key;
    --missing;
  }
  // The slots of one shard of 1 or 4 (every 4th), and of one that took a
  // quarter of the slots in a move (a range).
  struct Owned {
    uint32_t first, step, end;
  };
  for (const Owned owned :
       {Owned{0, 1, kNumSlots}, Owned{1, 4, kNumSlots}, Owned{4096, 1, 8192}}) {
    for (size_t stripes : {size_t{8}, size_t{12}, size_t{64}}) {
      std::vector<size_t> slots(stripes, 0);
      size_t total = 0;
      for (uint32_t slot = owned.first; slot < owned.end; slot += owned.step) {
        ++total;
        ++slots[StripeForKey(key_of_slot[slot], stripes)];
      }
      const double mean = static_cast<double>(total) / stripes;
      EXPECT_LE(*std::max_element(slots.begin(), slots.end()), 1.1 * mean)
          << stripes << " stripes, slots from " << owned.first << " by "
          << owned.step;
      EXPECT_GE(*std::min_element(slots.begin(), slots.end()), 0.9 * mean)
          << stripes << " stripes, slots from " << owned.first << " by "
          << owned.step;
    }
  }
}

}  // namespace
}  // namespace ps::embedding
