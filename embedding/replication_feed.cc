// ReplicationFeed: a deque of the entries after the least-applied
// follower's position, under one mutex, and a thread that answers waits.

#include "embedding/replication_feed.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// How often the waiter thread looks at deadlines and followers that timed
// out when nothing else wakes it.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

// What an entry kept takes in memory, about: its bytes and the deque's
// share.
uint64_t EntryBytes(const FeedEntry& entry) {
  return entry.table().size() + entry.record().size() +
         entry.slot_keys().size() + entry.slot_floats().size() +
         entry.slot_metas().size() + sizeof(FeedEntry);
}

}  // namespace

ReplicationFeed::ReplicationFeed(const ReplicationFeedOptions& options)
    : options_(options),
      id_(absl::Uniform<uint64_t>(absl::BitGen(), 1,
                                  std::numeric_limits<uint64_t>::max())),
      waiter_([this] { RunWaits(); }) {}

ReplicationFeed::~ReplicationFeed() {
  CancelWaits(absl::Now());
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  waiter_.join();
}

uint64_t ReplicationFeed::AppendPush(absl::string_view table,
                                     absl::string_view record) {
  return AppendMade([&] {
    FeedEntry entry;
    entry.set_kind(FeedEntry::PUSH);
    entry.set_table(std::string(table));
    entry.set_record(std::string(record));
    return entry;
  });
}

uint64_t ReplicationFeed::Append(FeedEntry entry) {
  return AppendMade([&] { return std::move(entry); });
}

uint64_t ReplicationFeed::AppendMade(absl::FunctionRef<FeedEntry()> make) {
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = ++head_;
  changed_ = true;
  if (followers_.empty()) {
    first_kept_ = head_ + 1;
    return sequence;
  }
  FeedEntry& entry = entries_.emplace_back(make());
  entry.set_sequence(sequence);
  bytes_kept_ += EntryBytes(entry);
  if (bytes_kept_ > options_.max_bytes_kept) DropFollowersBehindLocked();
  return sequence;
}

void ReplicationFeed::DropFollowersBehindLocked() {
  while (bytes_kept_ > options_.max_bytes_kept) {
    // Only a copy is dropped: a replica reading the feed holds pushes back
    // instead (ReplicatedLocked()). And only one behind every reader: the
    // entries after the furthest reader behind stay for it anyway.
    uint64_t least_read = head_;
    for (const auto& [id, follower] : followers_)
      if (follower.reading) least_read = std::min(least_read, follower.applied);
    auto behind = followers_.end();
    for (auto it = followers_.begin(); it != followers_.end(); ++it) {
      if (it->second.reading || it->second.applied >= least_read) continue;
      if (behind == followers_.end() ||
          it->second.applied < behind->second.applied) {
        behind = it;
      }
    }
    if (behind == followers_.end()) return;
    LOG(WARNING) << "replica follower " << behind->first << " is "
                 << head_ - behind->second.applied
                 << " feed entries behind, more than the "
                 << (options_.max_bytes_kept >> 20)
                 << " MiB the feed keeps (--max_replication_lag_mb) while it "
                    "copies: its copy is abandoned, and taken again";
    followers_.erase(behind);
    ++followers_dropped_behind_;
    changed_ = true;
    PruneLocked();
  }
}

bool ReplicationFeed::HasFollower(uint64_t follower) const {
  absl::MutexLock lock(&mu_);
  return followers_.contains(follower);
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
  changed_ = true;
  PruneLocked();
}

void ReplicationFeed::WhenReadable(uint64_t follower, uint64_t applied,
                                   size_t max_entries, size_t max_bytes,
                                   absl::Time deadline, ReadDone done) {
  absl::Status status;
  std::vector<FeedEntry> entries;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked(absl::Now());
    if (auto found = followers_.find(follower); found != followers_.end() &&
                                                max_entries > 0 &&
                                                !found->second.reading) {
      found->second.reading = true;
      changed_ = true;
    }
    status = AcknowledgeLocked(follower, applied);
    if (status.ok()) {
      Follower& state = followers_[follower];
      if (head_ == state.applied &&
          absl::Now() < std::min(deadline, cancel_at_) && max_entries > 0) {
        read_waits_.push_back(ReadWait{follower, max_entries, max_bytes,
                                       deadline, std::move(done)});
        return;
      }
      entries = TakeEntriesLocked(state, state.applied, max_entries, max_bytes);
    }
  }
  done(std::move(status), std::move(entries));
}

void ReplicationFeed::WhenReplicated(uint64_t sequence, bool sync,
                                     uint32_t min_in_sync, uint64_t max_lag,
                                     absl::Time deadline,
                                     std::function<void(Replicated)> done) {
  ReplicatedWait wait{sequence, sync,     min_in_sync,
                      max_lag,  deadline, std::move(done)};
  Replicated replicated;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked(absl::Now());
    replicated = ReplicatedLocked(wait);
    if (replicated == Replicated::kTimedOut &&
        absl::Now() < std::min(deadline, cancel_at_)) {
      replicated_waits_.push_back(std::move(wait));
      return;
    }
  }
  wait.done(replicated);
}

absl::Status ReplicationFeed::Read(uint64_t follower, uint64_t applied,
                                   size_t max_entries, absl::Duration wait,
                                   std::vector<FeedEntry>* out) {
  absl::Notification answered;
  absl::Status status;
  WhenReadable(follower, applied, max_entries, ~size_t{0}, absl::Now() + wait,
               [&](absl::Status read, std::vector<FeedEntry> entries) {
                 status = std::move(read);
                 *out = std::move(entries);
                 answered.Notify();
               });
  answered.WaitForNotification();
  return status;
}

ReplicationFeed::Replicated ReplicationFeed::WaitReplicated(
    uint64_t sequence, bool sync, uint32_t min_in_sync, uint64_t max_lag,
    absl::Time deadline) {
  absl::Notification answered;
  Replicated replicated = Replicated::kTimedOut;
  WhenReplicated(sequence, sync, min_in_sync, max_lag, deadline,
                 [&](Replicated outcome) {
                   replicated = outcome;
                   answered.Notify();
                 });
  answered.WaitForNotification();
  return replicated;
}

void ReplicationFeed::CancelWaits(absl::Time at) {
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    cancel_at_ = std::min(cancel_at_, at);
    changed_ = true;
    DecideWaitsLocked(absl::Now(), &answers);
  }
  for (auto& answer : answers) answer();
}

std::vector<uint64_t> ReplicationFeed::InSyncFollowers() {
  absl::MutexLock lock(&mu_);
  ExpireLocked(absl::Now());
  std::vector<uint64_t> in_sync;
  for (const auto& [id, follower] : followers_) {
    // Applied what it was handed on catching up: it holds every push
    // acknowledged before it counted.
    if (follower.in_sync && follower.applied >= follower.in_sync_at)
      in_sync.push_back(id);
  }
  std::sort(in_sync.begin(), in_sync.end());
  return in_sync;
}

void ReplicationFeed::SetRecordedInSync(
    std::vector<uint64_t> followers,
    std::optional<std::vector<uint64_t>> counted) {
  absl::MutexLock lock(&mu_);
  counted_in_sync_ = counted.has_value() ? *std::move(counted) : followers;
  recorded_in_sync_ = std::move(followers);
  changed_ = true;
}

ReplicationFeed::Stats ReplicationFeed::GetStats() {
  absl::MutexLock lock(&mu_);
  ExpireLocked(absl::Now());
  Stats stats;
  stats.followers = static_cast<uint32_t>(followers_.size());
  stats.in_sync = InSyncCountLocked();
  stats.head = head_;
  stats.applied = LeastAppliedLocked();
  stats.entries_kept = entries_.size();
  stats.bytes_kept = bytes_kept_;
  stats.followers_dropped_behind = followers_dropped_behind_;
  return stats;
}

void ReplicationFeed::RunWaits() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return changed_ || stopping_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&woken), kWaitSlice);
    changed_ = false;
    const absl::Time now = absl::Now();
    ExpireLocked(now);
    std::vector<std::function<void()>> answers;
    DecideWaitsLocked(now, &answers);
    if (answers.empty()) continue;
    mu_.Unlock();
    for (auto& answer : answers) answer();
    mu_.Lock();
  }
}

void ReplicationFeed::DecideWaitsLocked(
    absl::Time now, std::vector<std::function<void()>>* answers) {
  for (size_t i = 0; i < replicated_waits_.size();) {
    ReplicatedWait& wait = replicated_waits_[i];
    const Replicated replicated = ReplicatedLocked(wait);
    if (replicated != Replicated::kTimedOut ||
        now >= std::min(wait.deadline, cancel_at_)) {
      answers->push_back(
          [done = std::move(wait.done), replicated] { done(replicated); });
      replicated_waits_[i] = std::move(replicated_waits_.back());
      replicated_waits_.pop_back();
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < read_waits_.size();) {
    ReadWait& wait = read_waits_[i];
    auto follower = followers_.find(wait.follower);
    absl::Status status;
    std::vector<FeedEntry> entries;
    bool decided = true;
    if (follower == followers_.end()) {
      status = absl::FailedPreconditionError(
          absl::StrCat("follower ", wait.follower,
                       " was dropped while it waited: copy it again"));
    } else if (head_ > follower->second.applied) {
      entries = TakeEntriesLocked(follower->second, follower->second.applied,
                                  wait.max_entries, wait.max_bytes);
    } else {
      decided = now >= std::min(wait.deadline, cancel_at_);
    }
    if (decided) {
      answers->push_back([done = std::move(wait.done),
                          status = std::move(status),
                          entries = std::move(entries)]() mutable {
        done(std::move(status), std::move(entries));
      });
      read_waits_[i] = std::move(read_waits_.back());
      read_waits_.pop_back();
    } else {
      ++i;
    }
  }
}

ReplicationFeed::Replicated ReplicationFeed::ReplicatedLocked(
    const ReplicatedWait& wait) const {
  if (head_ - LeastAppliedLocked(Among::kReading) > wait.max_lag)
    return Replicated::kTimedOut;
  // Past the byte bound with no copy left to drop: the replicas reading
  // hold the entries, and pushes wait for them.
  if (bytes_kept_ > options_.max_bytes_kept) return Replicated::kTimedOut;
  if (!wait.sync) return Replicated::kYes;
  const uint32_t in_sync = InSyncCountLocked();
  if (recorded_in_sync_.has_value()) {
    // A follower recorded in sync, even one dropped since, holds the push
    // back until the record no longer names it.
    for (uint64_t id : *recorded_in_sync_) {
      auto follower = followers_.find(id);
      if (follower == followers_.end() ||
          follower->second.applied < wait.sequence) {
        return Replicated::kTimedOut;
      }
    }
  }
  if (in_sync == 0) return Replicated::kTooFewInSync;
  if (LeastAppliedLocked(Among::kInSync) < wait.sequence)
    return Replicated::kTimedOut;
  return in_sync < wait.min_in_sync ? Replicated::kTooFewInSync
                                    : Replicated::kYes;
}

absl::Status ReplicationFeed::AcknowledgeLocked(uint64_t follower,
                                                uint64_t applied) {
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
  Follower& state = it->second;
  if (applied > state.applied) {
    state.applied = applied;
    changed_ = true;
  }
  state.last_read = absl::Now();
  // A replica copying keeps its place without reading: not in sync until
  // it reads.
  if (state.reading && state.applied == head_ && !state.in_sync) {
    state.in_sync = true;
    state.in_sync_at = head_;
    changed_ = true;
  }
  PruneLocked();
  return absl::OkStatus();
}

std::vector<FeedEntry> ReplicationFeed::TakeEntriesLocked(Follower& follower,
                                                          uint64_t from,
                                                          size_t max_entries,
                                                          size_t max_bytes) {
  std::vector<FeedEntry> out;
  size_t bytes = 0;
  // Entries after a follower's position are kept while it is registered;
  // none are kept once no follower is.
  for (uint64_t sequence = std::max(from + 1, first_kept_);
       sequence <= head_ && out.size() < max_entries; ++sequence) {
    if (sequence != from + 1 + out.size()) break;  // a gap: none to give
    const FeedEntry& entry = entries_[sequence - first_kept_];
    bytes += entry.record().size() + entry.slot_keys().size() +
             entry.slot_floats().size() + entry.slot_metas().size();
    if (!out.empty() && bytes > max_bytes) break;
    out.push_back(entry);
  }
  if (follower.reading && from + out.size() == head_ && !follower.in_sync) {
    follower.in_sync = true;
    follower.in_sync_at = head_;
    changed_ = true;
  }
  return out;
}

void ReplicationFeed::ExpireLocked(absl::Time now) {
  bool dropped = false;
  for (auto it = followers_.begin(); it != followers_.end();) {
    // A follower whose read is waiting here is not gone.
    const bool waiting = std::any_of(
        read_waits_.begin(), read_waits_.end(),
        [&](const ReadWait& wait) { return wait.follower == it->first; });
    if (!waiting && now - it->second.last_read > options_.follower_timeout) {
      followers_.erase(it++);
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped) {
    changed_ = true;
    PruneLocked();
  }
}

void ReplicationFeed::PruneLocked() {
  const uint64_t keep_after = LeastAppliedLocked();
  while (!entries_.empty() && first_kept_ <= keep_after) {
    bytes_kept_ -= EntryBytes(entries_.front());
    entries_.pop_front();
    ++first_kept_;
  }
  if (entries_.empty()) {
    first_kept_ = head_ + 1;
    bytes_kept_ = 0;
  }
}

uint32_t ReplicationFeed::InSyncCountLocked() const {
  uint32_t in_sync = 0;
  for (const auto& [id, follower] : followers_) {
    if (!follower.in_sync) continue;
    if (recorded_in_sync_.has_value() &&
        std::find(counted_in_sync_.begin(), counted_in_sync_.end(), id) ==
            counted_in_sync_.end()) {
      continue;
    }
    ++in_sync;
  }
  return in_sync;
}

uint64_t ReplicationFeed::LeastAppliedLocked(Among among) const {
  uint64_t least = head_;
  for (const auto& [id, follower] : followers_) {
    if (among == Among::kInSync && !follower.in_sync) continue;
    if (among == Among::kReading && !follower.reading) continue;
    least = std::min(least, follower.applied);
  }
  return least;
}

}  // namespace ps::embedding
