// File: model/input/tf_example.h
//
// Parses one TFRecord record, a serialized tf.Example (proto/tf_example.proto,
// whose wire format is walked with protobuf's CodedInputStream: no message
// or map is built) into an Example, as line_parser.h parses a line: each column
// of a tfrecord layout reads the feature its name says (InputLayout::
// feature_names), whose values become the text that column of a line would
// hold (an int64 in decimal, a float to nine digits, bytes as they are; a
// multi or seq column's values joined by the multi separator; a missing
// feature: empty), and line_parser.h's ParseColumnValues() does the rest.
// So a record and the line of the same values give the same example, with
// the same checks and the same keys. Thread-safe (pure).

#ifndef PS_MODEL_INPUT_TF_EXAMPLE_H_
#define PS_MODEL_INPUT_TF_EXAMPLE_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"
#include "model/input/line_parser.h"

namespace ps::model {

// Parses records for one layout: the layout's feature names indexed once.
// `layout` must outlive it. Thread-safe (Parse is const).
class TfExampleParser {
 public:
  // REQUIRES: layout.tfrecord.
  explicit TfExampleParser(const InputLayout& layout);

  // As ParseTfExample() below.
  absl::Status Parse(absl::string_view record, Example* example,
                     LabelColumn label = LabelColumn::kRequired) const;

 private:
  const InputLayout& layout_;
  absl::flat_hash_map<std::string, int> column_of_feature_;
};

// REQUIRES: layout.tfrecord. INVALID_ARGUMENT, naming the feature, for bytes
// that are not a tf.Example, a feature of several values in a column that
// takes one (label, dense, cat, id, weight), a multi or seq value that holds
// the multi separator, and whatever ParseColumnValues() refuses. With
// `label` kOptional a record without any of the label features is one to
// score.
absl::Status ParseTfExample(absl::string_view record, const InputLayout& layout,
                            Example* example,
                            LabelColumn label = LabelColumn::kRequired);

}  // namespace ps::model

#endif  // PS_MODEL_INPUT_TF_EXAMPLE_H_
