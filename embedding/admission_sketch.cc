#include "embedding/admission_sketch.h"

#include <algorithm>

namespace ps::embedding {
namespace {

// splitmix64's finalizer over the key and a per-row seed: keys are hashes
// already, but tests and users also pick small keys by hand.
uint64_t Mix(uint64_t key, uint64_t seed) {
  key ^= seed;
  key ^= key >> 30;
  key *= 0xbf58476d1ce4e5b9ULL;
  key ^= key >> 27;
  key *= 0x94d049bb133111ebULL;
  key ^= key >> 31;
  return key;
}

constexpr uint64_t kSeeds[AdmissionSketch::kDepth] = {
    0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
    0x27d4eb2f165667c5ULL};

}  // namespace

AdmissionSketch::AdmissionSketch(size_t bytes, uint32_t threshold)
    : width_(std::max<size_t>(bytes / kDepth, 64)),
      threshold_(std::clamp<uint32_t>(threshold, 2, 255)),
      counters_(new std::atomic<uint8_t>[kDepth * width_]) {
  for (size_t i = 0; i < kDepth * width_; ++i)
    counters_[i].store(0, std::memory_order_relaxed);
}

size_t AdmissionSketch::Index(int row, uint64_t key) const {
  return row * width_ + Mix(key, kSeeds[row]) % width_;
}

uint32_t AdmissionSketch::Count(uint64_t key) const {
  uint32_t count = 255;
  for (int row = 0; row < kDepth; ++row) {
    count = std::min<uint32_t>(
        count, counters_[Index(row, key)].load(std::memory_order_relaxed));
  }
  return count;
}

void AdmissionSketch::Age() {
  for (size_t i = 0; i < kDepth * width_; ++i) {
    counters_[i].store(counters_[i].load(std::memory_order_relaxed) >> 1,
                       std::memory_order_relaxed);
  }
}

bool AdmissionSketch::WouldAdmit(uint64_t key) const {
  const uint32_t count = Count(key);
  return count == 255 || count + 1 >= threshold_;
}

bool AdmissionSketch::CountAndAdmit(uint64_t key) {
  const bool admit = WouldAdmit(key);
  CountPush(key);
  return admit;
}

void AdmissionSketch::CountPush(uint64_t key) {
  if (counted_.fetch_add(1, std::memory_order_relaxed) + 1 == width_) {
    counted_.store(0, std::memory_order_relaxed);
    Age();
  }
  size_t index[kDepth];
  uint8_t value[kDepth];
  uint8_t smallest = 255;
  for (int row = 0; row < kDepth; ++row) {
    index[row] = Index(row, key);
    value[row] = counters_[index[row]].load(std::memory_order_relaxed);
    smallest = std::min(smallest, value[row]);
  }
  if (smallest == 255) return;
  // Conservative update: only the counters at the minimum grow, which keeps
  // the others from counting this key twice.
  for (int row = 0; row < kDepth; ++row) {
    uint8_t expected = value[row];
    while (expected <= smallest &&
           !counters_[index[row]].compare_exchange_weak(
               expected, static_cast<uint8_t>(smallest + 1),
               std::memory_order_relaxed)) {
    }
  }
}

}  // namespace ps::embedding
