#include "base/key_index.h"

#include <cassert>

namespace ps {

KeyIndex::KeyIndex(bool huge_pages)
    : slots_(HugePageAllocator<Slot>(huge_pages)) {}

void KeyIndex::Reserve(size_t keys) {
  const size_t capacity = SlotsFor(keys);
  if (capacity > slots_.size()) Rehash(capacity);
}

std::pair<uint64_t, bool> KeyIndex::TryEmplace(uint64_t key, uint64_t value) {
  assert(value <= kMaxValue);
  if (slots_.empty()) Rehash(SlotsFor(0));
  size_t first_erased = slots_.size();
  size_t i = HomeSlot(key);
  for (;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.stored == kEmpty) break;
    if (slot.stored == kErased) {
      if (first_erased == slots_.size()) first_erased = i;
    } else if (slot.key == key) {
      return {slot.stored - kBias, false};
    }
  }
  if (first_erased < slots_.size()) {
    // Not there: into the first erased slot on the way, using up nothing.
    slots_[first_erased] = Slot{key, value + kBias};
  } else {
    // Into the empty slot that ended the probe, unless that would fill
    // over three quarters of the slots (erased ones lengthen probes as keys
    // do): then twice as many slots if over three eighths hold keys, else
    // as many again without the erasures, and the probe anew.
    if (4 * (used_ + 1) > 3 * slots_.size()) {
      size_t capacity = slots_.size();
      if (8 * (size_ + 1) > 3 * capacity) capacity *= 2;
      Rehash(capacity);
      for (i = HomeSlot(key); slots_[i].stored != kEmpty; i = (i + 1) & mask_) {
      }
    }
    slots_[i] = Slot{key, value + kBias};
    ++used_;
  }
  ++size_;
  return {value, true};
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
