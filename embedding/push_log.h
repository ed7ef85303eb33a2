// File: embedding/push_log.h
//
// PushLog is an append-only log of opaque records kept in segment files of
// one directory. EmbeddingStore writes a record per push under
// --durability=wal, so that an acknowledged push survives the process. What
// a record holds is push_record.h's business, and when a segment is no
// longer needed the store's (embedding_store.h).
//
// Segments are numbered within a *run*: each time the store opens it
// replays the previous run's segments and then writes to a new run, so
// the files of different runs never mix. A segment is the file
// "<run>-<segment>.pushlog": an 8-byte magic, then frames of the payload's
// length (uint32), its XXH3-64 checksum (uint64) and the payload, in host
// byte order. One Write() is one writev(): after a process crash only the
// last frame of the last segment can be cut short (or, after a power loss,
// left as zeros), and replay drops it (it was never acknowledged); a frame
// that runs past the end with whole frames after it had its length damaged. A
// frame that fails its length or checksum anywhere else means acknowledged
// records are damaged (a disk error, or a power loss without `sync`): replay
// stops with DATA_LOSS naming the file and what follows the damage, unless told
// to recover to the point before it.
//
// Thread-safe. Appends are serialised; the file is never read while written.

#ifndef PS_EMBEDDING_PUSH_LOG_H_
#define PS_EMBEDDING_PUSH_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps::embedding {

struct PushLogOptions {
  // The log's directory. REQUIRES: not empty. Created if missing.
  std::string dir;
  // A segment is closed, and the next append starts a new one, once it holds
  // this many bytes; a new segment's blocks are reserved up front. Default:
  // 64 MiB.
  uint64_t segment_bytes = 64 << 20;
  // An append returns only once its record is on disk (fdatasync(),
  // shared by concurrent appends; the directory too after creating a
  // segment), so that appended records survive a machine crash, not only a
  // process crash. Default: false.
  bool sync = false;
  // Called under the log's lock each time a segment file is created; what
  // it returns, if not empty, becomes the segment's first record, before
  // any record Write() appends there. Default: none.
  std::function<std::string()> segment_preamble;
};

// What replay does with a damaged record that is not the torn end of the
// log (see the file comment).
enum class PushLogRecovery {
  // Stop with DATA_LOSS, replaying nothing.
  kStrict,
  // Replay every record before the damage; drop it and everything after it
  // in the run, logged as an error with the bytes dropped.
  kPointInTime,
};

class PushLog {
 public:
  // Where a record read back lies: which of the run's segments (by
  // position in RunReader's list, not number) and its payload's offset.
  struct Location {
    uint32_t segment_index = 0;
    uint64_t offset = 0;
  };

  // Reads the segments one run left, for replay; owns their descriptors.
  class RunReader {
   public:
    ~RunReader();
    RunReader(const RunReader&) = delete;
    RunReader& operator=(const RunReader&) = delete;

    // Calls fn(location, payload) for every intact record, segment by
    // segment, each in the order appended; stops at the first error fn
    // returns. A torn last frame of the last segment is skipped (logged).
    // Damage anywhere else is DATA_LOSS naming the file, the offset and
    // the bytes after it, or under kPointInTime ends the reading there.
    absl::Status ForEach(const std::function<absl::Status(
                             Location location, absl::string_view payload)>& fn,
                         PushLogRecovery recovery = PushLogRecovery::kStrict);

    // Bytes that ForEach() dropped under kPointInTime.
    uint64_t dropped_bytes() const { return dropped_bytes_; }

    // Reads `size` bytes starting `skip` bytes into the payload at
    // `location` (part of a record ForEach() reported).
    absl::Status ReadAt(Location location, uint64_t skip, size_t size,
                        std::string* out) const;

    uint64_t bytes() const;

   private:
    friend class PushLog;
    RunReader() = default;
    struct Segment {
      std::string path;
      int fd = -1;
      uint64_t size = 0;
    };
    // Whether the frame at `offset` of segment `index`, which failed its
    // length or checksum, is the torn end of the log that a crash in the
    // middle of a write leaves (then nothing acknowledged is lost).
    bool IsTornEnd(uint32_t index, uint64_t offset,
                   absl::string_view segment) const;

    std::vector<Segment> segments_;
    uint64_t dropped_bytes_ = 0;
  };

  // Opens (creating if needed) the directory. Appending starts with
  // StartRun().
  static absl::StatusOr<std::unique_ptr<PushLog>> Open(
      const PushLogOptions& options);

  ~PushLog();
  PushLog(const PushLog&) = delete;
  PushLog& operator=(const PushLog&) = delete;

  // The runs that have segment files, ascending.
  absl::StatusOr<std::vector<uint64_t>> ListRuns() const;

  // Opens every segment of `run`, in segment order.
  absl::StatusOr<std::unique_ptr<RunReader>> ReadRun(uint64_t run) const;

  // Deletes every segment of the runs below `run`.
  absl::Status DeleteRunsBefore(uint64_t run);

  // Appends go to `run` from now on, from segment 0; the first append
  // creates the file. REQUIRES: no segment of `run` exists, and no append
  // runs concurrently.
  void StartRun(uint64_t run);

  // Where Write() put a record, for Sync().
  struct Ticket {
    uint64_t segment = 0;
    uint64_t bytes = 0;  // the segment's size once the record was in it
  };

  // Writes one record (one writev(), to the page cache) and calls
  // `on_written`, if set, under the log's lock before returning, so that
  // whatever it records happens before any later segment is created. After
  // a failed write the record is not in the log (what part of it landed is
  // cut off again) and every later write fails the same way, as RocksDB
  // stops writing after a WAL error: for a full disk (RESOURCE_EXHAUSTED,
  // marked transient) until Recover(), otherwise until the log is opened
  // again. INVALID_ARGUMENT for a payload of 4 GiB or more (the log stays
  // usable).
  absl::StatusOr<Ticket> Write(absl::string_view payload,
                               const std::function<void()>& on_written = {});

  // Under options.sync, returns once the record `ticket` names is on disk;
  // concurrent callers share fdatasync() calls (group commit). A failed sync
  // breaks the log like a failed write. Without options.sync, OK at once.
  absl::Status Sync(const Ticket& ticket);

  // Write(), then Sync().
  absl::Status Append(absl::string_view payload);

  // OK, or the error that stopped the log (see Write()).
  absl::Status health() const;

  // Lets writes go on after a full disk stopped the log (the next write
  // fails again while it is still full). The error that stopped the log for
  // anything else (a failed sync, say) stays, and is returned.
  absl::Status Recover();

  // fdatasync() calls so far for records (options.sync): with appends from
  // many threads, fewer than the appends.
  uint64_t syncs() const { return syncs_.load(); }

  // The number of the segment appends go to now; a record appended from
  // now on lands in this segment or a later one.
  uint64_t current_segment() const { return current_segment_.load(); }

  // Deletes the current run's closed segments numbered below `segment`.
  absl::Status DeleteSegmentsBefore(uint64_t segment);

  // Bytes in the current run's segments not yet deleted.
  uint64_t live_bytes() const { return live_bytes_.load(); }

 private:
  explicit PushLog(const PushLogOptions& options) : options_(options) {}

  std::string SegmentPath(uint64_t run, uint64_t segment) const;
  // Writes one frame to the open segment, opening it first if needed.
  absl::Status WriteFrame(const char* header, absl::string_view payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates the current segment's file and writes its magic and preamble.
  absl::Status OpenSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the open segment; under options.sync, syncs it first, so that
  // every record in a closed segment is on disk (or the log is broken_).
  void CloseSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the log with `status` (the first failure wins); a full disk is
  // `recoverable`.
  void Break(const absl::Status& status, bool recoverable = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the open segment's file after it failed to get its magic or
  // preamble; the next write creates it again.
  void AbandonSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Under options.sync: returns once segment `segment` is on disk up to at
  // least `bytes`, syncing it unless a sync that started later already did.
  absl::Status SyncThrough(uint64_t segment, uint64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);

  const PushLogOptions options_;
  // Group commit: one thread syncs at a time, for everything appended
  // before it started. Lock order: sync_mu_, then mu_.
  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t synced_segment_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t synced_bytes_ ABSL_GUARDED_BY(sync_mu_) = 0;
  std::atomic<uint64_t> syncs_{0};
  mutable absl::Mutex mu_;
  // Set by a failed write or sync: every later append fails with it (after a
  // failed sync the page cache may have dropped what did not reach the disk).
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // broken_ is a full disk, which Recover() may clear.
  bool recoverable_ ABSL_GUARDED_BY(mu_) = false;
  // The last failed write ran out of space (set by WriteFrame()).
  bool out_of_space_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> failed_{false};  // !broken_.ok(), readable without mu_
  uint64_t run_ ABSL_GUARDED_BY(mu_) = 0;
  // The open segment's descriptor (-1 before its first append) and size.
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t segment_size_ ABSL_GUARDED_BY(mu_) = 0;
  // Segments of this run below this number are deleted. Written under
  // mu_; read without it too.
  std::atomic<uint64_t> first_live_segment_{0};
  // Sizes of the closed, not yet deleted segments, from first_live_segment_.
  std::deque<uint64_t> closed_sizes_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> current_segment_{0};
  std::atomic<uint64_t> live_bytes_{0};
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_PUSH_LOG_H_
