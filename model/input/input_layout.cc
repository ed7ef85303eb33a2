#include "model/input/input_layout.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps::model {
namespace {

constexpr absl::string_view kCriteoText = "criteo";
// A plain label column's name.
constexpr absl::string_view kPlainLabel = "label";
// How a space separator is written in a layout's text (space-separated).
constexpr absl::string_view kSpace = "space";
// A repeat larger than any real log's column count: a typo, not a layout.
constexpr int kMaxRepeat = 100000;

bool IsName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

// How many fields (cat, multi and seq columns) `columns` has.
int FieldCount(const std::vector<ColumnKind>& columns) {
  return static_cast<int>(
      std::count(columns.begin(), columns.end(), ColumnKind::kCategorical) +
      std::count(columns.begin(), columns.end(), ColumnKind::kMulti) +
      std::count(columns.begin(), columns.end(), ColumnKind::kSequence));
}

// A TFRecord feature's name: letters, digits and _ . / -.
bool IsFeatureName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '.' && c != '/' && c != '-') {
      return false;
    }
  }
  return true;
}

// A tfrecord layout's item, KIND:NAME (or a plain `label`, or
// seq:NAME:F): its feature name appended to layout->feature_names, and the
// item as the text form says it (label:NAME, label, dense, seq:F, ...).
absl::StatusOr<std::string> TakeFeatureName(absl::string_view item,
                                            InputLayout* layout) {
  if (item == "label") {
    layout->feature_names.emplace_back("label");
    return std::string(item);
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
  const bool shares_keys = parts.size() == 3 && parts[0] == "seq";
  int key_field = 0;
  const bool known_kind = parts[0] == "label" || parts[0] == "dense" ||
                          parts[0] == "cat" || parts[0] == "multi" ||
                          parts[0] == "seq" || parts[0] == "id" ||
                          parts[0] == "weight";
  if ((parts.size() != 2 && !shares_keys) || !known_kind ||
      !IsFeatureName(parts[1]) ||
      (shares_keys &&
       (!absl::SimpleAtoi(parts[2], &key_field) || key_field < 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--columns: \"", item,
        "\" must be KIND:FEATURE with --format=tfrecord (label:NAME, "
        "dense:NAME, cat:NAME, multi:NAME, seq:NAME or seq:NAME:F (F a field's "
        "number), id:NAME, weight:NAME; names of letters, digits and _ . / "
        "-; no skip, no *N)"));
  }
  layout->feature_names.emplace_back(parts[1]);
  if (parts[0] == "label") return std::string(item);
  return shares_keys ? absl::StrCat("seq:", parts[2]) : std::string(parts[0]);
}

// Fills layout->columns, label_names and sequence_key_fields (and
// feature_names, for a tfrecord layout) from a --columns value.
absl::Status ParseColumns(absl::string_view spec, InputLayout* layout) {
  layout->columns.clear();
  layout->label_names.clear();
  layout->sequence_key_fields.clear();
  layout->feature_names.clear();
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    item = absl::StripAsciiWhitespace(item);
    std::string text_form;
    if (layout->tfrecord) {
      if (item.find('*') != absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--columns: \"", item,
            "\": with --format=tfrecord each column names its feature (no "
            "*N)"));
      }
      absl::StatusOr<std::string> named = TakeFeatureName(item, layout);
      if (!named.ok()) return named.status();
      text_form = *std::move(named);
      item = text_form;
    }
    int repeat = 1;
    if (const size_t star = item.find('*'); star != absl::string_view::npos) {
      if (!absl::SimpleAtoi(item.substr(star + 1), &repeat) || repeat < 1 ||
          repeat > kMaxRepeat) {
        return absl::InvalidArgumentError(
            absl::StrCat("--columns: \"", item, "\" must repeat a kind 1 to ",
                         kMaxRepeat, " times (kind*N)"));
      }
      item = absl::StripAsciiWhitespace(item.substr(0, star));
    }
    ColumnKind kind;
    if (absl::ConsumePrefix(&item, "label:")) {
      if (!IsName(item) || item == kPlainLabel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--columns: \"label:", item,
            "\" must name its label with letters, digits and _ (not "
            "\"label\", a plain label column's name)"));
      }
      if (repeat != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--columns: \"label:", item, "\" names one column (no *N)"));
      }
      layout->label_names.emplace_back(item);
      kind = ColumnKind::kLabel;
    } else if (item == "label") {
      layout->label_names.insert(layout->label_names.end(), repeat,
                                 std::string(kPlainLabel));
      kind = ColumnKind::kLabel;
    } else if (item == "dense") {
      kind = ColumnKind::kDense;
    } else if (item == "cat") {
      kind = ColumnKind::kCategorical;
    } else if (item == "multi") {
      kind = ColumnKind::kMulti;
    } else if (item == "seq" || absl::StartsWith(item, "seq:")) {
      kind = ColumnKind::kSequence;
      if (absl::ConsumePrefix(&item, "seq:")) {
        int key_field = -1;
        if (!absl::SimpleAtoi(item, &key_field) || key_field < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--columns: \"seq:", item,
              "\" must name a field by its number (seq:F, F from 0 over the "
              "cat, multi and seq columns)"));
        }
        const int fields = FieldCount(layout->columns);
        for (int r = 0; r < repeat; ++r)
          layout->sequence_key_fields[fields + r] = key_field;
      }
    } else if (item == "skip") {
      kind = ColumnKind::kSkip;
    } else if (item == "id") {
      kind = ColumnKind::kId;
    } else if (item == "weight") {
      kind = ColumnKind::kWeight;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--columns: unknown column kind \"", item,
          "\" (label, label:NAME, dense, cat, multi, seq, skip, id or "
          "weight, optionally *N)"));
    }
    layout->columns.insert(layout->columns.end(), repeat, kind);
  }
  if (layout->label_names.empty()) {
    return absl::InvalidArgumentError(
        "--columns must have a label column (label, or label:NAME for each "
        "of several)");
  }
  // seq:F names a cat or multi field.
  std::vector<ColumnKind> field_kinds;
  for (ColumnKind kind : layout->columns) {
    if (kind == ColumnKind::kCategorical || kind == ColumnKind::kMulti ||
        kind == ColumnKind::kSequence) {
      field_kinds.push_back(kind);
    }
  }
  for (const auto& [sequence, key_field] : layout->sequence_key_fields) {
    if (key_field >= static_cast<int>(field_kinds.size()) ||
        field_kinds[key_field] == ColumnKind::kSequence) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--columns: seq:", key_field, " (field ", sequence,
          ") must name a cat or multi field, 0 to ", field_kinds.size() - 1,
          " over the cat, multi and seq columns"));
    }
  }
  const std::vector<std::string>& names = layout->feature_names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::find(names.begin(), names.begin() + i, names[i]) !=
        names.begin() + i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--columns: two columns read the feature \"", names[i], "\""));
    }
  }
  for (size_t i = 0; i < layout->label_names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (layout->label_names[i] == layout->label_names[j]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--columns: two label columns are named \"", layout->label_names[i],
            "\" (name each of several labels: label:click,label:convert)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<char> OneCharacter(absl::string_view flag,
                                  absl::string_view value) {
  if (value.size() != 1 || value[0] == '\n' || value[0] == '\r') {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " must be one character, not \"", value, "\""));
  }
  return value[0];
}

}  // namespace

InputLayout InputLayout::Criteo() {
  InputLayout layout;
  layout.columns.push_back(ColumnKind::kLabel);
  layout.columns.insert(layout.columns.end(), 13, ColumnKind::kDense);
  layout.columns.insert(layout.columns.end(), 26, ColumnKind::kCategorical);
  return layout;
}

int InputLayout::dense_features() const {
  return static_cast<int>(
      std::count(columns.begin(), columns.end(), ColumnKind::kDense));
}

int InputLayout::fields() const {
  return static_cast<int>(
      std::count(columns.begin(), columns.end(), ColumnKind::kCategorical) +
      std::count(columns.begin(), columns.end(), ColumnKind::kMulti) +
      std::count(columns.begin(), columns.end(), ColumnKind::kSequence));
}

bool InputLayout::has_label() const {
  return std::find(columns.begin(), columns.end(), ColumnKind::kLabel) !=
         columns.end();
}

int InputLayout::labels() const {
  return static_cast<int>(
      std::count(columns.begin(), columns.end(), ColumnKind::kLabel));
}

bool InputLayout::label_may_be_unknown(int label) const {
  return label_names[label] != kPlainLabel;
}

uint32_t InputLayout::KeyField(int field) const {
  auto found = sequence_key_fields.find(field);
  return static_cast<uint32_t>(
      found == sequence_key_fields.end() ? field : found->second);
}

int InputLayout::LabelIndex(absl::string_view name) const {
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (label_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

bool InputLayout::has_id() const {
  return std::find(columns.begin(), columns.end(), ColumnKind::kId) !=
         columns.end();
}

bool InputLayout::has_weight() const {
  return std::find(columns.begin(), columns.end(), ColumnKind::kWeight) !=
         columns.end();
}

bool InputLayout::has_sequence() const {
  return std::find(columns.begin(), columns.end(), ColumnKind::kSequence) !=
         columns.end();
}

ColumnKind InputLayout::field_kind(int field) const {
  for (ColumnKind kind : columns) {
    if (kind != ColumnKind::kCategorical && kind != ColumnKind::kMulti &&
        kind != ColumnKind::kSequence) {
      continue;
    }
    if (field-- == 0) return kind;
  }
  return ColumnKind::kCategorical;
}

bool InputLayout::has_multi() const {
  return std::find(columns.begin(), columns.end(), ColumnKind::kMulti) !=
         columns.end();
}

absl::StatusOr<InputLayout> MakeInputLayout(absl::string_view format,
                                            bool header,
                                            absl::string_view columns,
                                            absl::string_view multi_separator,
                                            absl::string_view multi_pooling,
                                            absl::string_view crosses) {
  InputLayout layout;
  if (format == "tsv") {
    layout.delimiter = '\t';
  } else if (format == "csv") {
    layout.delimiter = ',';
  } else if (format == "tfrecord") {
    layout.tfrecord = true;
    if (header) {
      return absl::InvalidArgumentError(
          "--header: TFRecord files have no header line");
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format must be tsv, csv or tfrecord, not \"", format, "\""));
  }
  layout.header = header;
  if (absl::Status s = ParseColumns(columns, &layout); !s.ok()) return s;
  if (layout.fields() == 0 && layout.dense_features() == 0) {
    return absl::InvalidArgumentError(
        "--columns must have at least one feature column (dense, cat or "
        "multi)");
  }
  if (std::count(layout.columns.begin(), layout.columns.end(),
                 ColumnKind::kId) > 1) {
    return absl::InvalidArgumentError(
        "--columns may have at most one id column");
  }
  if (std::count(layout.columns.begin(), layout.columns.end(),
                 ColumnKind::kWeight) > 1) {
    return absl::InvalidArgumentError(
        "--columns may have at most one weight column");
  }
  auto separator = OneCharacter("multi_separator", multi_separator);
  if (!separator.ok()) return separator.status();
  layout.multi_separator = *separator;
  if (layout.multi_separator == layout.delimiter) {
    return absl::InvalidArgumentError(
        "--multi_separator must differ from the column delimiter");
  }
  if (multi_pooling == "sum") {
    layout.multi_pooling = Field::SUM;
  } else if (multi_pooling == "mean") {
    layout.multi_pooling = Field::MEAN;
  } else if (multi_pooling == "max") {
    layout.multi_pooling = Field::MAX;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--multi_pooling must be sum, mean or max, not \"",
                     multi_pooling, "\""));
  }
  for (absl::string_view pair :
       absl::StrSplit(crosses, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(pair, ':');
    int first = -1, second = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
        !absl::SimpleAtoi(parts[1], &second) || first < 0 || second < 0 ||
        first >= layout.fields() || second >= layout.fields() ||
        first == second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--crosses: \"", pair, "\" must be I:J, two different fields in [0, ",
          layout.fields(), ") (the cat, multi and seq columns, in order)"));
    }
    if (std::find(layout.crosses.begin(), layout.crosses.end(),
                  std::make_pair(first, second)) != layout.crosses.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--crosses: \"", pair, "\" is given twice"));
    }
    layout.crosses.emplace_back(first, second);
  }
  return layout;
}

absl::string_view ColumnKindName(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::kLabel:
      return "label";
    case ColumnKind::kDense:
      return "dense";
    case ColumnKind::kCategorical:
      return "cat";
    case ColumnKind::kMulti:
      return "multi";
    case ColumnKind::kSequence:
      return "seq";
    case ColumnKind::kId:
      return "id";
    case ColumnKind::kWeight:
      return "weight";
    default:
      return "skip";
  }
}

std::string ColumnsSpec(const InputLayout& layout) {
  // A column's --columns item: its kind, or a named label's label:NAME.
  std::vector<std::string> items;
  size_t label = 0;
  int field = 0;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    const ColumnKind kind = layout.columns[c];
    const bool is_field = kind == ColumnKind::kCategorical ||
                          kind == ColumnKind::kMulti ||
                          kind == ColumnKind::kSequence;
    const int this_field = is_field ? field++ : -1;
    const bool shares_keys = kind == ColumnKind::kSequence &&
                             layout.sequence_key_fields.count(this_field) > 0;
    if (layout.tfrecord && c < layout.feature_names.size()) {
      const std::string& name = layout.feature_names[c];
      if (kind == ColumnKind::kLabel) {
        items.push_back(layout.label_names[label++] == kPlainLabel
                            ? std::string("label")
                            : absl::StrCat("label:", name));
      } else if (shares_keys) {
        items.push_back(absl::StrCat(
            "seq:", name, ":", layout.sequence_key_fields.at(this_field)));
      } else {
        items.push_back(absl::StrCat(ColumnKindName(kind), ":", name));
      }
    } else if (kind == ColumnKind::kLabel &&
               label < layout.label_names.size() &&
               layout.label_names[label++] != kPlainLabel) {
      items.push_back(absl::StrCat("label:", layout.label_names[label - 1]));
    } else if (shares_keys) {
      items.push_back(
          absl::StrCat("seq:", layout.sequence_key_fields.at(this_field)));
    } else {
      items.push_back(std::string(ColumnKindName(kind)));
    }
  }
  std::vector<std::string> runs;
  for (size_t i = 0; i < items.size();) {
    size_t end = i;
    while (end < items.size() && items[end] == items[i]) ++end;
    runs.push_back(end - i == 1 ? items[i]
                                : absl::StrCat(items[i], "*", end - i));
    i = end;
  }
  return absl::StrJoin(runs, ",");
}

std::string LayoutText(const InputLayout& layout) {
  const InputLayout criteo = InputLayout::Criteo();
  if (!layout.tfrecord && layout.delimiter == criteo.delimiter &&
      !layout.header && layout.columns == criteo.columns &&
      layout.label_names == criteo.label_names && layout.crosses.empty() &&
      layout.sequence_key_fields.empty()) {
    return std::string(kCriteoText);
  }
  std::vector<std::string> crosses;
  for (const auto& [first, second] : layout.crosses)
    crosses.push_back(absl::StrCat(first, ":", second));
  return absl::StrCat("format=",
                      layout.tfrecord           ? "tfrecord"
                      : layout.delimiter == ',' ? "csv"
                                                : "tsv",
                      " header=", layout.header ? 1 : 0,
                      " columns=", ColumnsSpec(layout), " multi_separator=",
                      layout.multi_separator == ' '
                          ? std::string(kSpace)
                          : std::string(1, layout.multi_separator),
                      " multi_pooling=", PoolingName(layout.multi_pooling),
                      " crosses=", absl::StrJoin(crosses, ","));
}

absl::string_view PoolingName(Field::Pooling pooling) {
  switch (pooling) {
    case Field::MEAN:
      return "mean";
    case Field::MAX:
      return "max";
    default:
      return "sum";
  }
}

absl::StatusOr<InputLayout> ParseLayoutText(absl::string_view text) {
  if (text.empty() || text == kCriteoText) return InputLayout::Criteo();
  std::string format = "tsv", columns, separator = "|", pooling = "sum",
              crosses;
  bool header = false;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> key_value =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const auto& [key, value] = key_value;
    if (key == "format") {
      format = std::string(value);
    } else if (key == "header") {
      header = value == "1";
    } else if (key == "columns") {
      columns = std::string(value);
    } else if (key == "multi_separator") {
      separator = value == kSpace ? " " : std::string(value);
    } else if (key == "multi_pooling") {
      pooling = std::string(value);
    } else if (key == "crosses") {
      crosses = std::string(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "input layout \"", text, "\": unknown part \"", key, "\""));
    }
  }
  return MakeInputLayout(format, header, columns, separator, pooling, crosses);
}

}  // namespace ps::model
