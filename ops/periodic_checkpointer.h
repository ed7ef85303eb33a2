// File: ops/periodic_checkpointer.h
//
// PeriodicCheckpointer takes the cluster's checkpoints for one worker
// (worker 0 under ps_worker --checkpoint_every_steps): Request(clock) asks
// for one and returns at once; a thread of its own takes it into
// DIR/ckpt-<clock>.taking/ (ops/checkpoint.h: every live worker
// holds at the cut, this one included, so it must never wait inside the
// training loop), renames it DIR/ckpt-<cut>/ (ckpt-<cut>.<n>/ if that name
// is taken, as by a run abandoned for an older checkpoint), and then keeps
// the newest `keep` checkpoints of DIR, newest by the time they were taken.
// A request made while one is being taken waits for it (the newest of
// them, if several come), and is dropped if that one's cut is at or past
// its clock; after a failed one it is taken at once. A failed checkpoint
// is logged and training goes on.
//
// Thread-safe. Stop() (or the destructor) waits for the one in progress;
// Abandon() gives it up if it still waits for its cut.

#ifndef PS_OPS_PERIODIC_CHECKPOINTER_H_
#define PS_OPS_PERIODIC_CHECKPOINTER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "ops/checkpoint.h"
#include "ops/checkpoint_taker.h"

namespace ps::ops {

class PeriodicCheckpointer : public CheckpointTaker {
 public:
  // `options` says how to reach the cluster; its dir is the parent of the
  // checkpoints. `keep`: checkpoints kept (0: all).
  PeriodicCheckpointer(const CheckpointOptions& options, int keep);
  ~PeriodicCheckpointer() override;

  PeriodicCheckpointer(const PeriodicCheckpointer&) = delete;
  PeriodicCheckpointer& operator=(const PeriodicCheckpointer&) = delete;

  // Asks for a checkpoint (this worker is at `clock`): now, or when the one
  // being taken is done unless its cut covers `clock`.
  void Request(int64_t clock) override;

  // Waits for the checkpoint in progress, then stops.
  void Stop() override;
  void Abandon() override;

  Counts counts() override;

 private:
  void Loop();
  // Deletes all but the newest `keep_` finished checkpoints (ckpt-*) of the
  // parent dir, and what a checkpoint of this class left unfinished.
  void Prune();

  const CheckpointOptions options_;
  const int keep_;
  absl::Mutex mu_;
  int64_t requested_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoning_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The name of the checkpoint at cut `cut`: ckpt-<cut, 10 digits>.
std::string CheckpointName(int64_t cut);

}  // namespace ps::ops

#endif  // PS_OPS_PERIODIC_CHECKPOINTER_H_
