// File: embedding/replication_feed.h
//
// ReplicationFeed is a primary shard's record of what changed its store, in
// the order it was applied, for the replicas that follow it
// (server/replication_service.h): every push (its push-log record), and
// every table declared, dropped or given a new learning rate. Entries are
// numbered from 1 in one sequence per feed; a follower registers at the
// feed's head (where the copy it starts from was cut), reads the entries
// after what it applied, and says with each read how far it has applied,
// which lets the feed forget them. Entries are kept only while a follower
// still needs them: with none, an append only takes a number.
//
// A follower is *in sync* once it has applied every entry the feed had (a
// new replica catches up first). A follower not heard from within
// `follower_timeout` is dropped, so that a replica that died neither holds
// entries in memory for good nor keeps pushes waiting for it. The entries
// kept are bounded in bytes too: past `max_bytes_kept` the copy furthest
// behind (a follower that has not read yet) is dropped and must copy again,
// so that pushes never wait for a copy; a follower reading the feed holds
// pushes back instead (WhenReplicated()), as it does past `max_lag`.
//
// The waits are asynchronous, so that a gRPC server's threads are never
// held by them: a thread of the feed's own calls each `done` once, outside
// the feed's lock (or the caller does, when the answer is known at once).
//
// Thread-safe. EmbeddingStore appends under its own locks: Append() never
// waits for a follower.

#ifndef PS_EMBEDDING_REPLICATION_FEED_H_
#define PS_EMBEDDING_REPLICATION_FEED_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/replication.pb.h"

namespace ps::embedding {

struct ReplicationFeedOptions {
  // A follower that has not read for this long is dropped. Default: 5 s.
  absl::Duration follower_timeout = absl::Seconds(5);
  // The entries kept for followers may take this many bytes (their
  // records and rows); an append past it drops the copies furthest behind
  // until they fit, and pushes wait while followers reading the feed hold
  // more. Default: 256 MiB.
  size_t max_bytes_kept = size_t{256} << 20;
};

class ReplicationFeed {
 public:
  explicit ReplicationFeed(const ReplicationFeedOptions& options = {});
  // Answers the waits still pending (as CancelWaits(now)).
  ~ReplicationFeed();

  ReplicationFeed(const ReplicationFeed&) = delete;
  ReplicationFeed& operator=(const ReplicationFeed&) = delete;

  // Names this feed (random): a follower of another feed (a primary that
  // restarted) must copy again.
  uint64_t id() const { return id_; }

  // Numbers `entry` (sets its sequence) and keeps it while a follower needs
  // it; returns the sequence. `record` is copied only then.
  uint64_t AppendPush(absl::string_view table, absl::string_view record);
  uint64_t Append(FeedEntry entry);

  // The newest entry's sequence (0 before the first).
  uint64_t head() const;

  // Registers a follower holding every entry up to head(), which goes to
  // `*start`; returns its id.
  uint64_t AddFollower(uint64_t* start);
  void RemoveFollower(uint64_t follower);
  // Whether `follower` still follows (it was neither removed nor dropped).
  bool HasFollower(uint64_t follower) const;

  // Notes that `follower` applied every entry up to `applied`, then calls
  // done(status, entries) with the entries after it, up to `max_entries`
  // and `max_bytes` of records (at least one entry if any): at once when
  // there are some, or on an error, or once `deadline` has passed;
  // otherwise when the first comes, or at `deadline` with none. A follower
  // handed every entry up to the head is in sync from then on.
  // FAILED_PRECONDITION for an unknown follower (never added, or dropped);
  // INVALID_ARGUMENT for `applied` past head().
  using ReadDone = std::function<void(absl::Status, std::vector<FeedEntry>)>;
  void WhenReadable(uint64_t follower, uint64_t applied, size_t max_entries,
                    size_t max_bytes, absl::Time deadline, ReadDone done);

  // What became of a wait for replicas.
  enum class Replicated {
    // Every follower in sync applied it (under sync), and no follower is
    // more than the lag bound behind.
    kYes,
    // Under sync, every follower in sync applied it, but fewer followers
    // were in sync than `min_in_sync` (than one, when that is 0: then
    // nobody has it).
    kTooFewInSync,
    // The deadline (or CancelWaits()) came first.
    kTimedOut,
  };
  // Calls done() once every follower in sync has applied `sequence` (when
  // `sync`; one dropped meanwhile no longer counts, one still catching up
  // does not yet) and no follower reading entries (in sync or catching up)
  // is more than `max_lag` entries behind head() nor holds more than
  // max_bytes_kept (one still copying, which reads none, is dropped past
  // max_bytes_kept instead: pushes never wait for a copy), or at `deadline`, or
  // once CancelWaits() takes effect. Under sync the answer is kTooFewInSync
  // rather than kYes while fewer than max(1, min_in_sync) followers are in
  // sync.
  void WhenReplicated(uint64_t sequence, bool sync, uint32_t min_in_sync,
                      uint64_t max_lag, absl::Time deadline,
                      std::function<void(Replicated)> done);

  // Blocking forms of the two above.
  absl::Status Read(uint64_t follower, uint64_t applied, size_t max_entries,
                    absl::Duration wait, std::vector<FeedEntry>* out);
  Replicated WaitReplicated(uint64_t sequence, bool sync, uint32_t min_in_sync,
                            uint64_t max_lag, absl::Time deadline);

  // The followers in sync now that have applied every entry they were
  // handed when they caught up (so they hold every push acknowledged before
  // they counted), ascending, after dropping those that timed out.
  std::vector<uint64_t> InSyncFollowers();

  // The in-sync set as recorded where a promotion looks (etcd; see
  // cluster/shard_directory.h's InSyncSet). Once called, a sync wait also needs
  // every recorded follower to have applied its entry: one dropped holds
  // pushes back until a record without it is set, so that no push is
  // acknowledged that a recorded follower lacks. And only recorded
  // followers count as in sync (GetStats(), min_in_sync): a push
  // acknowledged under a least of one is held by a follower a promotion
  // may take.
  //
  // `counted`, when given, are the followers among them that count as in
  // sync meanwhile: while a record is written, `followers` is the union of
  // the old and the new (a wait needs both) and `counted` what both name
  // (a promotion may take only a follower whichever record etcd keeps).
  void SetRecordedInSync(
      std::vector<uint64_t> followers,
      std::optional<std::vector<uint64_t>> counted = std::nullopt);

  // From `at` on, answers every wait, and every later one at once (not
  // replicated, no entries): for a server that stops, giving its replicas
  // until then.
  void CancelWaits(absl::Time at);

  struct Stats {
    uint32_t followers = 0;
    // In sync and, once the set is recorded, recorded.
    uint32_t in_sync = 0;
    uint64_t head = 0;
    // The least any follower has applied (head without followers).
    uint64_t applied = 0;
    // Entries kept for followers, and their bytes.
    uint64_t entries_kept = 0;
    uint64_t bytes_kept = 0;
    // Followers dropped so far because the entries kept for them passed
    // max_bytes_kept.
    uint64_t followers_dropped_behind = 0;
  };
  // Drops the followers that timed out first.
  Stats GetStats();

 private:
  // Numbers the entry `make` makes (called only when a follower needs it).
  uint64_t AppendMade(absl::FunctionRef<FeedEntry()> make);

  struct Follower {
    uint64_t applied = 0;
    absl::Time last_read;
    bool in_sync = false;
    // Whether it has asked for entries yet: a replica copying keeps its
    // place (reads of no entries) without reading.
    bool reading = false;
    // head_ when it caught up (became in sync).
    uint64_t in_sync_at = 0;
  };
  struct ReplicatedWait {
    uint64_t sequence;
    bool sync;
    uint32_t min_in_sync;
    uint64_t max_lag;
    absl::Time deadline;
    std::function<void(Replicated)> done;
  };
  struct ReadWait {
    uint64_t follower;
    size_t max_entries;
    size_t max_bytes;
    absl::Time deadline;
    ReadDone done;
  };

  // The waiter thread: answers waits as the feed changes and as their
  // deadlines pass.
  void RunWaits();
  // Moves the answers of the waits that are decided into `answers`.
  void DecideWaitsLocked(absl::Time now,
                         std::vector<std::function<void()>>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kYes or kTooFewInSync when `wait` is satisfied; kTimedOut when not
  // (yet).
  Replicated ReplicatedLocked(const ReplicatedWait& wait) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes a follower's read of what it applied. FAILED_PRECONDITION /
  // INVALID_ARGUMENT as WhenReadable().
  absl::Status AcknowledgeLocked(uint64_t follower, uint64_t applied)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Up to `max_entries` entries after `from` (and `max_bytes` of records,
  // but at least one) for `follower`, which is in sync once they reach the
  // head.
  std::vector<FeedEntry> TakeEntriesLocked(Follower& follower, uint64_t from,
                                           size_t max_entries, size_t max_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops followers not heard from within the timeout, and the entries no
  // follower needs.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the copies (followers not reading yet) furthest behind while the
  // entries kept take more than max_bytes_kept.
  void DropFollowersBehindLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The followers in sync that count: once SetRecordedInSync() was called,
  // only those the record names.
  uint32_t InSyncCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which followers LeastAppliedLocked() looks at.
  enum class Among { kAll, kReading, kInSync };
  // The least any follower of `among` has applied; head_ when there is
  // none.
  uint64_t LeastAppliedLocked(Among among = Among::kAll) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReplicationFeedOptions options_;
  const uint64_t id_;
  mutable absl::Mutex mu_;
  uint64_t head_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_follower_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Follower> followers_ ABSL_GUARDED_BY(mu_);
  // Entries first_kept_ .. head_ (those some follower needs).
  std::deque<FeedEntry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t first_kept_ ABSL_GUARDED_BY(mu_) = 1;
  // The bytes of entries_ (EntryBytes()).
  uint64_t bytes_kept_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t followers_dropped_behind_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ReplicatedWait> replicated_waits_ ABSL_GUARDED_BY(mu_);
  std::vector<ReadWait> read_waits_ ABSL_GUARDED_BY(mu_);
  // Something a wait may be waiting for happened since the waiter thread
  // last looked.
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  // SetRecordedInSync()'s followers, once it was called.
  std::optional<std::vector<uint64_t>> recorded_in_sync_ ABSL_GUARDED_BY(mu_);
  // Those of them that count as in sync (SetRecordedInSync()'s `counted`).
  std::vector<uint64_t> counted_in_sync_ ABSL_GUARDED_BY(mu_);
  absl::Time cancel_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread waiter_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_REPLICATION_FEED_H_
