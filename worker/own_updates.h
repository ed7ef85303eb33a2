// File: worker/own_updates.h
//
// Read-my-writes without waiting for one's own push (worker/trainer.h): a
// worker pulls step t+1's rows while step t computes, before step t's push
// has left, so the rows lack that push. For the keys both steps touch it
// pulls each row's optimizer state too (TrainingClient::TableRows::optimizer),
// and ReplayOwnPush() applies step t's gradients to them with the table's
// optimizer (base/optimizer.h, the code the shards run): a row that no other
// worker pushed in between comes out as its shard will hold it once the
// push lands, bit for bit.
//
// Exact under what a push does on a shard: gradients of distinct keys
// (BatchInputs gives a step's keys once per table), FP32 on the
// wire, every key stored (no admission threshold) and no row expiring in
// between (no row_ttl_s); the trainer replays only then. Also assumed:
// workers and shards built from one source with one set of flags (the same
// optimizer code), and no learning rate set by an administrator between
// the pull and the push's landing (that one step replays the old rate).

#ifndef PS_WORKER_OWN_UPDATES_H_
#define PS_WORKER_OWN_UPDATES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/training_client.h"

namespace ps::worker {

// One table's keys of the next step that the previous step pushed, and
// what is needed to replay that push on them.
struct SharedRows {
  // next_positions[i]: where keys[i] is among the next step's keys;
  // previous_positions[i]: where among the previous step's (its gradient's
  // row).
  std::vector<uint32_t> next_positions;
  std::vector<uint32_t> previous_positions;
  std::vector<uint64_t> keys;
  // The rest of the next step's keys, and their positions among them: the
  // plain pull (the replay writes the shared rows' weights).
  std::vector<uint64_t> other_keys;
  std::vector<uint32_t> other_positions;
  // Pulled with state: keys.size() * (dim + state_floats) floats, and the
  // table's optimizer.
  int dim = 0;
  int state_floats = 0;
  std::vector<float> rows_with_state;
  client::TrainingClient::PulledOptimizer optimizer;

  // The pull that fills rows_with_state and optimizer (sized here).
  client::TrainingClient::TableRows Pull(const std::string& table);
};

// Finds the keys of `next` that `previous` has, in `next`'s order, into
// `shared` (its row buffer sized for `dim` and `state_floats`).
void FindSharedRows(absl::Span<const uint64_t> previous,
                    absl::Span<const uint64_t> next, int dim, int state_floats,
                    SharedRows* shared);

// Applies the previous step's push to the shared rows (in place) and writes
// their new weights into `rows` (the next step's, dim floats per key):
// `previous_gradients` holds dim floats per previous key, as pushed with
// `learning_rate_scale`. INVALID_ARGUMENT if the pulled optimizer cannot be
// built or sizes disagree.
absl::Status ReplayOwnPush(SharedRows& shared,
                           absl::Span<const float> previous_gradients,
                           float learning_rate_scale, absl::Span<float> rows);

}  // namespace ps::worker

#endif  // PS_WORKER_OWN_UPDATES_H_
