// AllKeysDistinct(): a table of key slots, zero meaning empty (key 0 is
// tracked apart), sized to a power of two at least four times the keys:
// a quarter full at most, so a random key rarely finds its home slot taken
// and its probe rarely mispredicts a branch. micro_bench's BM_DistinctKeys
// compares it with the absl::flat_hash_map a push would build instead.

#include "embedding/distinct_keys.h"

#include <memory>

#include "absl/container/flat_hash_set.h"

namespace ps::embedding {
namespace {

// Slots past a key's home slot that a request's probes may read, per key
// on average, before the table is given up for a flat_hash_set: random
// keys read fewer than 0.2.
constexpr size_t kMaxProbesPerKey = 8;

bool AllKeysDistinctBySet(absl::Span<const uint64_t> keys) {
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(keys.size());
  for (uint64_t key : keys) {
    if (!seen.insert(key).second) return false;
  }
  return true;
}

}  // namespace

bool AllKeysDistinct(absl::Span<const uint64_t> keys) {
  if (keys.size() < 2) return true;
  int bits = 1;
  while ((size_t{1} << bits) < 4 * keys.size()) ++bits;
  const size_t mask = (size_t{1} << bits) - 1;
  std::unique_ptr<uint64_t[]> slots(new uint64_t[mask + 1]());
  bool zero_seen = false;
  size_t probes_left = kMaxProbesPerKey * keys.size();
  for (uint64_t key : keys) {
    if (key == 0) {
      if (zero_seen) return false;
      zero_seen = true;
      continue;
    }
    // Fibonacci hashing: the top bits of the key times 2^64 / phi.
    size_t slot = (key * 0x9E3779B97F4A7C15ULL) >> (64 - bits);
    while (slots[slot] != 0) {
      if (slots[slot] == key) return false;
      if (--probes_left == 0) return AllKeysDistinctBySet(keys);
      slot = (slot + 1) & mask;
    }
    slots[slot] = key;
  }
  return true;
}

}  // namespace ps::embedding
