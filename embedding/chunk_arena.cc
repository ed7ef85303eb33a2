#include "embedding/chunk_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "base/huge_pages.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// The free mask of a region of `chunk_bytes` chunks none of which is used:
// a bit per chunk, at most 64.
uint64_t AllFree(size_t chunk_bytes) {
  const size_t chunks =
      std::min<size_t>(ChunkArena::kRegionBytes / chunk_bytes, 64);
  return chunks == 64 ? ~uint64_t{0} : (uint64_t{1} << chunks) - 1;
}

}  // namespace

ChunkArena::~ChunkArena() {
  for (char* span : spans_)
    UnmapHugePages(span, kRegionBytes * kRegionsPerSpan);
}

ChunkArena& ChunkArena::Global() {
  static ChunkArena* const arena = new ChunkArena;
  return *arena;
}

ChunkArena::Chunk ChunkArena::NewChunk(size_t bytes) {
  return Chunk(Global().Allocate(bytes), Deleter{bytes});
}

void ChunkArena::AddFree(Region* region) {
  SizeClass& size = sizes_[region->chunk_bytes];
  const int free_chunks = __builtin_popcountll(region->free_mask);
  Region*& head = size.with_free[free_chunks];
  region->previous = nullptr;
  region->next = head;
  if (head != nullptr) head->previous = region;
  head = region;
  size.listed |= uint64_t{1} << (free_chunks - 1);
}

void ChunkArena::RemoveFree(Region* region) {
  SizeClass& size = sizes_[region->chunk_bytes];
  const int free_chunks = __builtin_popcountll(region->free_mask);
  if (region->previous != nullptr) {
    region->previous->next = region->next;
  } else {
    size.with_free[free_chunks] = region->next;
  }
  if (region->next != nullptr) region->next->previous = region->previous;
  if (size.with_free[free_chunks] == nullptr)
    size.listed &= ~(uint64_t{1} << (free_chunks - 1));
}

char* ChunkArena::IdleRegion() {
  if (idle_regions_.empty()) {
    // A span's regions share its mapping and its MADV_HUGEPAGE advice.
    char* span =
        static_cast<char*>(MapHugePages(kRegionBytes * kRegionsPerSpan));
    if (span == nullptr) return nullptr;
    spans_.push_back(span);
    // Free() returns regions here: room for all of them now, so that it
    // never allocates.
    idle_regions_.reserve(spans_.size() * kRegionsPerSpan);
    // Taken from the back: the span's first region first.
    for (size_t i = kRegionsPerSpan; i-- > 0;)
      idle_regions_.push_back(span + i * kRegionBytes);
  }
  return idle_regions_.back();
}

ChunkArena::Chunk ChunkArena::PlainChunk(size_t bytes) {
  return Chunk(new char[bytes], Deleter{bytes, /*from_arena=*/false});
}

char* ChunkArena::Allocate(size_t bytes) {
  if (bytes > kMaxChunkBytes) return new char[bytes];
  // A region serves at most 64 chunks: smaller ones would leave most of it
  // unused (RowCache's are over half of kMaxChunkBytes).
  DCHECK_GT(bytes, kMaxChunkBytes / 2);
  absl::MutexLock lock(&mu_);
  // The fullest region with a free chunk.
  SizeClass& size = sizes_[bytes];
  Region* region = nullptr;
  if (size.listed != 0) {
    region = size.with_free[__builtin_ctzll(size.listed) + 1];
    RemoveFree(region);
  } else {
    char* start = IdleRegion();
    if (start == nullptr) throw std::bad_alloc();
    auto owned = std::make_unique<Region>();
    region = owned.get();
    region->start = start;
    region->chunk_bytes = bytes;
    region->free_mask = AllFree(bytes);
    // Taken from the idle ones only once listed (the insert may throw).
    const bool inserted =
        regions_
            .try_emplace(reinterpret_cast<uintptr_t>(start), std::move(owned))
            .second;
    DCHECK(inserted) << "an idle region that holds chunks";
    idle_regions_.pop_back();
  }
  // Its lowest free chunk.
  const int chunk = __builtin_ctzll(region->free_mask);
  region->free_mask &= region->free_mask - 1;
  if (region->free_mask != 0) AddFree(region);
  return region->start + static_cast<size_t>(chunk) * bytes;
}

void ChunkArena::Free(char* chunk, size_t bytes) {
  if (chunk == nullptr) return;
  if (bytes > kMaxChunkBytes) {
    delete[] chunk;
    return;
  }
  const uintptr_t start =
      reinterpret_cast<uintptr_t>(chunk) & ~(kRegionBytes - 1);
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(start);
  CHECK(it != regions_.end()) << "freeing a chunk the arena did not allocate";
  Region* region = it->second.get();
  DCHECK_EQ(region->chunk_bytes, bytes);
  const size_t index = (chunk - region->start) / bytes;
  DCHECK_EQ(region->free_mask & (uint64_t{1} << index), 0u) << "double free";
  if (region->free_mask != 0) RemoveFree(region);
  region->free_mask |= uint64_t{1} << index;
  if (region->free_mask != AllFree(bytes)) {
    AddFree(region);
    return;
  }
  // Its memory goes back to the kernel; the mapping stays, for the next
  // region (a munmap here would split the span's mapping in two).
  madvise(region->start, kRegionBytes, MADV_DONTNEED);
  idle_regions_.push_back(region->start);
  regions_.erase(it);
}

size_t ChunkArena::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  return regions_.size() * kRegionBytes;
}

}  // namespace ps::embedding
