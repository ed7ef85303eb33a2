#include "base/key_index.h"

#include <algorithm>

namespace ps {

KeyIndex::KeyIndex(bool huge_pages)
    : slots_(HugePageAllocator<Slot>(huge_pages)) {}

void KeyIndex::Reserve(size_t keys) {
  // Erased slots count as keys until a rehash drops them.
  const size_t capacity = SlotsFor(keys + (used_ - size_));
  if (capacity > slots_.size()) Rehash(capacity);
}

void KeyIndex::Reset(size_t keys) {
  const size_t capacity = SlotsFor(keys);
  if (slots_.size() >= capacity && slots_.size() <= 4 * capacity) {
    std::fill(slots_.begin(), slots_.end(), Slot{0, kEmpty});
    size_ = 0;
    used_ = 0;
    return;
  }
  // Too few slots, or so many that emptying them would cost more than
  // the keys: new ones.
  slots_.clear();
  size_ = 0;
  used_ = 0;
  Rehash(capacity);
}

bool KeyIndex::Erase(uint64_t key) {
  if (slots_.empty()) return false;
  for (size_t i = HomeSlot(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.stored == kEmpty) return false;
    if (slot.stored != kErased && slot.key == key) {
      slot.stored = kErased;
      --size_;
      return true;
    }
  }
}

void KeyIndex::Rehash(size_t capacity) {
  // Built aside: if the allocation throws, the index is as it was.
  std::vector<Slot, HugePageAllocator<Slot>> slots(capacity, Slot{0, kEmpty},
                                                   slots_.get_allocator());
  size_t mask = capacity - 1;
  int shift = 64;
  for (size_t c = capacity; c > 1; c /= 2) --shift;
  for (const Slot& slot : slots_) {
    if (slot.stored < kBias) continue;
    size_t i = static_cast<size_t>((slot.key * kFibonacci) >> shift);
    while (slots[i].stored != kEmpty) i = (i + 1) & mask;
    slots[i] = slot;
  }
  slots_.swap(slots);
  mask_ = mask;
  shift_ = shift;
  used_ = size_;
}

}  // namespace ps
