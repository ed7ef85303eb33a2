// File: worker/layout_flags.h
//
// The input-layout flags every binary that reads or writes click logs takes
// (--format, --header, --columns, --multi_separator, --multi_pooling,
// --crosses; see input_layout.h), defined once so that they read the same
// everywhere. Linked into main()s only.

#ifndef PS_WORKER_LAYOUT_FLAGS_H_
#define PS_WORKER_LAYOUT_FLAGS_H_

#include "absl/status/statusor.h"
#include "worker/input_layout.h"

namespace ps::worker {

// The layout the flags give (Criteo's when none is set).
absl::StatusOr<InputLayout> InputLayoutFromFlags();

// Whether any of the layout flags was given on the command line.
bool LayoutFlagsGiven();

}  // namespace ps::worker

#endif  // PS_WORKER_LAYOUT_FLAGS_H_
