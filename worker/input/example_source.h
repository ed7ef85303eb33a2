// File: worker/input/example_source.h
//
// Where a worker's training examples come from, one batch at a time: a
// fixed set of click-log files (ClickLogReader) or a directory that keeps
// receiving them (FollowReader). A source for a message queue (Kafka, say)
// would be a third.
//
// Next() is called from one thread at a time; Cancel() from any.

#ifndef PS_WORKER_INPUT_EXAMPLE_SOURCE_H_
#define PS_WORKER_INPUT_EXAMPLE_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/input/features.h"

namespace ps::worker {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  // Moves the next batch into `batch`. Returns true on a batch, false at
  // the end of the input (or once cancelled); errors for input that cannot
  // be read or holds too many malformed lines.
  virtual absl::StatusOr<bool> Next(std::vector<model::Example>* batch) = 0;

  // The file the batch Next() returned last came from, for a source whose
  // batches each come from one file of a followed directory; empty
  // otherwise.
  virtual std::string batch_file() const { return ""; }
  // Whether that batch is the last of its file (such a source only).
  virtual bool batch_ends_file() const { return false; }

  // Lines of this worker's share parsed so far, and how many were malformed.
  virtual int64_t lines() const = 0;
  virtual int64_t bad_lines() const = 0;

  // Ends a wait for input that has not arrived yet: the Next() that waits,
  // and every later one, return false. A source that never waits may
  // ignore it.
  virtual void Cancel() {}
  // Whether Next() is waiting for input that has not arrived yet (a
  // followed directory with nothing new). Any thread.
  virtual bool waiting() const { return false; }
};

}  // namespace ps::worker

#endif  // PS_WORKER_INPUT_EXAMPLE_SOURCE_H_
