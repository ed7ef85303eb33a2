// File: embedding/admission_sketch.h
//
// AdmissionSketch counts how often each key of a table was pushed before the
// table stores it, in a fixed amount of memory, so that a key can be admitted
// only once it has been pushed `threshold` times (TableSpec.admit_after):
// most keys of a click log are seen once, and storing those costs memory and
// disk for rows that never train.
//
// It is a count-min sketch (Cormode and Muthukrishnan, 2005): kDepth rows of
// `width` saturating 8-bit counters; a key increments one counter per row
// (only those at the row minimum: conservative update) and its count is the
// smallest of them. A count is never below the true one. It is above it
// only through collisions: by more than e * N / width with probability at
// most e^-kDepth (under 2%), N being the pushes of keys not yet admitted
// that the sketch has counted. So a key may be admitted early, never late.
// Counts age: after every `width` pushes counted, every counter is halved
// (as TinyLFU's sketch is), so N stays below 2 * width and a key must
// gather its pushes within a few million others' rather than over the
// shard's life; without aging an endless stream would saturate the sketch
// and admit every key at its first push. Counts live in memory and start
// over when the shard restarts.
//
// Thread-safe: counters are relaxed atomics. Two pushes of one key at the
// same instant may count once, which admits it a push later.

#ifndef PS_EMBEDDING_ADMISSION_SKETCH_H_
#define PS_EMBEDDING_ADMISSION_SKETCH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ps::embedding {

class AdmissionSketch {
 public:
  static constexpr int kDepth = 4;

  // A sketch of about `bytes` (at least kDepth * 64) that admits a key at
  // its `threshold`-th push. REQUIRES: 2 <= threshold <= 255.
  AdmissionSketch(size_t bytes, uint32_t threshold);

  // Whether one more push of `key` reaches the threshold (that push
  // included), when the caller stores the key. Counts nothing.
  bool WouldAdmit(uint64_t key) const;

  // Counts one push of `key`: called once the push is applied, so that a
  // push refused (and retried) counts once.
  void CountPush(uint64_t key);

  // CountPush(), returning what WouldAdmit() said before it.
  bool CountAndAdmit(uint64_t key);

  // The key's count so far (saturates at 255).
  uint32_t Count(uint64_t key) const;

  size_t bytes() const { return kDepth * width_; }
  uint32_t threshold() const { return threshold_; }

 private:
  size_t Index(int row, uint64_t key) const;
  // Halves every counter.
  void Age();

  const size_t width_;
  // Pushes counted since the last Age().
  std::atomic<uint64_t> counted_{0};
  const uint32_t threshold_;
  std::unique_ptr<std::atomic<uint8_t>[]> counters_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_ADMISSION_SKETCH_H_
