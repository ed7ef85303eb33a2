// File: worker/input/follow_reader.h
//
// FollowReader trains on a directory that keeps receiving click-log files
// (hourly partitions such as 2026120113.tsv.gz): it takes them in name
// order, each once it is complete, and waits when there is nothing new.
//
// A file counts once a marker named after it with ".done" added exists
// (2026120113.tsv.gz.done, empty or not), so that a file still being
// written or copied is never read. Markers and names that start with "."
// are never data. A complete file whose name sorts before the last one
// taken (it arrived late) is left out, logged once and counted: the
// order, and with it every worker's position, stays the names'.
//
// Worker i of n reads its share of every file (ClickLogReader's split of
// one file: the i-th byte range of a plain file, every n-th line of a
// gzip'd one, every n-th record of a TFRecord one), so that each new file
// is spread over every worker. Every
// batch holds lines of one file (a file's last batch may be smaller), and
// says whether it is its file's last (the reader reads one batch ahead).
// The bad-line limit applies to each file. A directory that cannot be
// listed is looked at again at the next poll; a file that goes before it
// is opened is left out (logged).
//
// Where it starts: a FollowPosition (the file and the examples of it this
// worker trained on, as the coordinator and checkpoints record it) skips
// the files before that one without reading them, and that many examples
// of it.

#ifndef PS_WORKER_INPUT_FOLLOW_READER_H_
#define PS_WORKER_INPUT_FOLLOW_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "worker/input/clicklog_reader.h"
#include "worker/input/example_source.h"

namespace ps::worker {

// A worker's place in a followed directory.
struct FollowPosition {
  // The file of the last batch trained on; empty: before the first file.
  std::string file;
  // Examples of this worker's share of `file` trained on.
  int64_t file_examples = 0;
};

struct FollowOptions {
  // The directory to follow. REQUIRES: exists.
  std::string dir;
  // Stop once this file (a name in `dir`) has been read; empty: never
  // (until cancelled).
  std::string until;
  // How often to look for new files when there is nothing new.
  // Default: 1 s.
  absl::Duration poll = absl::Seconds(1);
  // Where to start. Default: at the first file.
  FollowPosition start;
  // The share, batch size, layout, label, shuffle buffer and bad-line limit
  // (over the whole directory) to read each file with; `files`, `paths`
  // and `epochs` are ignored.
  ReaderOptions reader;
};

class FollowReader : public ExampleSource {
 public:
  // INVALID_ARGUMENT for reader options ClickLogReader refuses; NOT_FOUND
  // if `dir` is not a directory.
  static absl::StatusOr<std::unique_ptr<FollowReader>> Open(
      const FollowOptions& options);

  absl::StatusOr<bool> Next(std::vector<model::Example>* batch) override;
  std::string batch_file() const override { return batch_file_; }
  bool batch_ends_file() const override { return batch_ends_file_; }
  // From Next()'s thread, or once it is done with the reader.
  int64_t lines() const override;
  int64_t bad_lines() const override;
  void Cancel() override { cancelled_.Notify(); }
  bool waiting() const override { return waiting_.load(); }

  // Files taken so far, and complete files left out for arriving after a
  // later name was taken.
  int64_t files_taken() const { return files_taken_.load(); }
  int64_t late_files() const { return late_files_.load(); }

 private:
  explicit FollowReader(const FollowOptions& options) : options_(options) {}

  // The first complete file after the last one taken (`start.file` itself
  // at first, if it is there), or "" when there is none yet.
  std::string NextCompleteFile();
  // Waits for the next file and reads its first batch: false once
  // cancelled or past `until`.
  absl::StatusOr<bool> FirstBatchOfNextFile(std::vector<model::Example>* batch);
  // Opens `name` and, for the start file, skips the examples trained on;
  // false for a file that went before it was opened.
  absl::StatusOr<bool> OpenFile(const std::string& name);
  // Counts the current file's lines and closes it.
  void FinishFile();

  const FollowOptions options_;
  absl::Notification cancelled_;
  // The file being read, and the lines of the files read before it.
  std::unique_ptr<ClickLogReader> current_;
  std::string current_file_;
  int64_t done_lines_ = 0, done_bad_lines_ = 0;
  std::string last_taken_;
  absl::btree_set<std::string> taken_, reported_late_;
  bool reached_until_ = false;
  bool waiting_logged_ = false;
  std::atomic<bool> waiting_{false};
  // The batch after the one Next() returned (of the same file), and an
  // error reading it, which the next Next() returns.
  std::vector<model::Example> ahead_;
  bool have_ahead_ = false;
  absl::Status deferred_;
  std::string batch_file_;
  bool batch_ends_file_ = false;
  std::atomic<int64_t> files_taken_{0}, late_files_{0};
};

}  // namespace ps::worker

#endif  // PS_WORKER_INPUT_FOLLOW_READER_H_
