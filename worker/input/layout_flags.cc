#include "worker/input/layout_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

ABSL_FLAG(std::string, format, "tsv",
          "Click-log format: tsv or csv (lines, the column delimiter a tab "
          "or a comma; no quoting), or tfrecord (TFRecord files of "
          "tf.Example records, plain or gzip; --columns then names each "
          "column's feature, KIND:FEATURE).");
ABSL_FLAG(bool, header, false, "Each file's first line is a header: skip it.");
ABSL_FLAG(std::string, columns, "label,dense*13,cat*26",
          "The columns in file order, comma-separated: label, label:NAME (one "
          "of several labels, each a task's in the model spec; empty: "
          "unknown), dense, cat, multi (values separated by "
          "--multi_separator), seq (an ordered list of values, oldest first, "
          "separated likewise: a user's recent items; seq:F when they are "
          "values of cat or multi field F, whose keys they then share), "
          "skip, id (kept verbatim "
          "and written beside "
          "each ps_predict probability; at most one), or weight (a positive "
          "number multiplying the line's loss; at most one), each but "
          "label:NAME optionally *N to repeat; at least one label and one "
          "dense, cat or multi column. With --format=tfrecord each column "
          "names the feature it reads, KIND:FEATURE "
          "(label:clicked,dense:price,cat:user_id,seq:history:2; a plain "
          "label reads the feature \"label\"), no skip and no *N. Default: "
          "Criteo's (ps_predict: the export's).");
ABSL_FLAG(std::string, multi_separator, "|",
          "What separates the values of a multi column.");
ABSL_FLAG(std::string, multi_pooling, "sum",
          "How a multi column's values pool into one embedding and one wide "
          "weight: sum, mean or max (the largest value of each dimension).");
ABSL_FLAG(
    std::string, crosses, "",
    "Feature crosses for the wide part: comma-separated I:J pairs of "
    "categorical fields, numbered from 0 over the cat, multi and seq columns "
    "in order.");
ABSL_FLAG(int32_t, max_values_per_field, 1000,
          "Most keys a multi column, or a cross, may give one line (a cross "
          "of two multi columns gives every pair); a line over it is a "
          "counted bad line. A seq column keeps its most recent this many "
          "values instead; a model's card records that number, which "
          "scoring its export keeps unless this is given.");

namespace ps::worker {

namespace {

constexpr const char* kLayoutFlags[] = {"format",        "header",
                                        "columns",       "multi_separator",
                                        "multi_pooling", "crosses"};

// Whether `--name` (or -name, --name=..., --noname) is among argv's flags.
bool OnCommandLine(absl::string_view name, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (!absl::ConsumePrefix(&arg, "-")) continue;
    }
    arg = arg.substr(0, arg.find('='));
    if (arg == name || (absl::ConsumePrefix(&arg, "no") && arg == name))
      return true;
  }
  return false;
}

// `layout` with --max_values_per_field as both its limits, or with
// `sequence_limit` as the seq columns' where that is not 0 (a trained
// layout's, the flag not given).
absl::StatusOr<model::InputLayout> WithLimit(
    absl::StatusOr<model::InputLayout> layout, int sequence_limit = 0) {
  if (!layout.ok()) return layout;
  const int limit = absl::GetFlag(FLAGS_max_values_per_field);
  if (limit < 1) {
    return absl::InvalidArgumentError("--max_values_per_field must be >= 1");
  }
  layout->max_values_per_field = limit;
  layout->max_sequence_values = sequence_limit == 0 ? limit : sequence_limit;
  return layout;
}

}  // namespace

absl::StatusOr<model::InputLayout> InputLayoutFromFlags() {
  return WithLimit(model::MakeInputLayout(
      absl::GetFlag(FLAGS_format), absl::GetFlag(FLAGS_header),
      absl::GetFlag(FLAGS_columns), absl::GetFlag(FLAGS_multi_separator),
      absl::GetFlag(FLAGS_multi_pooling), absl::GetFlag(FLAGS_crosses)));
}

absl::StatusOr<model::InputLayout> InputLayoutOverFlags(
    const model::InputLayout& base, int argc, char** argv, bool* any_given) {
  *any_given = false;
  for (const char* name : kLayoutFlags)
    *any_given = *any_given || OnCommandLine(name, argc, argv);
  auto given = [&](const char* name) {
    return OnCommandLine(name, argc, argv);
  };
  // A TFRecord layout's columns name features: read as lines, they need
  // the lines' own --columns (and the reverse).
  if (given("format") && !given("columns") &&
      (absl::GetFlag(FLAGS_format) == "tfrecord") != base.tfrecord) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format=", absl::GetFlag(FLAGS_format),
        " reads the model's inputs from another format than it was "
        "trained on (",
        base.tfrecord ? "tfrecord" : "lines",
        "): give --columns in that format too, the same fields in the same "
        "order"));
  }
  std::vector<std::string> crosses;
  for (const auto& [first, second] : base.crosses)
    crosses.push_back(absl::StrCat(first, ":", second));
  return WithLimit(
      model::MakeInputLayout(
          given("format")         ? absl::GetFlag(FLAGS_format)
          : base.tfrecord         ? "tfrecord"
          : base.delimiter == ',' ? "csv"
                                  : "tsv",
          given("header") ? absl::GetFlag(FLAGS_header) : base.header,
          given("columns") ? absl::GetFlag(FLAGS_columns)
                           : model::ColumnsSpec(base),
          given("multi_separator") ? absl::GetFlag(FLAGS_multi_separator)
                                   : std::string(1, base.multi_separator),
          given("multi_pooling")
              ? absl::GetFlag(FLAGS_multi_pooling)
              : std::string(model::PoolingName(base.multi_pooling)),
          given("crosses") ? absl::GetFlag(FLAGS_crosses)
                           : absl::StrJoin(crosses, ",")),
      given("max_values_per_field") ? 0 : base.max_sequence_values);
}

}  // namespace ps::worker
