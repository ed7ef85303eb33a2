// AllKeysDistinct() against a set's answer: random keys, small integers,
// key 0, a repeat anywhere, and keys chosen to land in one slot.
#include "embedding/distinct_keys.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

bool DistinctBySortedSet(const std::vector<uint64_t>& keys) {
  return std::set<uint64_t>(keys.begin(), keys.end()).size() == keys.size();
}

// distinct_keys.cc hashes by multiplying with 2^64 / phi and keeping the
// top bits: key `product` * this lands where `product` names, so a test
// can pick the slots its keys fall in.
uint64_t InverseOfTheMultiplier() {
  constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ULL;
  uint64_t inverse = kMultiplier;  // Newton's iteration, mod 2^64
  for (int i = 0; i < 6; ++i) inverse *= 2 - kMultiplier * inverse;
  return inverse;
}

TEST(DistinctKeysTest, EmptyAndSingleKeysAreDistinct) {
  EXPECT_TRUE(AllKeysDistinct({}));
  EXPECT_TRUE(AllKeysDistinct({0}));
  EXPECT_TRUE(AllKeysDistinct({42}));
}

TEST(DistinctKeysTest, FindsARepeatWhereverItIs) {
  std::mt19937_64 rng(7);
  for (size_t size : {2, 3, 17, 4096, 5000}) {
    std::vector<uint64_t> keys(size);
    for (uint64_t& key : keys) key = rng();
    ASSERT_TRUE(AllKeysDistinct(keys)) << size;
    for (size_t trial = 0; trial < 20; ++trial) {
      std::vector<uint64_t> repeated = keys;
      const size_t from = rng() % size;
      size_t to = rng() % size;
      if (to == from) to = (from + 1) % size;
      repeated[to] = repeated[from];
      EXPECT_FALSE(AllKeysDistinct(repeated))
          << size << " keys, key " << from << " copied to " << to;
    }
  }
}

TEST(DistinctKeysTest, SmallIntegersAndKeyZero) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 4096; ++key) keys.push_back(key);
  EXPECT_TRUE(AllKeysDistinct(keys));
  keys.push_back(0);
  EXPECT_FALSE(AllKeysDistinct(keys));
  keys.back() = 4095;
  EXPECT_FALSE(AllKeysDistinct(keys));
  keys.back() = 4096;
  EXPECT_TRUE(AllKeysDistinct(keys));
}

TEST(DistinctKeysTest, KeysThatShareASlotGetTheSameAnswer) {
  // The multiples of the inverse by 1, 2, 3, ... all land in slot 0: far
  // more probes than the table allows, so the answer comes from the set.
  const uint64_t inverse = InverseOfTheMultiplier();
  ASSERT_EQ(0x9E3779B97F4A7C15ULL * inverse, uint64_t{1});
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= 3000; ++i) keys.push_back(i * inverse);
  EXPECT_TRUE(AllKeysDistinct(keys));
  keys.push_back(keys[1234]);
  EXPECT_FALSE(AllKeysDistinct(keys));
  keys.back() = 3001 * inverse;
  EXPECT_TRUE(AllKeysDistinct(keys));
}

TEST(DistinctKeysTest, ProbesWrapFromTheLastSlotToTheFirst) {
  // Products just below 2^64 name the last slot, so the second key's probe
  // wraps to slot 0; few enough keys that the table answers, not the set.
  const uint64_t inverse = InverseOfTheMultiplier();
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 4; ++i) keys.push_back((~uint64_t{0} - i) * inverse);
  EXPECT_TRUE(AllKeysDistinct(keys));
  keys.push_back(keys[3]);
  EXPECT_FALSE(AllKeysDistinct(keys));
  keys.back() = keys[0];
  EXPECT_FALSE(AllKeysDistinct(keys));
}

TEST(DistinctKeysTest, AgreesWithASetOnRandomRequests) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t size = 1 + rng() % 300;
    const uint64_t range = 1 + rng() % 2000;  // small ranges repeat often
    std::vector<uint64_t> keys(size);
    for (uint64_t& key : keys) key = rng() % range;
    EXPECT_EQ(AllKeysDistinct(keys), DistinctBySortedSet(keys))
        << size << " keys below " << range;
  }
}

}  // namespace
}  // namespace ps::embedding
