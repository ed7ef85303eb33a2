#include "model/input/tf_example.h"

#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/arena.h"
#include "proto/tf_example.pb.h"

namespace ps::model {
namespace {

// A feature's values as the text a line would hold, each one.
std::vector<std::string> ValuesAsText(const tfexample::Feature& feature) {
  std::vector<std::string> values;
  switch (feature.kind_case()) {
    case tfexample::Feature::kBytesList:
      values.assign(feature.bytes_list().value().begin(),
                    feature.bytes_list().value().end());
      break;
    case tfexample::Feature::kFloatList:
      for (float value : feature.float_list().value())
        values.push_back(absl::StrFormat("%.9g", value));
      break;
    case tfexample::Feature::kInt64List:
      for (int64_t value : feature.int64_list().value())
        values.push_back(absl::StrCat(value));
      break;
    case tfexample::Feature::KIND_NOT_SET:
      break;
  }
  return values;
}

}  // namespace

absl::Status ParseTfExample(absl::string_view record, const InputLayout& layout,
                            Example* example, LabelColumn label) {
  // On an arena: a record's ~40 map entries cost one allocation, not 80.
  google::protobuf::Arena arena;
  tfexample::Example& parsed =
      *google::protobuf::Arena::CreateMessage<tfexample::Example>(&arena);
  if (!parsed.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return absl::InvalidArgumentError("not a serialized tf.Example");
  }
  const auto& features = parsed.features().feature();
  // Scoring: a record with none of the labels leaves them out.
  bool any_label = false;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    if (layout.columns[c] == ColumnKind::kLabel &&
        features.count(layout.feature_names[c]) > 0) {
      any_label = true;
    }
  }
  const bool skip_labels = label == LabelColumn::kOptional && !any_label;
  std::vector<std::string> texts;
  texts.reserve(layout.columns.size());
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    const ColumnKind kind = layout.columns[c];
    if (kind == ColumnKind::kLabel && skip_labels) continue;
    const std::string& name = layout.feature_names[c];
    auto found = features.find(name);
    std::vector<std::string> values;
    if (found != features.end()) values = ValuesAsText(found->second);
    if (kind == ColumnKind::kMulti || kind == ColumnKind::kSequence) {
      for (const std::string& value : values) {
        if (value.find(layout.multi_separator) != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              "feature ", name, " has a value holding the multi separator '",
              std::string(1, layout.multi_separator), "'"));
        }
      }
      std::string joined;
      for (size_t v = 0; v < values.size(); ++v) {
        if (v > 0) joined.push_back(layout.multi_separator);
        joined += values[v];
      }
      texts.push_back(std::move(joined));
      continue;
    }
    if (values.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature ", name, " has ", values.size(),
                       " values; its column takes one"));
    }
    texts.push_back(values.empty() ? std::string() : std::move(values[0]));
  }
  absl::InlinedVector<absl::string_view, 48> columns(texts.begin(),
                                                     texts.end());
  absl::Status status = ParseColumnValues(columns, layout, example, label);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tf.Example: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace ps::model
