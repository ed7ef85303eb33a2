// File: worker/criteo_parser.h
//
// Parses one line of a Criteo-format click log:
//   label \t I1 .. I13 \t C1 .. C26
// label is 0 or 1; I* are integers (empty = missing); C* are categorical
// strings (hex in Criteo's data; empty = missing). Thread-safe (pure).

#ifndef PS_WORKER_CRITEO_PARSER_H_
#define PS_WORKER_CRITEO_PARSER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/features.h"

namespace ps::worker {

// Whether a line may leave out the label column (to be scored, as in
// Criteo's unlabeled test file: I1 .. I13 \t C1 .. C26).
enum class LabelColumn { kRequired, kOptional };

// Fills `example` from `line` (no trailing newline). INVALID_ARGUMENT, with
// the reason, for a wrong column count, a label other than 0/1, or a
// non-integer in an integer column.
absl::Status ParseCriteoLine(absl::string_view line, Example* example,
                             LabelColumn label = LabelColumn::kRequired);

}  // namespace ps::worker

#endif  // PS_WORKER_CRITEO_PARSER_H_
