// File: embedding/dropped_row_log.h
//
// DroppedRowLog remembers, in bounded memory, which stored rows a shard
// dropped for good and when: expired rows that RocksDB's compactions remove
// (TableSpec.row_ttl_s). A delta export (StoreSnapshots::Export with
// `changed_since_s`) lists them, so that a serving process that loaded an
// earlier export forgets them too.
//
// It holds at most `max_rows` entries (16 bytes each); past that the oldest
// go, and the log is complete only from the time of the newest entry that
// went. A new log (a store just opened) is complete from `complete_since_s`:
// what an earlier process dropped is not known, and a delta since before
// then is refused.
//
// Thread-safe: compactions record from RocksDB's threads while exports read.

#ifndef PS_EMBEDDING_DROPPED_ROW_LOG_H_
#define PS_EMBEDDING_DROPPED_ROW_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps::embedding {

class DroppedRowLog {
 public:
  // REQUIRES: max_rows > 0.
  DroppedRowLog(size_t max_rows, uint32_t complete_since_s)
      : max_rows_(max_rows), complete_since_s_(complete_since_s) {}

  // Records that row `key` of table `table` (a TableId) was dropped at
  // `when_s` (Unix seconds).
  void Record(uint32_t table, uint64_t key, uint32_t when_s);

  // The keys of `table` dropped at or after `since_s`, in the order they
  // were recorded (a key may repeat). FAILED_PRECONDITION, naming the time
  // the log is complete from, when `since_s` is before it.
  absl::StatusOr<std::vector<uint64_t>> DroppedSince(uint32_t table,
                                                     uint32_t since_s) const;

  // The log holds every row dropped at or after this time.
  uint32_t complete_since_s() const;
  size_t size() const;

 private:
  struct Entry {
    uint64_t key;
    uint32_t table;
    uint32_t when_s;
  };

  const size_t max_rows_;
  mutable absl::Mutex mu_;
  uint32_t complete_since_s_ ABSL_GUARDED_BY(mu_);
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_DROPPED_ROW_LOG_H_
