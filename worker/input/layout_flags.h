// File: worker/input/layout_flags.h
//
// The input-layout flags every binary that reads or writes click logs takes
// (--format, --header, --columns, --multi_separator, --multi_pooling,
// --crosses, and the reading limit --max_values_per_field; see
// model/input/input_layout.h), defined once so that they read the same
// everywhere. Linked into main()s only.

#ifndef PS_WORKER_INPUT_LAYOUT_FLAGS_H_
#define PS_WORKER_INPUT_LAYOUT_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/input/input_layout.h"

namespace ps::worker {

// The layout the flags give (Criteo's when none is set).
absl::StatusOr<model::InputLayout> InputLayoutFromFlags();

// `base` with the layout flags given on the command line (`argv` as main()
// received it) laid over it: a flag left out keeps base's value, even where
// base differs from the flag's default (a trained layout's seq limit too,
// unless --max_values_per_field is given). Sets `*any_given` to whether
// any flag that lays out features was given (the limit does not count).
absl::StatusOr<model::InputLayout> InputLayoutOverFlags(
    const model::InputLayout& base, int argc, char** argv, bool* any_given);

}  // namespace ps::worker

#endif  // PS_WORKER_INPUT_LAYOUT_FLAGS_H_
