#include "base/huge_pages.h"

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "base/huge_pages_test_util.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(HugePagesTest, MapsWholeAlignedHugePagesAskingForThem) {
  const size_t bytes = 3 * kHugePageBytes + 100;
  char* start = static_cast<char*>(MapHugePages(bytes));
  ASSERT_NE(start, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(start) % kHugePageBytes, 0u);
  EXPECT_EQ(HugePageRounded(bytes), 4 * kHugePageBytes);
  // Every byte of the rounded size is usable.
  start[0] = 1;
  start[4 * kHugePageBytes - 1] = 2;
  EXPECT_EQ(start[0] + start[4 * kHugePageBytes - 1], 3);
  if (HasTransparentHugePages()) {
    EXPECT_NE(VmFlagsOf(start).find(" hg"), std::string::npos)
        << VmFlagsOf(start);
  }
  UnmapHugePages(start, bytes);
}

// The process's mapped bytes (VmSize of /proc/self/status), in kB.
int64_t MappedKilobytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kilobytes = 0;
    if (line.rfind("VmSize:", 0) == 0 &&
        absl::SimpleAtoi(
            absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(7), "kB")),
            &kilobytes)) {
      return kilobytes;
    }
  }
  return -1;
}

TEST(HugePagesTest, UnmappingGivesBackAllThatWasMapped) {
  EXPECT_EQ(MapHugePages(0), nullptr);
  const int64_t before = MappedKilobytes();
  ASSERT_GT(before, 0);
  for (int round = 0; round < 64; ++round) {
    void* start = MapHugePages(3 * kHugePageBytes + 100);
    ASSERT_NE(start, nullptr);
    UnmapHugePages(start, 3 * kHugePageBytes + 100);
    std::vector<float, HugePageAllocator<float>> grown;
    for (int i = 0; i < (1 << 20); ++i) grown.push_back(1.0f);
  }
  // The heap may keep what the vector's small phases grew it by (a few
  // MiB at most); a mapping left behind each round would be 64 of them.
  EXPECT_LT(MappedKilobytes() - before, 8 << 10);
}

TEST(HugePagesTest, AnAllocatorSwitchedOffUsesTheHeap) {
  const HugePageAllocator<float> off(false);
  EXPECT_FALSE(off.on_huge_pages());
  EXPECT_TRUE(HugePageAllocator<float>().on_huge_pages());
  // Rebinding keeps the switch; allocators of different kinds differ.
  EXPECT_FALSE(HugePageAllocator<int>(off).on_huge_pages());
  EXPECT_TRUE(off == HugePageAllocator<int>(false));
  EXPECT_TRUE(off != HugePageAllocator<float>());
  const int mappings_before = HugePageMappings();
  std::vector<float, HugePageAllocator<float>> rows(off);
  rows.reserve(kHugePageBytes);  // 8 MiB of floats
  for (size_t i = 0; i < kHugePageBytes; ++i) rows.push_back(i * 0.5f);
  EXPECT_EQ(VmFlagsOf(rows.data()).find(" hg"), std::string::npos)
      << VmFlagsOf(rows.data());
  EXPECT_EQ(HugePageMappings(), mappings_before);
  for (size_t i = 0; i < kHugePageBytes; i += 4099)
    ASSERT_EQ(rows[i], i * 0.5f) << i;
}

TEST(HugePagesTest, ContainersOfBothKindsSwapAndMoveTheirAllocators) {
  // Each frees what it holds by the kind that allocated it: a heap block
  // handed to munmap, or a mapping to free(), would leak or crash.
  std::vector<float, HugePageAllocator<float>> on(kHugePageBytes, 1.0f);
  std::vector<float, HugePageAllocator<float>> off(
      HugePageAllocator<float>(false));
  off.assign(kHugePageBytes, 2.0f);
  on.swap(off);
  EXPECT_FALSE(on.get_allocator().on_huge_pages());
  EXPECT_TRUE(off.get_allocator().on_huge_pages());
  EXPECT_EQ(on[5], 2.0f);
  EXPECT_EQ(off[5], 1.0f);
  std::vector<float, HugePageAllocator<float>> moved_into;
  moved_into = std::move(on);
  EXPECT_FALSE(moved_into.get_allocator().on_huge_pages());
  EXPECT_EQ(moved_into[7], 2.0f);
}

TEST(HugePagesTest, ContainersKeepTheirValuesOnHugePages) {
  std::vector<float, HugePageAllocator<float>> rows;
  rows.reserve(kHugePageBytes);  // 8 MiB of floats: huge pages
  for (size_t i = 0; i < kHugePageBytes; ++i) rows.push_back(i * 0.5f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % kHugePageBytes, 0u);
  if (HasTransparentHugePages()) {
    EXPECT_NE(VmFlagsOf(rows.data()).find(" hg"), std::string::npos);
  }
  // Grown past its reservation: moved to a larger mapping, values kept.
  rows.push_back(-1.0f);
  for (size_t i = 0; i < kHugePageBytes; i += 4099)
    ASSERT_EQ(rows[i], i * 0.5f) << i;
  EXPECT_EQ(rows.back(), -1.0f);

  // A small one comes from the heap (not aligned to a huge page, as a rule,
  // and without the advice).
  std::vector<int, HugePageAllocator<int>> small(100, 7);
  EXPECT_EQ(small[99], 7);

  absl::flat_hash_map<uint64_t, size_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, size_t>>>
      index;
  index.reserve(1 << 18);
  for (uint64_t key = 0; key < (1 << 18); ++key) index[key * 7919] = key;
  for (uint64_t key = 0; key < (1 << 18); key += 97)
    ASSERT_EQ(index.at(key * 7919), key);
  if (HasTransparentHugePages()) {
    EXPECT_NE(VmFlagsOf(&*index.begin()).find(" hg"), std::string::npos);
  }
}

}  // namespace
}  // namespace ps
