#include "model/input/line_parser.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps::model {
namespace {

const char* DelimiterName(char delimiter) {
  return delimiter == ',' ? "comma" : "tab";
}

bool ParseDense(absl::string_view raw, double* value) {
  if (raw.empty()) {
    *value = 0.0;
    return true;
  }
  int64_t integer = 0;
  if (absl::SimpleAtoi(raw, &integer)) {
    *value = static_cast<double>(integer);
    return true;
  }
  double real = 0;
  if (!absl::SimpleAtod(raw, &real) || !std::isfinite(real)) return false;
  *value = real;
  return true;
}

// A weight: a positive number that is finite as a float.
bool ParseWeight(absl::string_view raw, float* weight) {
  double value = 0;
  if (!absl::SimpleAtod(raw, &value) || !(value > 0.0) ||
      value > std::numeric_limits<float>::max()) {
    return false;
  }
  *weight = static_cast<float>(value);
  return *weight > 0.0f;
}

// Calls on_delimiter(position) for each `delimiter` byte of `text`, in
// order: sixteen bytes a compare where SSE2 is there, one pass over the
// line (columns are ~8 bytes, too short for a search call per column to
// pay).
template <typename OnDelimiter>
void ForEachDelimiter(absl::string_view text, char delimiter,
                      OnDelimiter on_delimiter) {
  size_t base = 0;
#ifdef __SSE2__
  const __m128i wanted = _mm_set1_epi8(delimiter);
  for (; base + 16 <= text.size(); base += 16) {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + base));
    uint32_t mask =
        static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, wanted)));
    while (mask != 0) {
      on_delimiter(base + static_cast<size_t>(__builtin_ctz(mask)));
      mask &= mask - 1;
    }
  }
#endif
  for (; base < text.size(); ++base) {
    if (text[base] == delimiter) on_delimiter(base);
  }
}

// Splits `line` into its columns: `expected` of them, or that many less the
// label columns when the labels may be left out.
absl::Status SplitColumns(absl::string_view line, const InputLayout& layout,
                          LabelColumn label,
                          absl::InlinedVector<absl::string_view, 48>* columns) {
  const int expected = static_cast<int>(layout.columns.size());
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // Each view is written in place: one built on the stack and copied in
  // whole is read back by a 16-byte load that waits on its two stores.
  columns->resize(static_cast<size_t>(expected));
  absl::string_view* out = columns->data();
  int count = 0;
  size_t start = 0;
  bool too_many = false;
  // The last column follows the last delimiter: at most expected - 1.
  ForEachDelimiter(line, layout.delimiter, [&](size_t position) {
    if (count + 1 >= expected) {
      too_many = true;
      return;
    }
    out[count++] = line.substr(start, position - start);
    start = position + 1;
  });
  if (too_many || expected == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", expected, " ",
                     DelimiterName(layout.delimiter), "-separated columns"));
  }
  out[count++] = line.substr(start);
  columns->resize(static_cast<size_t>(count));
  const int unlabeled = expected - layout.labels();
  if (count == expected ||
      (count == unlabeled && label == LabelColumn::kOptional)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      count, " ", DelimiterName(layout.delimiter),
      "-separated columns, expected ", expected,
      label == LabelColumn::kOptional
          ? absl::StrCat(" (or ", unlabeled, " without the ",
                         layout.labels() == 1 ? "label" : "labels", ")")
          : ""));
}

// Appends the keys of multi or seq column `column` (1-based), field `field`:
// one per non-empty value, in order, or the field's missing key when there
// is none.
absl::Status AddMultiKeys(absl::string_view raw, int column, uint32_t field,
                          const InputLayout& layout, Example* example) {
  const size_t first = example->keys.size();
  const bool sequence = layout.columns[column - 1] == ColumnKind::kSequence;
  const size_t limit = static_cast<size_t>(
      sequence ? layout.max_sequence_values : layout.max_values_per_field);
  if (sequence) {
    // A history longer than the limit keeps its most recent values (an
    // empty item is no value): from the end, find where the limit-th value
    // begins and drop what comes before.
    size_t kept = 0;
    size_t end = raw.size();
    while (true) {
      const size_t separator = end == 0
                                   ? absl::string_view::npos
                                   : raw.rfind(layout.multi_separator, end - 1);
      const size_t begin =
          separator == absl::string_view::npos ? 0 : separator + 1;
      if (end > begin && ++kept == limit) {
        raw.remove_prefix(begin);
        break;
      }
      if (separator == absl::string_view::npos) break;
      end = separator;
    }
  }
  size_t value_start = 0;
  while (value_start <= raw.size()) {
    size_t value_end = raw.find(layout.multi_separator, value_start);
    if (value_end == absl::string_view::npos) value_end = raw.size();
    if (value_end > value_start) {
      if (example->keys.size() - first == limit) {
        return absl::InvalidArgumentError(
            absl::StrCat("multi column ", column,
                         " has more values than --max_values_per_field=",
                         layout.max_values_per_field));
      }
      example->keys.push_back(
          FeatureKey(field, raw.substr(value_start, value_end - value_start)));
    }
    value_start = value_end + 1;
  }
  if (example->keys.size() == first)
    example->keys.push_back(FeatureKey(field, ""));
  example->slot_end.push_back(example->keys.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseLine(absl::string_view line, const InputLayout& layout,
                       Example* example, LabelColumn label) {
  absl::InlinedVector<absl::string_view, 48> columns;
  if (absl::Status split = SplitColumns(line, layout, label, &columns);
      !split.ok()) {
    return split;
  }
  return ParseColumnValues(columns, layout, example, label);
}

absl::Status ParseColumnValues(absl::Span<const absl::string_view> columns,
                               const InputLayout& layout, Example* example,
                               LabelColumn label) {
  const int unlabeled =
      static_cast<int>(layout.columns.size()) - layout.labels();
  if (columns.size() != layout.columns.size() &&
      (label == LabelColumn::kRequired ||
       static_cast<int>(columns.size()) != unlabeled)) {
    return absl::InvalidArgumentError(absl::StrCat(
        columns.size(), " column values, expected ", layout.columns.size()));
  }
  const bool labeled = columns.size() == layout.columns.size();
  example->label = 0.0f;
  example->has_label = labeled;
  example->labels.clear();
  example->label_known.clear();
  example->weight = 1.0f;
  example->dense.clear();
  example->keys.clear();
  example->slot_end.clear();
  example->id.clear();
  int column = 0;  // in `columns`
  uint32_t field = 0;
  for (int c = 0; c < static_cast<int>(layout.columns.size()); ++c) {
    const ColumnKind kind = layout.columns[c];
    if (kind == ColumnKind::kLabel && !labeled) continue;
    const absl::string_view raw = columns[column++];
    switch (kind) {
      case ColumnKind::kLabel: {
        const int index = static_cast<int>(example->labels.size());
        const bool unknown = raw.empty() && layout.label_may_be_unknown(index);
        if (!unknown && raw != "0" && raw != "1") {
          return absl::InvalidArgumentError(absl::StrCat(
              "label ", layout.label_names[index], " (column ", c + 1,
              ") must be 0 or 1",
              layout.label_may_be_unknown(index) ? ", or empty (unknown)" : "",
              ", got \"", raw, "\""));
        }
        example->labels.push_back(raw == "1" ? 1.0f : 0.0f);
        example->label_known.push_back(!unknown);
        break;
      }
      case ColumnKind::kDense: {
        double value = 0;
        if (!ParseDense(raw, &value)) {
          return absl::InvalidArgumentError(
              absl::StrCat("dense column ", c + 1, " is \"", raw,
                           "\", not a finite number"));
        }
        example->dense.push_back(value);
        break;
      }
      case ColumnKind::kCategorical:
        example->keys.push_back(FeatureKey(field++, raw));
        example->slot_end.push_back(example->keys.size());
        break;
      case ColumnKind::kMulti:
      case ColumnKind::kSequence: {
        // A seq:F column's values are field F's keys.
        const uint32_t key_field =
            kind == ColumnKind::kSequence
                ? layout.KeyField(static_cast<int>(field))
                : field;
        ++field;
        if (absl::Status added =
                AddMultiKeys(raw, c + 1, key_field, layout, example);
            !added.ok()) {
          return added;
        }
        break;
      }
      case ColumnKind::kSkip:
        break;
      case ColumnKind::kId:
        example->id.assign(raw.data(), raw.size());
        break;
      case ColumnKind::kWeight:
        // Scoring (the label optional) has no use for the weight.
        if (label == LabelColumn::kRequired &&
            !ParseWeight(raw, &example->weight)) {
          return absl::InvalidArgumentError(
              absl::StrCat("weight (column ", c + 1,
                           ") must be a positive "
                           "finite number, got \"",
                           raw, "\""));
        }
        break;
    }
  }
  if (!example->labels.empty()) example->label = example->labels[0];
  return AddCrosses(layout, example);
}

absl::Status AddCrosses(const InputLayout& layout, Example* example) {
  for (size_t x = 0; x < layout.crosses.size(); ++x) {
    const auto [first, second] = layout.crosses[x];
    const uint32_t first_end = example->slot_end[first];
    const uint32_t second_end = example->slot_end[second];
    const uint64_t pairs = uint64_t{first_end - example->slot_begin(first)} *
                           (second_end - example->slot_begin(second));
    if (pairs > static_cast<uint64_t>(layout.max_values_per_field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cross ", first, ":", second, " gives ", pairs,
                       " keys, more than --max_values_per_field=",
                       layout.max_values_per_field));
    }
    for (uint32_t i = example->slot_begin(first); i < first_end; ++i) {
      for (uint32_t j = example->slot_begin(second); j < second_end; ++j) {
        example->keys.push_back(
            CrossKey(x, example->keys[i], example->keys[j]));
      }
    }
    example->slot_end.push_back(example->keys.size());
  }
  return absl::OkStatus();
}

}  // namespace ps::model
