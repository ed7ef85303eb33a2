#include "client/response_pool.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps::client {
namespace {

// A set of `count` replies, each with a row buffer of `bytes` bytes.
std::vector<PullResponse> Set(int count, size_t bytes) {
  std::vector<PullResponse> set(count);
  for (PullResponse& response : set) response.mutable_values()->resize(bytes);
  return set;
}

TEST(PullResponsePoolTest, GivesBackTheBuffersItKept) {
  PullResponsePool pool;
  EXPECT_TRUE(pool.Take().empty());
  std::vector<PullResponse> set = Set(3, 4096);
  const char* buffer = set[1].values().data();
  pool.Give(std::move(set));
  std::vector<PullResponse> taken = pool.Take();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[1].values().data(), buffer);  // the same buffer, reused
  EXPECT_TRUE(pool.Take().empty());             // each set once
}

TEST(PullResponsePoolTest, KeepsAtMostItsSets) {
  PullResponsePool pool(/*max_sets=*/2, /*max_set_bytes=*/1 << 20);
  for (int i = 0; i < 5; ++i) pool.Give(Set(1, 16));
  EXPECT_FALSE(pool.Take().empty());
  EXPECT_FALSE(pool.Take().empty());
  EXPECT_TRUE(pool.Take().empty());
}

TEST(PullResponsePoolTest, DropsASetTooLargeToKeep) {
  PullResponsePool pool(/*max_sets=*/4, /*max_set_bytes=*/10000);
  pool.Give(Set(3, 4000));  // 12000 bytes: over
  EXPECT_TRUE(pool.Take().empty());
  pool.Give(Set(2, 4000));  // 8000 bytes: kept
  EXPECT_EQ(pool.Take().size(), 2u);
}

// The bytes a set holds: its buffers' capacity, whatever their contents.
size_t CapacityOf(const std::vector<PullResponse>& set) {
  size_t bytes = 0;
  for (const PullResponse& response : set)
    bytes += response.values().capacity();
  return bytes;
}

TEST(PullResponsePoolTest, ASetExactlyAtTheLimitIsKept) {
  const size_t bytes = CapacityOf(Set(2, 3000));
  PullResponsePool at_limit(/*max_sets=*/4, /*max_set_bytes=*/bytes);
  at_limit.Give(Set(2, 3000));
  EXPECT_EQ(at_limit.Take().size(), 2u);
  PullResponsePool below(/*max_sets=*/4, /*max_set_bytes=*/bytes - 1);
  below.Give(Set(2, 3000));
  EXPECT_TRUE(below.Take().empty());
}

TEST(PullResponsePoolTest, CountsWhatABufferHoldsNotWhatItUses) {
  PullResponsePool pool(/*max_sets=*/4, /*max_set_bytes=*/10000);
  std::vector<PullResponse> set(1);
  set[0].mutable_values()->reserve(20000);  // a large reply, then a small one
  set[0].mutable_values()->resize(16);
  pool.Give(std::move(set));
  EXPECT_TRUE(pool.Take().empty());
}

}  // namespace
}  // namespace ps::client
