// File: worker/heartbeat.h
//
// Heartbeat keeps a worker's lease at the coordinator alive: on a thread of
// its own it calls `beat` every `period`, whatever the worker's other
// threads are doing (a long evaluation, a pull that keeps retrying). A beat
// that fails is logged (one in ten) and the beats go on: a coordinator that
// is down is the other threads' to wait for.
//
// Thread-safe. The destructor stops the beats (Stop()).

#ifndef PS_WORKER_HEARTBEAT_H_
#define PS_WORKER_HEARTBEAT_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ps::worker {

class Heartbeat {
 public:
  // One beat, which may retry for up to `retry_for` (the period: by then
  // the next beat is due).
  using Beat = std::function<absl::Status(absl::Duration retry_for)>;

  // Starts beating; `name` prefixes the log lines ("[worker 3]").
  Heartbeat(absl::Duration period, Beat beat, std::string name);
  ~Heartbeat();

  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Waits for a beat in progress, then beats no more. Idempotent.
  void Stop();

 private:
  absl::Mutex stop_mu_;
  absl::Notification stop_;
  std::thread thread_ ABSL_GUARDED_BY(stop_mu_);
};

}  // namespace ps::worker

#endif  // PS_WORKER_HEARTBEAT_H_
