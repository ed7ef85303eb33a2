// File: base/optimizer.h
//
// The optimizers a shard applies pushes with (embedding/), and with which a
// worker replays its own push that a shard has not applied yet
// (worker/own_updates.h): one library, so that shards and workers of one
// build compute the same bits.
// A stored row is `dim` weights followed by StateFloats(dim) floats of
// optimizer state; Apply() updates both in place from one summed gradient.
// Optimizers are immutable after creation and thread-safe; callers serialise
// access to each row.
//
// Defaults (used when an OptimizerSpec field is zero):
//   SGD      learning_rate 0.01
//   Adagrad  learning_rate 0.05, initial_accumulator 0.1, epsilon 1e-10
//   Adam     learning_rate 0.001, beta1 0.9, beta2 0.999, epsilon 1e-8
//   FTRL     learning_rate (alpha) 0.05, ftrl_beta 1.0, l1 0, l2 0
// FTRL-Proximal keeps (z, n) per weight and recomputes the weight from them
// on every update, so a row's initial weights only matter until its first
// push.
// A spec with later_columns trains each group of columns with its own
// optimizer, as if the group were a row of its own: the same bits as two
// tables of the same keys, in one row.

#ifndef PS_BASE_OPTIMIZER_H_
#define PS_BASE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace ps {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Creates the optimizer `spec` describes, with defaults filled in.
  // INVALID_ARGUMENT for a negative or non-finite hyper-parameter, or a
  // beta outside [0, 1).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerSpec& spec);
  // Create() for rows of `dim` weights: INVALID_ARGUMENT also when a group
  // of later columns would be empty (its first_column at or past `dim`, or
  // not above the group's before it) or has groups of its own.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerSpec& spec, int dim);

  // Returns `spec` with every zero field that has a default replaced by it.
  static OptimizerSpec WithDefaults(const OptimizerSpec& spec);

  // Floats of state per row of `dim` weights.
  virtual int StateFloats(int dim) const = 0;

  // Writes the state of a row that has never been updated.
  virtual void InitState(int dim, float* state) const = 0;

  // Applies `gradient` (dim floats) to `weights` (dim) and `state`, with the
  // learning rate (FTRL's alpha) times `learning_rate_scale` (a worker's
  // schedule or staleness damping; 1 leaves it as the spec says). Returns
  // false if a weight or state value it wrote is NaN or infinite (finite
  // inputs can overflow): the caller decides whether to undo the update.
  virtual bool Apply(const float* gradient, int dim, float learning_rate_scale,
                     float* weights, float* state) const = 0;
  bool Apply(const float* gradient, int dim, float* weights,
             float* state) const {
    return Apply(gradient, dim, 1.0f, weights, state);
  }
};

// Returns the index of the first NaN or infinity in `gradients`, or -1 if
// every value is finite: what an optimizer can apply. Vectorized: a push's
// gradients are checked whole before anything is applied.
int64_t FirstNonFinite(absl::Span<const float> gradients);

// The one table of optimizer names ("sgd", "adagrad", "adam", "ftrl"), for
// flags and for what ps_admin prints.
const char* OptimizerName(OptimizerSpec::Kind kind);
// How ps_admin names a spec's optimizers: OptimizerName() of its kind,
// then "+" and each later group's as "ftrl@16" (its first column).
std::string OptimizerNames(const OptimizerSpec& spec);
// The optimizer named `name`; false (and `*kind` untouched) for none.
bool OptimizerKindFromName(absl::string_view name, OptimizerSpec::Kind* kind);

}  // namespace ps

#endif  // PS_BASE_OPTIMIZER_H_
