#include "base/key_index.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(KeyIndexTest, EmptyFindsNothing) {
  KeyIndex index;
  EXPECT_FALSE(index.Find(0).has_value());
  EXPECT_FALSE(index.Erase(7));
  index.Prefetch(7);
  EXPECT_EQ(index.size(), 0u);
}

TEST(KeyIndexTest, AnyKeyAndTheLargestValue) {
  KeyIndex index;
  const uint64_t keys[] = {0, 1, ~uint64_t{0}, uint64_t{1} << 63};
  uint64_t value = 0;
  for (uint64_t key : keys) {
    EXPECT_EQ(index.TryEmplace(key, value), std::make_pair(value, true));
    value += 1;
  }
  EXPECT_EQ(index.TryEmplace(5, KeyIndex::kMaxValue).first,
            KeyIndex::kMaxValue);
  value = 0;
  for (uint64_t key : keys) {
    ASSERT_TRUE(index.Find(key).has_value()) << key;
    EXPECT_EQ(*index.Find(key), value++);
  }
  EXPECT_EQ(*index.Find(5), KeyIndex::kMaxValue);
  EXPECT_EQ(index.size(), 5u);
}

TEST(KeyIndexTest, TryEmplaceKeepsTheFirstValue) {
  KeyIndex index;
  EXPECT_EQ(index.TryEmplace(42, 1), std::make_pair(uint64_t{1}, true));
  EXPECT_EQ(index.TryEmplace(42, 2), std::make_pair(uint64_t{1}, false));
  EXPECT_EQ(*index.Find(42), 1u);
  EXPECT_EQ(index.size(), 1u);
}

// Random inserts, erasures and lookups against absl::flat_hash_map, over
// few enough keys that each is inserted and erased many times, from an
// index that starts empty (growing) and one reserved ahead.
TEST(KeyIndexTest, AgreesWithAHashMap) {
  for (const bool reserve : {false, true}) {
    std::mt19937_64 random(reserve ? 2 : 1);
    KeyIndex index(/*huge_pages=*/false);
    if (reserve) index.Reserve(5000);
    absl::flat_hash_map<uint64_t, uint64_t> expected;
    std::vector<uint64_t> keys(5000);
    for (uint64_t& key : keys) key = random();
    // Keys that share their home slot's neighbourhood: sequential ones.
    for (uint64_t i = 0; i < 1000; ++i) keys[i] = i;
    for (int step = 0; step < 200000; ++step) {
      const uint64_t key = keys[random() % keys.size()];
      switch (random() % 3) {
        case 0: {
          const uint64_t value = random() % KeyIndex::kMaxValue;
          const auto [stored, added] = index.TryEmplace(key, value);
          const auto [it, inserted] = expected.try_emplace(key, value);
          ASSERT_EQ(added, inserted) << key;
          ASSERT_EQ(stored, it->second) << key;
          break;
        }
        case 1:
          ASSERT_EQ(index.Erase(key), expected.erase(key) == 1) << key;
          break;
        default: {
          const std::optional<uint64_t> found = index.Find(key);
          const auto it = expected.find(key);
          ASSERT_EQ(found.has_value(), it != expected.end()) << key;
          if (found.has_value()) {
            ASSERT_EQ(*found, it->second) << key;
          }
        }
      }
      ASSERT_EQ(index.size(), expected.size());
    }
    absl::flat_hash_map<uint64_t, uint64_t> visited;
    index.ForEach([&](uint64_t key, uint64_t value) {
      EXPECT_TRUE(visited.emplace(key, value).second) << "twice: " << key;
    });
    EXPECT_EQ(visited, expected);
  }
}

// Reset() empties the index, erased slots included, keeping its slots for
// a set of keys of about its size and sizing them anew for one far
// smaller or larger.
TEST(KeyIndexTest, ResetKeepsSlotsThatFit) {
  KeyIndex index(/*huge_pages=*/false);
  index.Reset(100);
  const size_t bytes = index.bytes();
  EXPECT_EQ(bytes, KeyIndex::ReservedBytes(100));
  for (uint64_t key = 0; key < 100; ++key) index.TryEmplace(key, key);
  for (uint64_t key = 0; key < 50; ++key) ASSERT_TRUE(index.Erase(key));
  index.Reset(100);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.bytes(), bytes);
  index.Reserve(100);  // nothing erased is left to count
  EXPECT_EQ(index.bytes(), bytes);
  for (uint64_t key = 0; key < 100; ++key) EXPECT_FALSE(index.Find(key));
  // Room for 100 keys again: the erased slots are gone too.
  for (uint64_t key = 100; key < 200; ++key) {
    EXPECT_TRUE(index.TryEmplace(key, key).second);
  }
  EXPECT_EQ(index.bytes(), bytes);
  EXPECT_EQ(*index.Find(150), 150u);

  index.Reset(100000);
  EXPECT_EQ(index.bytes(), KeyIndex::ReservedBytes(100000));
  EXPECT_FALSE(index.Find(150));
  index.Reset(100);
  EXPECT_EQ(index.bytes(), bytes);
}

// Reserve() counts the slots erased keys still take.
TEST(KeyIndexTest, ReserveCountsErasedSlots) {
  KeyIndex index(/*huge_pages=*/false);
  index.Reserve(12);
  for (uint64_t key = 0; key < 12; ++key) index.TryEmplace(key, key);
  for (uint64_t key = 0; key < 6; ++key) index.Erase(key);
  index.Reserve(12);  // 6 held, 6 more to come
  const size_t bytes = index.bytes();
  for (uint64_t key = 100; key < 106; ++key) index.TryEmplace(key, key);
  EXPECT_EQ(index.bytes(), bytes);
}

// Erased slots are reclaimed when the index fills up, rather than growing
// it: one doubling at most for a steady number of keys.
TEST(KeyIndexTest, ErasuresDoNotGrowIt) {
  KeyIndex index(/*huge_pages=*/false);
  index.Reserve(1000);
  const size_t bytes = index.bytes();
  for (uint64_t key = 0; key < 1000000; ++key) {
    index.TryEmplace(key, key);
    if (key >= 1000) {
      ASSERT_TRUE(index.Erase(key - 1000));
    }
    ASSERT_LE(index.bytes(), 2 * bytes);
  }
  EXPECT_EQ(index.size(), 1000u);
  for (uint64_t key = 1000000 - 1000; key < 1000000; ++key)
    EXPECT_EQ(*index.Find(key), key);
}

// Reserve(n) holds n keys however many of them are erased on the way, and
// a key already there is found without growing.
TEST(KeyIndexTest, ReservedRoomHoldsErasedKeysToo) {
  for (const size_t keys : {12, 1000}) {
    KeyIndex index(/*huge_pages=*/false);
    index.Reserve(keys);
    const size_t bytes = index.bytes();
    for (uint64_t key = 0; key < keys; ++key) {
      if (key % 3 == 2) {
        ASSERT_TRUE(index.Erase(key - 1));
      }
      index.TryEmplace(key, key);
    }
    for (uint64_t key = 0; key < keys; ++key) index.TryEmplace(key, 0);
    EXPECT_EQ(index.bytes(), bytes) << keys;
  }
}

// Slots of 16 bytes, never over three quarters full, and a reserved index
// at least three eighths full once its keys are in.
TEST(KeyIndexTest, AtMostThreeQuartersFull) {
  KeyIndex grown(/*huge_pages=*/false);
  KeyIndex reserved(/*huge_pages=*/false);
  reserved.Reserve(100000);
  const size_t reserved_bytes = reserved.bytes();
  EXPECT_EQ(reserved_bytes, KeyIndex::ReservedBytes(100000));
  for (uint64_t key = 0; key < 100000; ++key) {
    grown.TryEmplace(key * 7919, key);
    reserved.TryEmplace(key * 7919, key);
    ASSERT_LE(4 * grown.size() * 16, 3 * grown.bytes());
  }
  EXPECT_EQ(reserved.bytes(), reserved_bytes);
  EXPECT_GE(8 * reserved.size() * 16, 3 * reserved.bytes());
}

}  // namespace
}  // namespace ps
