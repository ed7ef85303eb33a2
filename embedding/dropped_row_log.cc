#include "embedding/dropped_row_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps::embedding {

void DroppedRowLog::Record(uint32_t table, uint64_t key, uint32_t when_s) {
  absl::MutexLock lock(&mu_);
  if (entries_.size() >= max_rows_) {
    // Whatever was dropped up to the entry that goes is no longer known
    // whole; entries are recorded in time order but for compactions that
    // overlap, hence the max.
    complete_since_s_ =
        std::max(complete_since_s_, entries_.front().when_s + 1);
    entries_.pop_front();
  }
  entries_.push_back(Entry{key, table, when_s});
}

absl::StatusOr<std::vector<uint64_t>> DroppedRowLog::DroppedSince(
    uint32_t table, uint32_t since_s) const {
  absl::MutexLock lock(&mu_);
  if (since_s < complete_since_s_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the rows this shard dropped are known only since ", complete_since_s_,
        " (Unix seconds; the shard started then, or more ",
        "rows expired than --max_dropped_rows_remembered keeps), not since ",
        since_s));
  }
  std::vector<uint64_t> keys;
  for (const Entry& entry : entries_) {
    if (entry.table == table && entry.when_s >= since_s)
      keys.push_back(entry.key);
  }
  return keys;
}

uint32_t DroppedRowLog::complete_since_s() const {
  absl::MutexLock lock(&mu_);
  return complete_since_s_;
}

size_t DroppedRowLog::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace ps::embedding
