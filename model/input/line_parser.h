// File: model/input/line_parser.h
//
// Parses one click-log line laid out as an InputLayout says (see
// input_layout.h) into an Example. Thread-safe (pure).

#ifndef PS_MODEL_INPUT_LINE_PARSER_H_
#define PS_MODEL_INPUT_LINE_PARSER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"

namespace ps::model {

// Whether a line may leave out the label columns (to be scored, as in
// Criteo's unlabeled test file), having that many columns fewer than the
// layout (all of them: a line has every label or none).
enum class LabelColumn { kRequired, kOptional };

// Fills `example` from `line` (no trailing newline; a trailing '\r' is
// dropped). INVALID_ARGUMENT, with the reason, for a wrong column count, a
// label other than 0/1 (or empty, for a named label: unknown), a dense value
// that is not a finite number, or (when the label is required: training) a
// weight that is not a positive one. Scoring ignores the weight column:
// example->weight is 1.
absl::Status ParseLine(absl::string_view line, const InputLayout& layout,
                       Example* example,
                       LabelColumn label = LabelColumn::kRequired);

// What ParseLine() does once the line is split: fills `example` from one
// value per column of `layout` (or one per column but the labels, when
// `label` is kOptional), with the same checks. For records that are not
// lines (TFRecord's tf.Example: tf_example.h).
absl::Status ParseColumnValues(absl::Span<const absl::string_view> columns,
                               const InputLayout& layout, Example* example,
                               LabelColumn label = LabelColumn::kRequired);

// Appends the keys of `layout`'s crosses (wide-only fields) to `example`,
// whose fields' keys and ends are filled in: what ParseLine() does last,
// for examples given as keys rather than lines. INVALID_ARGUMENT for a
// cross of more keys than layout.max_values_per_field.
absl::Status AddCrosses(const InputLayout& layout, Example* example);

}  // namespace ps::model

#endif  // PS_MODEL_INPUT_LINE_PARSER_H_
