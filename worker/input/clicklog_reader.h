// File: worker/input/clicklog_reader.h
//
// ClickLogReader streams batches of parsed examples from click logs laid out
// as an InputLayout says, plain or gzip (detected from the bytes, not the
// name), over one or many files, for one or many epochs. Worker i of n reads
// only its share, without coordination:
//
//   at least n files:       files i, i + n, i + 2n, ... (whole)
//   fewer, all plain:       the i-th of n equal byte ranges of every file,
//                           cut at line boundaries (a line belongs to the
//                           range it starts in)
//   fewer, some gzip'd:     lines i, i + n, ... counted over all files in
//                           order (every worker decompresses everything)
//
// A background thread reads and parses ahead, keeping up to
// `queue_batches` batches ready. With a shuffle buffer, examples leave
// through a bounded buffer of that many, drawn at random (seeded by the
// seed, the worker and the epoch, so that each epoch's order differs and a
// rerun repeats it).
//
// A tfrecord layout reads TFRecord files of tf.Example records
// (tfrecord_file.h, model/input/tf_example.h), shared as gzip'd files are:
// whole files, or records i, i + n, ... (a "line" below is a record).
//
// Malformed lines are counted and skipped, logged with file:line (the
// first ones, then every 1000th); a record, with its byte offset, and one
// whose framing is damaged loses the rest of its file, counted once. Once
// more than `max_bad_lines` have been seen, Next() returns
// FAILED_PRECONDITION and reading stops.
//
// Next() is called from one thread at a time.

#ifndef PS_WORKER_INPUT_CLICKLOG_READER_H_
#define PS_WORKER_INPUT_CLICKLOG_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"
#include "model/input/line_parser.h"
#include "worker/input/example_source.h"

namespace ps::worker {

struct ReaderOptions {
  // Comma-separated paths or glob patterns; expanded and sorted per pattern.
  // REQUIRES: matches at least one file.
  std::string files;
  // When not empty: these files, as named (no pattern), instead of `files`.
  std::vector<std::string> paths;
  // This worker's share. Defaults: 0 of 1.
  int worker_index = 0;
  int num_workers = 1;
  // Examples per batch (the last batch of the data may be smaller).
  // Default: 4096.
  int batch_size = 4096;
  // Passes over the data. Default: 1.
  int epochs = 1;
  // Malformed lines tolerated before reading stops. Default: 1000.
  int64_t max_bad_lines = 1000;
  // Batches parsed ahead. Default: 4.
  int queue_batches = 4;
  // Whether lines may leave out the label (for scoring; see
  // model/input/line_parser.h). Default: required.
  model::LabelColumn label = model::LabelColumn::kRequired;
  // The lines' layout. Default: Criteo's.
  model::InputLayout layout = model::InputLayout::Criteo();
  // Examples held to shuffle the order (0: file order), and the seed of
  // the draws. Defaults: 0, 1.
  int shuffle_buffer = 0;
  uint64_t shuffle_seed = 1;
};

// How the workers split the data (see above), decided from the files alone.
enum class ShareMode { kWholeFiles, kByteRanges, kLineStride };

// Expands comma-separated paths and globs. NOT_FOUND if one matches nothing.
absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::string& patterns);

class ClickLogReader : public ExampleSource {
 public:
  static absl::StatusOr<std::unique_ptr<ClickLogReader>> Open(
      const ReaderOptions& options);

  // Stops the reading thread.
  ~ClickLogReader() override;

  // Moves the next batch into `batch`. Returns true on a batch, false at the
  // end of the data; FAILED_PRECONDITION past max_bad_lines, NOT_FOUND or
  // DATA_LOSS for unreadable files.
  absl::StatusOr<bool> Next(std::vector<model::Example>* batch) override;

  ShareMode share_mode() const { return share_mode_; }

  // Lines of this worker's share parsed so far, and how many were malformed.
  int64_t lines() const override { return lines_.load(); }
  int64_t bad_lines() const override { return bad_lines_.load(); }

 private:
  class LineSource;
  class Shuffler;

  ClickLogReader(const ReaderOptions& options, std::vector<std::string> files,
                 ShareMode share_mode)
      : options_(options), files_(std::move(files)), share_mode_(share_mode) {}

  void ReadLoop();
  // Reads this worker's share of one file into `shuffler`; returns false if
  // reading must stop.
  bool ReadFile(const std::string& path, uint64_t* global_line,
                Shuffler* shuffler);
  bool ReadRecordFile(const std::string& path, uint64_t* global_record,
                      Shuffler* shuffler);
  // Counts a malformed line or record at `where`; false (reading stops) past
  // max_bad_lines.
  bool CountBad(const std::string& where, absl::string_view what,
                absl::string_view why);
  // Hands a full batch to the consumer; false if the reader is stopping.
  bool Deliver(std::vector<model::Example>* batch);
  void Finish(absl::Status status);

  const ReaderOptions options_;
  const std::vector<std::string> files_;
  const ShareMode share_mode_;
  std::atomic<int64_t> lines_{0};
  std::atomic<int64_t> bad_lines_{0};

  absl::Mutex mu_;
  std::deque<std::vector<model::Example>> ready_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_INPUT_CLICKLOG_READER_H_
