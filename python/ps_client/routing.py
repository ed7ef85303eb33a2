"""Which shard owns a key: the same mapping as base/routing.h."""

NUM_SLOTS = 16384
_MASK = (1 << 64) - 1


def slot_for_key(key):
    """The slot of a 64-bit key, in [0, NUM_SLOTS): splitmix64's finalizer,
    then the remainder (keys are XXH3 hashes already; the finalizer keeps
    slots uniform for keys picked by hand)."""
    if not 0 <= key <= _MASK:
        raise ValueError(f"key {key} is not a 64-bit unsigned integer")
    key ^= key >> 30
    key = (key * 0xbf58476d1ce4e5b9) & _MASK
    key ^= key >> 27
    key = (key * 0x94d049bb133111eb) & _MASK
    key ^= key >> 31
    return key % NUM_SLOTS


def shard_for_slot(slot_map, slot):
    """The shard a SlotMapSpec gives `slot` to; ValueError if none does."""
    for each in slot_map.ranges:
        if each.first <= slot <= each.last:
            return each.shard
    raise ValueError(f"slot {slot} is in no range of the slot map "
                     f"(epoch {slot_map.epoch})")
