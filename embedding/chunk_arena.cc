#include "embedding/chunk_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "glog/logging.h"

namespace ps::embedding {
namespace {

// Maps kRegionsPerSpan regions, the first aligned to kRegionBytes (a huge
// page can only back an aligned 2 MiB), or returns nullptr.
char* MapSpan() {
  constexpr size_t kRegion = ChunkArena::kRegionBytes;
  constexpr size_t kSpan = kRegion * ChunkArena::kRegionsPerSpan;
  void* mapped = mmap(nullptr, kSpan + kRegion, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (begin + kRegion - 1) & ~(kRegion - 1);
  // Give back what lies outside the aligned span.
  if (aligned > begin) munmap(mapped, aligned - begin);
  const uintptr_t end = begin + kSpan + kRegion;
  if (end > aligned + kSpan)
    munmap(reinterpret_cast<void*>(aligned + kSpan), end - (aligned + kSpan));
  char* span = reinterpret_cast<char*>(aligned);
  // Advice only: where THP is off the span is plain pages.
  madvise(span, kSpan, MADV_HUGEPAGE);
  return span;
}

// The free mask of a region of `chunk_bytes` chunks none of which is used:
// a bit per chunk, at most 64.
uint64_t AllFree(size_t chunk_bytes) {
  const size_t chunks =
      std::min<size_t>(ChunkArena::kRegionBytes / chunk_bytes, 64);
  return chunks == 64 ? ~uint64_t{0} : (uint64_t{1} << chunks) - 1;
}

}  // namespace

ChunkArena::~ChunkArena() {
  for (char* span : spans_) munmap(span, kRegionBytes * kRegionsPerSpan);
}

ChunkArena& ChunkArena::Global() {
  static ChunkArena* const arena = new ChunkArena;
  return *arena;
}

ChunkArena::Chunk ChunkArena::NewChunk(size_t bytes) {
  return Chunk(Global().Allocate(bytes), Deleter{bytes});
}

void ChunkArena::AddFree(Region* region) {
  std::vector<Region*>& regions =
      sizes_[region->chunk_bytes]
          .with_free[__builtin_popcountll(region->free_mask)];
  region->free_position = regions.size();
  regions.push_back(region);
}

void ChunkArena::RemoveFree(Region* region) {
  std::vector<Region*>& regions =
      sizes_[region->chunk_bytes]
          .with_free[__builtin_popcountll(region->free_mask)];
  Region* last = regions.back();
  regions[region->free_position] = last;
  last->free_position = region->free_position;
  regions.pop_back();
}

char* ChunkArena::TakeIdleRegion() {
  if (idle_regions_.empty()) {
    char* span = MapSpan();
    if (span == nullptr) return nullptr;
    spans_.push_back(span);
    // Taken from the back: the span's first region first.
    for (size_t i = kRegionsPerSpan; i-- > 0;)
      idle_regions_.push_back(span + i * kRegionBytes);
  }
  char* start = idle_regions_.back();
  idle_regions_.pop_back();
  return start;
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
  for (std::vector<Region*>& regions : size.with_free) {
    if (!regions.empty()) {
      region = regions.back();
      break;
    }
  }
  if (region == nullptr) {
    char* start = TakeIdleRegion();
    if (start == nullptr) throw std::bad_alloc();
    auto owned = std::make_unique<Region>();
    region = owned.get();
    region->start = start;
    region->chunk_bytes = bytes;
    region->free_mask = AllFree(bytes);
    AddFree(region);
    regions_[reinterpret_cast<uintptr_t>(start)] = std::move(owned);
  }
  // Its lowest free chunk.
  RemoveFree(region);
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
