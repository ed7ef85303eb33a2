// ReplicationFeed: a deque of the entries after the least-applied
// follower's position, under one mutex.

#include "embedding/replication_feed.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps::embedding {
namespace {

// How often a wait looks for followers that timed out.
constexpr absl::Duration kExpirySlice = absl::Milliseconds(100);

}  // namespace

ReplicationFeed::ReplicationFeed(const ReplicationFeedOptions& options)
    : options_(options),
      id_(absl::Uniform<uint64_t>(absl::BitGen(), 1,
                                  std::numeric_limits<uint64_t>::max())) {}

uint64_t ReplicationFeed::AppendPush(absl::string_view table,
                                     absl::string_view record) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = ++head_;
  if (followers_.empty()) {
    first_kept_ = head_ + 1;
    return sequence;
  }
  FeedEntry& entry = entries_.emplace_back();
  entry.set_sequence(sequence);
  entry.set_kind(FeedEntry::PUSH);
  entry.set_table(std::string(table));
  entry.set_record(std::string(record));
  return sequence;
}

uint64_t ReplicationFeed::Append(FeedEntry entry) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = ++head_;
  if (followers_.empty()) {
    first_kept_ = head_ + 1;
    return sequence;
  }
  entry.set_sequence(sequence);
  entries_.push_back(std::move(entry));
  return sequence;
}

uint64_t ReplicationFeed::head() const {
  absl::MutexLock lock(&mu_);
  return head_;
}

uint64_t ReplicationFeed::AddFollower(uint64_t* start) {
  absl::MutexLock lock(&mu_);
  *start = head_;
  const uint64_t id = next_follower_++;
  followers_[id] = Follower{head_, absl::Now()};
  return id;
}

void ReplicationFeed::RemoveFollower(uint64_t follower) {
  absl::MutexLock lock(&mu_);
  followers_.erase(follower);
  PruneLocked();
}

absl::Status ReplicationFeed::Read(uint64_t follower, uint64_t applied,
                                   size_t max_entries, absl::Duration wait,
                                   std::vector<FeedEntry>* out) {
  out->clear();
  const absl::Time deadline = absl::Now() + wait;
  absl::MutexLock lock(&mu_);
  ExpireLocked(absl::Now());
  auto it = followers_.find(follower);
  if (it == followers_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "follower ", follower, " is not following this feed (it was ",
        "dropped after ", absl::FormatDuration(options_.follower_timeout),
        " without a read, or the primary restarted): copy it again"));
  }
  if (applied > head_) {
    return absl::InvalidArgumentError(
        absl::StrCat("applied through entry ", applied,
                     ", but the feed's newest is ", head_));
  }
  it->second.applied = std::max(it->second.applied, applied);
  it->second.last_read = absl::Now();
  const uint64_t from = it->second.applied;
  if (from == head_) it->second.in_sync = true;
  PruneLocked();
  auto has_more = [this, from]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return head_ > from;
  };
  if (!has_more()) {
    mu_.AwaitWithDeadline(absl::Condition(&has_more), deadline);
  }
  // Entries after `from` are kept: `from` is at least the least applied,
  // and the follower stayed registered (a wait shorter than the timeout;
  // only another Read or ExpireLocked() may drop it, and it just read).
  for (uint64_t sequence = from + 1;
       sequence <= head_ && out->size() < max_entries; ++sequence) {
    if (sequence < first_kept_) break;  // dropped meanwhile: none to give
    out->push_back(entries_[sequence - first_kept_]);
  }
  return absl::OkStatus();
}

bool ReplicationFeed::WaitApplied(uint64_t sequence, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto applied = [this, sequence]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return LeastAppliedLocked(/*in_sync_only=*/true) >= sequence;
  };
  return AwaitLocked(absl::Condition(&applied), deadline);
}

bool ReplicationFeed::WaitLagAtMost(uint64_t max_lag, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto within = [this, max_lag]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return head_ - LeastAppliedLocked() <= max_lag;
  };
  return AwaitLocked(absl::Condition(&within), deadline);
}

ReplicationFeed::Stats ReplicationFeed::GetStats() {
  absl::MutexLock lock(&mu_);
  ExpireLocked(absl::Now());
  Stats stats;
  stats.followers = static_cast<uint32_t>(followers_.size());
  for (const auto& [id, follower] : followers_)
    stats.in_sync += follower.in_sync;
  stats.head = head_;
  stats.applied = LeastAppliedLocked();
  stats.entries_kept = entries_.size();
  return stats;
}

bool ReplicationFeed::AwaitLocked(const absl::Condition& done,
                                  absl::Time deadline) {
  while (true) {
    ExpireLocked(absl::Now());
    if (done.Eval()) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    mu_.AwaitWithDeadline(done, std::min(deadline, now + kExpirySlice));
  }
}

void ReplicationFeed::ExpireLocked(absl::Time now) {
  bool dropped = false;
  for (auto it = followers_.begin(); it != followers_.end();) {
    if (now - it->second.last_read > options_.follower_timeout) {
      followers_.erase(it++);
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped) PruneLocked();
}

void ReplicationFeed::PruneLocked() {
  const uint64_t keep_after = LeastAppliedLocked();
  while (!entries_.empty() && first_kept_ <= keep_after) {
    entries_.pop_front();
    ++first_kept_;
  }
  if (entries_.empty()) first_kept_ = head_ + 1;
}

uint64_t ReplicationFeed::LeastAppliedLocked(bool in_sync_only) const {
  uint64_t least = head_;
  for (const auto& [id, follower] : followers_) {
    if (in_sync_only && !follower.in_sync) continue;
    least = std::min(least, follower.applied);
  }
  return least;
}

}  // namespace ps::embedding
