#include "worker/layout_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"

ABSL_FLAG(std::string, format, "tsv",
          "Click-log column delimiter: tsv (tab) or csv (comma); no quoting.");
ABSL_FLAG(bool, header, false, "Each file's first line is a header: skip it.");
ABSL_FLAG(std::string, columns, "label,dense*13,cat*26",
          "The columns in file order, comma-separated: label, dense, cat, "
          "multi (values separated by --multi_separator) or skip, each "
          "optionally *N to repeat. Default: Criteo's.");
ABSL_FLAG(std::string, multi_separator, "|",
          "What separates the values of a multi column.");
ABSL_FLAG(std::string, multi_pooling, "sum",
          "How a multi column's values pool into one embedding and one wide "
          "weight: sum or mean.");
ABSL_FLAG(std::string, crosses, "",
          "Feature crosses for the wide part: comma-separated I:J pairs of "
          "categorical fields, numbered from 0 over the cat and multi columns "
          "in order.");

namespace ps::worker {

absl::StatusOr<InputLayout> InputLayoutFromFlags() {
  return MakeInputLayout(
      absl::GetFlag(FLAGS_format), absl::GetFlag(FLAGS_header),
      absl::GetFlag(FLAGS_columns), absl::GetFlag(FLAGS_multi_separator),
      absl::GetFlag(FLAGS_multi_pooling), absl::GetFlag(FLAGS_crosses));
}

bool LayoutFlagsGiven() {
  for (const char* name : {"format", "header", "columns", "multi_separator",
                           "multi_pooling", "crosses"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue())
      return true;
  }
  return false;
}

}  // namespace ps::worker
