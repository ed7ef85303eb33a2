// File: client/training_client.h
//
// TrainingClient is what a trainer needs of the cluster: declare tables,
// pull rows, push gradients, report its clock. PsClient (ps_client.h) is
// the real one, over gRPC; tests give a trainer's stages an in-memory one
// (worker/fake_training_client.h).
// Implementations are thread-safe: the trainer's threads call at once.

#ifndef PS_CLIENT_TRAINING_CLIENT_H_
#define PS_CLIENT_TRAINING_CLIENT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/wire_format.h"
#include "proto/ps.pb.h"

namespace ps::client {

class TrainingClient {
 public:
  // How a table applies pushes, as a pull with optimizer state reports it
  // (PullResponse fields 5 and 6).
  struct PulledOptimizer {
    OptimizerSpec spec;
    float learning_rate_multiplier = 1.0f;
  };

  // One table's part of a pull: the rows of `keys` (dim floats each, in key
  // order) are written to `rows`, which must outlive the call.
  struct TableRows {
    std::string table;
    absl::Span<const uint64_t> keys;
    int dim = 0;
    float* rows = nullptr;
    // Set: a pull with optimizer state (PullRequest.with_state). `rows` then
    // takes dim + state_floats floats per key (the weights, then the
    // state), in FP32 whatever the wire format, and `*optimizer` the
    // table's optimizer. INTERNAL if a shard has another state size.
    PulledOptimizer* optimizer = nullptr;
    int state_floats = 0;
    // If not empty: key i's row goes to row row_positions[i] of `rows`
    // instead of row i (one per key).
    absl::Span<const uint32_t> row_positions = {};
  };

  // One table's part of a push: dim gradient floats per key, in key order.
  struct TableGradients {
    std::string table;
    absl::Span<const uint64_t> keys;
    absl::Span<const float> gradients;
    int dim = 0;
    // The table's learning rate is multiplied by this for this push.
    float learning_rate_scale = 1.0f;
  };

  virtual ~TrainingClient() = default;

  // The incarnation pushes and clock reports carry; set before any push.
  virtual uint64_t incarnation() const = 0;
  virtual void set_incarnation(uint64_t incarnation) = 0;

  // How rows and gradients travel (base/wire_format.h).
  virtual WireFormat wire_format() const = 0;

  // Declares `spec` on every shard (idempotent).
  virtual absl::Status DeclareTable(const TableSpec& spec) = 0;

  // Pulls from several tables at once.
  virtual absl::Status Pull(absl::Span<const TableRows> pulls) = 0;

  // Pushes to several tables at once, exactly once per shard request
  // (retries included), as step `clock` of `worker`.
  virtual absl::Status Push(absl::Span<const TableGradients> pushes,
                            uint32_t worker, int64_t clock) = 0;

  // Reports to the clock coordinator, retrying for `retry_for` (negative:
  // the client's own limit).
  virtual absl::StatusOr<ClockResponse> Clock(const ClockRequest& request,
                                              absl::Duration retry_for) = 0;
};

}  // namespace ps::client

#endif  // PS_CLIENT_TRAINING_CLIENT_H_
