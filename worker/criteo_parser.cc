#include "worker/criteo_parser.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps::worker {

absl::Status ParseCriteoLine(absl::string_view line, Example* example,
                             LabelColumn label) {
  constexpr int kColumns = 1 + kDenseFeatures + kCategoricalFields;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  absl::string_view columns[kColumns];
  int count = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    if (count == kColumns) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kColumns, " tab-separated columns"));
    }
    columns[count++] = line.substr(start, tab == absl::string_view::npos
                                              ? absl::string_view::npos
                                              : tab - start);
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  // Where the features start: after the label, if the line has one.
  int first = 1;
  if (count == kColumns - 1 && label == LabelColumn::kOptional) {
    first = 0;
    example->label = 0.0f;
    example->has_label = false;
  } else if (count != kColumns) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " tab-separated columns, expected ", kColumns,
        label == LabelColumn::kOptional
            ? absl::StrCat(" (or ", kColumns - 1, " without the label)")
            : ""));
  } else if (columns[0] == "0" || columns[0] == "1") {
    example->label = columns[0] == "1" ? 1.0f : 0.0f;
    example->has_label = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("label must be 0 or 1, got \"", columns[0], "\""));
  }
  for (int i = 0; i < kDenseFeatures; ++i) {
    const absl::string_view raw = columns[first + i];
    int64_t value = 0;
    if (!raw.empty() && !absl::SimpleAtoi(raw, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("integer column I", i + 1, " is \"", raw, "\""));
    }
    example->dense[i] = DenseFeature(static_cast<double>(value));
  }
  for (int f = 0; f < kCategoricalFields; ++f) {
    example->keys[f] = FeatureKey(f, columns[first + kDenseFeatures + f]);
  }
  return absl::OkStatus();
}

}  // namespace ps::worker
