// StripeMap and StripeForKey(): the stripes a division gives; a stripe's
// keys lie in runs in RocksDB's order (slot, then key), and the keys of the
// slots a shard may own spread evenly over the stripes.
#include "embedding/stripes.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

// `per_slot` random keys of each slot in [first, end) by `step`.
std::vector<uint64_t> KeysOfSlots(uint32_t first, uint32_t step, uint32_t end,
                                  size_t per_slot) {
  std::vector<size_t> wanted(kNumSlots, 0);
  size_t missing = 0;
  for (uint32_t slot = first; slot < end; slot += step) {
    wanted[slot] = per_slot;
    missing += per_slot;
  }
  std::vector<uint64_t> keys;
  std::mt19937_64 rng(first * 31 + step);
  while (missing > 0) {
    const uint64_t key = rng();
    size_t& left = wanted[SlotForKey(key)];
    if (left == 0) continue;
    --left;
    --missing;
    keys.push_back(key);
  }
  return keys;
}

TEST(StripesTest, AStripesKeysLieInRunsInRocksDbOrder) {
  for (size_t stripes : {size_t{8}, size_t{64}}) {
    std::vector<uint64_t> keys = KeysOfSlots(0, 1, kNumSlots, 40);
    std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) {
      return std::make_tuple(SlotForKey(a), a) <
             std::make_tuple(SlotForKey(b), b);
    });
    size_t runs = 1;
    for (size_t i = 1; i < keys.size(); ++i) {
      ASSERT_LT(StripeForKey(keys[i], stripes), stripes);
      if (StripeForKey(keys[i], stripes) != StripeForKey(keys[i - 1], stripes))
        ++runs;
    }
    // At most one run a cell: a slot's 40 keys in stripes / 4 runs or fewer
    // (by key hash they would be ~40).
    EXPECT_LE(runs, size_t{kNumSlots} * std::max<size_t>(1, stripes / 4))
        << stripes << " stripes";
  }
}

TEST(StripesTest, AShardsKeysSpreadEvenlyOverTheStripes) {
  // The slots of one shard of 1, 4 or 64 (every 4th or 64th), and of one
  // that took 256 slots in a move (a range).
  struct Owned {
    uint32_t first, step, end;
  };
  for (const Owned owned :
       {Owned{0, 1, kNumSlots}, Owned{1, 4, kNumSlots}, Owned{3, 64, kNumSlots},
        Owned{4096, 1, 4096 + 256}}) {
    const size_t slots =
        (owned.end - owned.first + owned.step - 1) / owned.step;
    const std::vector<uint64_t> keys = KeysOfSlots(
        owned.first, owned.step, owned.end, (size_t{1} << 18) / slots);
    for (size_t stripes : {size_t{8}, size_t{12}, size_t{64}, size_t{256}}) {
      std::vector<size_t> per_stripe(stripes, 0);
      for (uint64_t key : keys) ++per_stripe[StripeForKey(key, stripes)];
      const double mean = static_cast<double>(keys.size()) / stripes;
      // About 64 cells a stripe for a 64th of the slots: within a third.
      const double spread = slots >= 4096 ? 0.1 : 1.0 / 3;
      EXPECT_LE(*std::max_element(per_stripe.begin(), per_stripe.end()),
                (1 + spread) * mean)
          << stripes << " stripes, slots from " << owned.first << " by "
          << owned.step;
      EXPECT_GE(*std::min_element(per_stripe.begin(), per_stripe.end()),
                (1 - spread) * mean)
          << stripes << " stripes, slots from " << owned.first << " by "
          << owned.step;
    }
  }
}

// The remainder by division that StripeMap's multiplies stand for.
size_t StripeByDivision(uint64_t key, size_t num_stripes) {
  const int cell_bits = CellBitsForStripes(num_stripes);
  uint64_t cell = uint64_t{SlotForKey(key)} << cell_bits;
  if (cell_bits > 0) cell |= key >> (64 - cell_bits);
  return ((cell * 0x9E3779B97F4A7C15ULL) >> 32) % num_stripes;
}

TEST(StripesTest, TheMapsMultipliesGiveTheRemaindersByDivision) {
  std::mt19937_64 rng(3);
  for (size_t stripes :
       {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{8}, size_t{24},
        size_t{100}, size_t{256}, size_t{1000}, size_t{65537},
        size_t{0x7FFFFFFF}, size_t{0xFFFFFFFF}}) {
    const StripeMap map(stripes);
    ASSERT_EQ(map.num_stripes(), stripes);
    for (int i = 0; i < 20000; ++i) {
      const uint64_t key = i < 1000 ? static_cast<uint64_t>(i) : rng();
      ASSERT_EQ(map.StripeOf(key), StripeByDivision(key, stripes))
          << "key " << key << ", " << stripes << " stripes";
    }
  }
}

}  // namespace
}  // namespace ps::embedding
