#include "embedding/chunk_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/huge_pages_test_util.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

constexpr size_t kChunk = 40 << 10;  // like a dim-16 Adagrad slab's chunks

// Mappings of /proc/self/maps that hold any of `chunks`.
int MappingsHolding(const std::vector<char*>& chunks) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    std::vector<std::string> range =
        absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin, end;
    if (range.size() != 2 || !absl::SimpleHexAtoi(range[0], &begin) ||
        !absl::SimpleHexAtoi(range[1], &end)) {
      continue;
    }
    for (const char* chunk : chunks) {
      const uintptr_t address = reinterpret_cast<uintptr_t>(chunk);
      if (address >= begin && address < end) {
        ++count;
        break;
      }
    }
  }
  return count;
}

// Pages of the region that starts at `start` in memory (mincore()).
int ResidentPages(const char* start) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(ChunkArena::kRegionBytes / page);
  EXPECT_EQ(mincore(const_cast<char*>(start), ChunkArena::kRegionBytes,
                    resident.data()),
            0);
  int count = 0;
  for (unsigned char page_resident : resident) count += page_resident & 1;
  return count;
}

const char* RegionOf(const char* chunk) {
  return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(chunk) &
                                       ~(ChunkArena::kRegionBytes - 1));
}

TEST(ChunkArenaTest, ChunksAreDisjointAlignedInRegionsAndAskForHugePages) {
  ChunkArena arena;
  std::vector<char*> chunks;
  for (int i = 0; i < 200; ++i) {
    char* chunk = arena.Allocate(kChunk);
    std::memset(chunk, i & 0xff, kChunk);
    chunks.push_back(chunk);
  }
  // 51 chunks of 40 KiB fit a 2 MiB region: 200 take 4 regions.
  EXPECT_EQ(arena.mapped_bytes(), 4 * ChunkArena::kRegionBytes);
  std::set<char*> sorted(chunks.begin(), chunks.end());
  ASSERT_EQ(sorted.size(), chunks.size());
  char* previous_end = nullptr;
  for (char* chunk : sorted) {
    EXPECT_GE(chunk, previous_end) << "chunks overlap";
    previous_end = chunk + kChunk;
    const uintptr_t offset =
        reinterpret_cast<uintptr_t>(chunk) % ChunkArena::kRegionBytes;
    EXPECT_LE(offset + kChunk, ChunkArena::kRegionBytes)
        << "a chunk crosses its region's end";
  }
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(chunks[i][0], static_cast<char>(i & 0xff));
    EXPECT_EQ(chunks[i][kChunk - 1], static_cast<char>(i & 0xff));
  }
  // MADV_HUGEPAGE shows as "hg" among the mapping's flags (where the kernel
  // has transparent huge pages at all).
  if (HasTransparentHugePages()) {
    EXPECT_NE(VmFlagsOf(chunks[0]).find(" hg"), std::string::npos)
        << VmFlagsOf(chunks[0]);
  }
  for (char* chunk : chunks) arena.Free(chunk, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(ChunkArenaTest, AFreedChunkIsReusedAndARegionGoesOnlyWhenEmpty) {
  ChunkArena arena;
  char* first = arena.Allocate(kChunk);
  char* second = arena.Allocate(kChunk);
  arena.Free(first, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), ChunkArena::kRegionBytes);
  EXPECT_EQ(arena.Allocate(kChunk), first);
  arena.Free(first, kChunk);
  arena.Free(second, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(ChunkArenaTest, AChunkComesFromTheFullestRegionWithOneFree) {
  ChunkArena arena;
  constexpr int kPerRegion = ChunkArena::kRegionBytes / kChunk;  // 51
  std::vector<char*> chunks;
  for (int i = 0; i < 3 * kPerRegion; ++i)
    chunks.push_back(arena.Allocate(kChunk));
  const char* a = RegionOf(chunks[0]);
  const char* b = RegionOf(chunks[kPerRegion]);
  const char* c = RegionOf(chunks[2 * kPerRegion]);
  ASSERT_TRUE(a != b && b != c && a != c);
  // Freed into in the order a, b, c, with 41, 5 and 20 chunks free: the
  // fullest, b, is neither the first nor the last to have a free chunk,
  // nor the lowest address (a's, cut first from the span).
  for (int i = 0; i < 41; ++i) arena.Free(chunks[i], kChunk);
  for (int i = 0; i < 5; ++i) arena.Free(chunks[kPerRegion + i], kChunk);
  for (int i = 0; i < 20; ++i) arena.Free(chunks[2 * kPerRegion + i], kChunk);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(RegionOf(arena.Allocate(kChunk)), b) << i;
  // b is full now: c, with 20 free, serves before a, with 41.
  EXPECT_EQ(RegionOf(arena.Allocate(kChunk)), c);
}

TEST(ChunkArenaTest, RegionsShareTheirSpansMapping) {
  ChunkArena arena;
  // 48 regions, each written to: a mapping whose memory was written is not
  // merged with its neighbours, so a mapping per region would hold these
  // chunks in 48 mappings; three spans hold them in three (or fewer, merged).
  constexpr int kRegions = 48;
  constexpr size_t kWholeRegion = ChunkArena::kRegionBytes / 51;
  static_assert(kWholeRegion > ChunkArena::kMaxChunkBytes / 2);
  std::vector<char*> chunks;
  for (int i = 0; i < kRegions * 51; ++i) {
    chunks.push_back(arena.Allocate(kWholeRegion));
    if (i % 51 == 0) chunks.back()[0] = 1;
  }
  EXPECT_EQ(arena.mapped_bytes(), kRegions * ChunkArena::kRegionBytes);
  EXPECT_LE(MappingsHolding(chunks), 3);
  // Emptying every other region leaves the rest in as few mappings.
  std::vector<char*> kept;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if ((i / 51) % 2 == 0) {
      arena.Free(chunks[i], kWholeRegion);
    } else {
      kept.push_back(chunks[i]);
    }
  }
  EXPECT_EQ(arena.mapped_bytes(), kRegions / 2 * ChunkArena::kRegionBytes);
  EXPECT_LE(MappingsHolding(kept), 3);
  for (char* chunk : kept) arena.Free(chunk, kWholeRegion);
}

TEST(ChunkArenaTest, AnEmptiedRegionGivesItsMemoryBackAndIsUsedAgain) {
  ChunkArena arena;
  std::vector<char*> chunks;
  for (int i = 0; i < 51; ++i) {
    chunks.push_back(arena.Allocate(kChunk));
    std::memset(chunks.back(), 1, kChunk);
  }
  const char* region = RegionOf(chunks[0]);
  EXPECT_GT(ResidentPages(region), 0);
  for (char* chunk : chunks) arena.Free(chunk, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
  EXPECT_EQ(ResidentPages(region), 0);
  // The next region, of any chunk size, is the idle one, its memory zeros.
  char* again = arena.Allocate(kChunk + 8);
  EXPECT_EQ(RegionOf(again), region);
  EXPECT_EQ(again[0], 0);
  arena.Free(again, kChunk + 8);
}

TEST(ChunkArenaTest, AnEmptiedRegionIsNoLongerListedForItsSize) {
  ChunkArena arena;
  std::vector<char*> chunks;
  for (int i = 0; i < 3; ++i) chunks.push_back(arena.Allocate(kChunk));
  for (char* chunk : chunks) arena.Free(chunk, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
  // The same size again: one region, listed afresh.
  for (int i = 0; i < 52; ++i) chunks.push_back(arena.Allocate(kChunk));
  EXPECT_EQ(arena.mapped_bytes(), 2 * ChunkArena::kRegionBytes);
  for (size_t i = 3; i < chunks.size(); ++i) arena.Free(chunks[i], kChunk);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(ChunkArenaTest, EachSizeHasRegionsOfItsOwn) {
  ChunkArena arena;
  char* small = arena.Allocate(kChunk);
  char* large = arena.Allocate(kChunk + 8);
  EXPECT_EQ(arena.mapped_bytes(), 2 * ChunkArena::kRegionBytes);
  EXPECT_NE(reinterpret_cast<uintptr_t>(small) / ChunkArena::kRegionBytes,
            reinterpret_cast<uintptr_t>(large) / ChunkArena::kRegionBytes);
  arena.Free(small, kChunk);
  EXPECT_EQ(arena.mapped_bytes(), ChunkArena::kRegionBytes);
  arena.Free(large, kChunk + 8);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(ChunkArenaTest, ChunksOverTheLimitComeFromTheHeap) {
  ChunkArena arena;
  const size_t bytes = ChunkArena::kMaxChunkBytes + 1;
  char* chunk = arena.Allocate(bytes);
  std::memset(chunk, 1, bytes);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
  arena.Free(chunk, bytes);
}

TEST(ChunkArenaTest, ThreadsAllocateAndFreeAtOnce) {
  ChunkArena arena;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      std::vector<char*> mine;
      for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < 30; ++i) {
          char* chunk = arena.Allocate(kChunk);
          chunk[0] = static_cast<char>(t);
          chunk[kChunk - 1] = static_cast<char>(t);
          mine.push_back(chunk);
        }
        for (char* chunk : mine) {
          ASSERT_EQ(chunk[0], static_cast<char>(t));
          ASSERT_EQ(chunk[kChunk - 1], static_cast<char>(t));
        }
        while (mine.size() > 10) {
          arena.Free(mine.back(), kChunk);
          mine.pop_back();
        }
      }
      for (char* chunk : mine) arena.Free(chunk, kChunk);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(ChunkArenaTest, NewChunkFreesItselfIntoTheGlobalArena) {
  const size_t before = ChunkArena::Global().mapped_bytes();
  {
    ChunkArena::Chunk chunk = ChunkArena::NewChunk(kChunk + 16);
    std::memset(chunk.get(), 0, kChunk + 16);
    EXPECT_EQ(ChunkArena::Global().mapped_bytes(),
              before + ChunkArena::kRegionBytes);
  }
  EXPECT_EQ(ChunkArena::Global().mapped_bytes(), before);
}

}  // namespace
}  // namespace ps::embedding
