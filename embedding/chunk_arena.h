// File: embedding/chunk_arena.h
//
// Memory for the hot tier's chunks of rows, on transparent huge pages where
// the kernel offers them. A hot tier is hundreds of megabytes of rows read at
// random; on 4 KiB pages nearly every row read also misses the TLB, which a
// 2 MiB page covers 512 times over (a dim-16 push costs the shard about a
// fifth less CPU: docs/perf-history.md). Linux backs anonymous memory with
// huge pages only where asked (madvise) under the usual setting, and malloc
// does not ask.
//
// The arena cuts 2 MiB regions, aligned to 2 MiB, from spans of
// kRegionsPerSpan regions mapped at once with huge pages asked for
// (MADV_HUGEPAGE; without THP the memory is plain pages and works the same),
// so that the process holds a mapping per span, not per region: Linux caps a
// process's mappings (vm.max_map_count, 65530 by default), which a mapping
// per region reached at about 120 GiB of rows. A region serves one chunk
// size, shared by every table whose rows make chunks of that size; a chunk
// comes from the fullest region of its size that has one free, so that
// emptier regions drain. A region whose chunks are all free gives its memory
// back to the kernel (MADV_DONTNEED) and stays mapped, idle, for the next
// region of any size; spans are unmapped only with the arena. Chunks of
// more than kMaxChunkBytes come from operator new instead.
//
// Thread-safe. Global() lives as long as the process; a chunk is freed with
// the size it was allocated with (ChunkArena::Deleter does both).

#ifndef PS_EMBEDDING_CHUNK_ARENA_H_
#define PS_EMBEDDING_CHUNK_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/huge_pages.h"

namespace ps::embedding {

class ChunkArena {
 public:
  static constexpr size_t kRegionBytes = kHugePageBytes;
  // Regions mapped at once: 32 MiB of address space.
  static constexpr size_t kRegionsPerSpan = 16;
  // The largest chunk cut from a region; larger ones come from new[].
  static constexpr size_t kMaxChunkBytes = size_t{64} << 10;

  // Frees a chunk of `bytes` into the global arena, or with delete[] one
  // that PlainChunk() made.
  struct Deleter {
    size_t bytes = 0;
    bool from_arena = true;
    void operator()(char* chunk) const {
      if (from_arena) {
        Global().Free(chunk, bytes);
      } else {
        delete[] chunk;
      }
    }
  };
  using Chunk = std::unique_ptr<char[], Deleter>;

  ChunkArena() = default;
  ChunkArena(const ChunkArena&) = delete;
  ChunkArena& operator=(const ChunkArena&) = delete;
  ~ChunkArena();

  // The arena every RowCache takes its chunks from.
  static ChunkArena& Global();

  // A chunk of `bytes` (over kMaxChunkBytes / 2: a region serves at most 64),
  // uninitialised; throws std::bad_alloc when there is no memory, as new[]
  // does.
  char* Allocate(size_t bytes);
  // Gives back a chunk Allocate(bytes) returned.
  void Free(char* chunk, size_t bytes);
  // Global().Allocate() into a Chunk that frees itself into Global().
  static Chunk NewChunk(size_t bytes);
  // A chunk from new[], on the heap's pages.
  static Chunk PlainChunk(size_t bytes);

  // Bytes of the regions that hold chunks (chunks over kMaxChunkBytes not
  // included; idle regions hold no memory).
  size_t mapped_bytes() const;

 private:
  // A region that holds chunks.
  struct Region {
    char* start = nullptr;
    size_t chunk_bytes = 0;
    // Bit i set: chunk i is free. At most 64 chunks a region, since a chunk
    // cut from one is over kMaxChunkBytes / 2 (RowCache's chunks are) or, if
    // smaller, only the first 64 are used.
    uint64_t free_mask = 0;
    // While it has a free chunk: its neighbours in its size's list of
    // regions with as many free chunks.
    Region* previous = nullptr;
    Region* next = nullptr;
  };
  // Per chunk size, the regions with a free chunk, by how many: with_free[n]
  // heads the list of those with n free chunks (1 to 64), and bit n - 1 of
  // listed is set while it is not empty. Intrusive lists, so that Free()
  // never allocates (it runs in destructors).
  struct SizeClass {
    Region* with_free[65] = {};
    uint64_t listed = 0;
  };

  // Adds `region` to, or takes it from, its size's lists of regions with a
  // free chunk. REQUIRES: a free chunk.
  void AddFree(Region* region) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveFree(Region* region) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The start of the idle region that the next new region takes (the last
  // of idle_regions_), mapping a span first if none is idle; nullptr when
  // the kernel maps no more.
  char* IdleRegion() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Regions that hold chunks, by their start.
  absl::flat_hash_map<uintptr_t, std::unique_ptr<Region>> regions_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<size_t, SizeClass> sizes_ ABSL_GUARDED_BY(mu_);
  // Starts of mapped regions that hold no chunk (and no memory).
  std::vector<char*> idle_regions_ ABSL_GUARDED_BY(mu_);
  // Every span mapped, unmapped by the destructor.
  std::vector<char*> spans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_CHUNK_ARENA_H_
