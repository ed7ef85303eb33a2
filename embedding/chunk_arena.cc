#include "embedding/chunk_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "glog/logging.h"

namespace ps::embedding {
namespace {

// Maps kRegionBytes aligned to kRegionBytes (a huge page can only back an
// aligned 2 MiB), or returns nullptr.
char* MapRegion() {
  constexpr size_t kRegion = ChunkArena::kRegionBytes;
  void* mapped = mmap(nullptr, 2 * kRegion, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (begin + kRegion - 1) & ~(kRegion - 1);
  // Give back what lies outside the aligned region.
  if (aligned > begin) munmap(mapped, aligned - begin);
  const uintptr_t end = begin + 2 * kRegion;
  if (end > aligned + kRegion)
    munmap(reinterpret_cast<void*>(aligned + kRegion),
           end - (aligned + kRegion));
  char* region = reinterpret_cast<char*>(aligned);
  // Advice only: where THP is off the region is plain pages.
  madvise(region, kRegion, MADV_HUGEPAGE);
  return region;
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
  for (auto& [start, region] : regions_) munmap(region->start, kRegionBytes);
}

ChunkArena& ChunkArena::Global() {
  static ChunkArena* const arena = new ChunkArena;
  return *arena;
}

ChunkArena::Chunk ChunkArena::NewChunk(size_t bytes) {
  return Chunk(Global().Allocate(bytes), Deleter{bytes});
}

void ChunkArena::AddFree(Region* region) {
  std::vector<Region*>& regions = with_free_[region->chunk_bytes];
  region->free_position = regions.size();
  regions.push_back(region);
}

void ChunkArena::RemoveFree(Region* region) {
  std::vector<Region*>& regions = with_free_[region->chunk_bytes];
  Region* last = regions.back();
  regions[region->free_position] = last;
  last->free_position = region->free_position;
  regions.pop_back();
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
  const std::vector<Region*>& candidates = with_free_[bytes];
  if (candidates.empty()) {
    char* start = MapRegion();
    if (start == nullptr) throw std::bad_alloc();
    auto region = std::make_unique<Region>();
    region->start = start;
    region->chunk_bytes = bytes;
    region->free_mask = AllFree(bytes);
    AddFree(region.get());
    regions_[reinterpret_cast<uintptr_t>(start)] = std::move(region);
  }
  // The lowest free chunk of a region that has one.
  Region* region = candidates.back();
  const int chunk = __builtin_ctzll(region->free_mask);
  region->free_mask &= region->free_mask - 1;
  if (region->free_mask == 0) RemoveFree(region);
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
  if (region->free_mask == 0) AddFree(region);
  region->free_mask |= uint64_t{1} << index;
  if (region->free_mask != AllFree(bytes)) return;
  RemoveFree(region);
  munmap(region->start, kRegionBytes);
  regions_.erase(it);
}

size_t ChunkArena::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  return regions_.size() * kRegionBytes;
}

}  // namespace ps::embedding
