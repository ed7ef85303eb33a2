// File: ops/checkpoint_taker.h
//
// What a trainer calls to have the cluster's checkpoints taken every N
// steps (worker/trainer.h's TrainerOptions::checkpoints):
// ops/periodic_checkpointer.h implements it. Request() must return at
// once: every live worker, the asking one included, holds at a
// checkpoint's cut.

#ifndef PS_OPS_CHECKPOINT_TAKER_H_
#define PS_OPS_CHECKPOINT_TAKER_H_

#include <cstdint>

namespace ps::ops {

class CheckpointTaker {
 public:
  struct Counts {
    int taken = 0;
    int failed = 0;
  };

  virtual ~CheckpointTaker() = default;
  // The asking worker is at `clock`: take a checkpoint, now or once the
  // one being taken is done (unless that one's cut covers `clock`).
  virtual void Request(int64_t clock) = 0;
  // Waits for the checkpoint in progress, then takes no more.
  virtual void Stop() = 0;
  // Gives up a checkpoint still waiting for its cut (a draining worker must
  // not wait for one), then takes no more.
  virtual void Abandon() = 0;
  virtual Counts counts() = 0;
};

}  // namespace ps::ops

#endif  // PS_OPS_CHECKPOINT_TAKER_H_
