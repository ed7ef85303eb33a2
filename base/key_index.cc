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
  // Erased slots lengthen probes as keys do: when three quarters of the
  // slots are taken, twice as many if over three eighths hold keys, else
  // as many again without the erasures.
  if (4 * (used_ + 1) > 3 * slots_.size()) {
    size_t capacity = slots_.empty() ? 16 : slots_.size();
    if (8 * (size_ + 1) > 3 * capacity) capacity *= 2;
    Rehash(capacity);
  }
  size_t erased = slots_.size();
  for (size_t i = HomeSlot(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.stored == kEmpty) {
      // Not there: into the first erased slot on the way, else this one.
      Slot& target = erased < slots_.size() ? slots_[erased] : slot;
      if (&target == &slot) ++used_;
      target = Slot{key, value + kBias};
      ++size_;
      return {value, true};
    }
    if (slot.stored == kErased) {
      if (erased == slots_.size()) erased = i;
    } else if (slot.key == key) {
      return {slot.stored - kBias, false};
    }
  }
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
  std::vector<Slot, HugePageAllocator<Slot>> old(slots_.get_allocator());
  old.swap(slots_);
  slots_.assign(capacity, Slot{0, kEmpty});
  mask_ = capacity - 1;
  shift_ = 64;
  for (size_t c = capacity; c > 1; c /= 2) --shift_;
  used_ = size_;
  for (const Slot& slot : old) {
    if (slot.stored < kBias) continue;
    size_t i = HomeSlot(slot.key);
    while (slots_[i].stored != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

}  // namespace ps
