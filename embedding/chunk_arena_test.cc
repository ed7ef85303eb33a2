#include "embedding/chunk_arena.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

constexpr size_t kChunk = 40 << 10;  // like a dim-16 Adagrad slab's chunks

// The VmFlags line of the mapping of /proc/self/smaps that holds `address`.
std::string VmFlagsOf(const void* address) {
  const uintptr_t wanted = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::vector<std::string> range =
        absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin, end;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &begin) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      inside = wanted >= begin && wanted < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
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
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good()) {
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
