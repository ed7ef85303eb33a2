#include "model/input/tf_example.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace ps::model {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kLengthDelimited = 2;

// The field number and wire type of `tag`.
int FieldOf(uint32_t tag) { return static_cast<int>(tag >> 3); }
int WireTypeOf(uint32_t tag) { return static_cast<int>(tag & 7); }

// Reads fields until the current limit; `field` handles one (returns false
// on malformed bytes) or skips it.
template <typename Handle>
bool ReadFields(CodedInputStream* in, Handle field) {
  while (in->BytesUntilLimit() > 0) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0 || !field(tag)) return false;
  }
  return true;
}

// The length-delimited payload that follows, as a view of `bytes` (the
// stream's whole input); the stream moves past it.
bool ReadPayload(CodedInputStream* in, absl::string_view bytes,
                 absl::string_view* payload) {
  uint32_t length = 0;
  if (!in->ReadVarint32(&length)) return false;
  const int at = in->CurrentPosition();
  if (length > bytes.size() - at || !in->Skip(static_cast<int>(length))) {
    return false;
  }
  *payload = bytes.substr(at, length);
  return true;
}

// The values of a BytesList (1), FloatList (2) or Int64List (3), as text.
bool ReadList(int kind, absl::string_view list,
              std::vector<std::string>* values) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(list.data()),
                      static_cast<int>(list.size()));
  in.PushLimit(static_cast<int>(list.size()));
  return ReadFields(&in, [&](uint32_t tag) {
    if (FieldOf(tag) != 1) return WireFormatLite::SkipField(&in, tag);
    const int wire = WireTypeOf(tag);
    if (kind == 1) {
      if (wire != kLengthDelimited) return false;
      absl::string_view value;
      if (!ReadPayload(&in, list, &value)) return false;
      values->emplace_back(value);
      return true;
    }
    // One number (fixed32 floats, varint int64s).
    auto read_one = [&]() {
      if (kind == 2) {
        uint32_t bits = 0;
        if (!in.ReadLittleEndian32(&bits)) return false;
        float value;
        std::memcpy(&value, &bits, sizeof(value));
        values->push_back(absl::StrFormat("%.9g", value));
      } else {
        uint64_t bits = 0;
        if (!in.ReadVarint64(&bits)) return false;
        values->push_back(absl::StrCat(static_cast<int64_t>(bits)));
      }
      return true;
    };
    if (wire != kLengthDelimited) {  // one value at a time
      return wire == (kind == 2 ? 5 : 0) && read_one();
    }
    uint32_t length = 0;  // packed
    if (!in.ReadVarint32(&length) ||
        length > static_cast<uint32_t>(in.BytesUntilLimit())) {
      return false;
    }
    const CodedInputStream::Limit limit =
        in.PushLimit(static_cast<int>(length));
    while (in.BytesUntilLimit() > 0) {
      if (!read_one()) return false;
    }
    in.PopLimit(limit);
    return true;
  });
}

// A Feature's values as text: its last list's (a oneof).
bool ReadFeature(absl::string_view feature, std::vector<std::string>* values) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(feature.data()),
                      static_cast<int>(feature.size()));
  in.PushLimit(static_cast<int>(feature.size()));
  return ReadFields(&in, [&](uint32_t tag) {
    const int kind = FieldOf(tag);
    if (kind < 1 || kind > 3) return WireFormatLite::SkipField(&in, tag);
    absl::string_view list;
    if (WireTypeOf(tag) != kLengthDelimited ||
        !ReadPayload(&in, feature, &list)) {
      return false;
    }
    values->clear();
    return ReadList(kind, list, values);
  });
}

}  // namespace

TfExampleParser::TfExampleParser(const InputLayout& layout) : layout_(layout) {
  for (size_t c = 0; c < layout.feature_names.size(); ++c)
    column_of_feature_[layout.feature_names[c]] = static_cast<int>(c);
}

absl::Status TfExampleParser::Parse(absl::string_view record, Example* example,
                                    LabelColumn label) const {
  const InputLayout& layout = layout_;
  // Each column's Feature, found by walking the record's wire format
  // (Example.features = 1, Features.feature = 1, a map entry's key = 1 and
  // value = 2; the last entry of a name wins): no map is built, and the
  // features no column reads are skipped unparsed.
  std::vector<absl::string_view> found(layout.columns.size());
  std::vector<bool> present(layout.columns.size(), false);
  CodedInputStream in(reinterpret_cast<const uint8_t*>(record.data()),
                      static_cast<int>(record.size()));
  in.PushLimit(static_cast<int>(record.size()));
  const bool walked = ReadFields(&in, [&](uint32_t tag) {
    if (FieldOf(tag) != 1) return WireFormatLite::SkipField(&in, tag);
    absl::string_view features;
    if (WireTypeOf(tag) != kLengthDelimited ||
        !ReadPayload(&in, record, &features)) {
      return false;
    }
    // Walk the Features message's entries (a view into the record).
    CodedInputStream entries(reinterpret_cast<const uint8_t*>(features.data()),
                             static_cast<int>(features.size()));
    entries.PushLimit(static_cast<int>(features.size()));
    return ReadFields(&entries, [&](uint32_t entry_tag) {
      if (FieldOf(entry_tag) != 1) {
        return WireFormatLite::SkipField(&entries, entry_tag);
      }
      absl::string_view entry;
      if (WireTypeOf(entry_tag) != kLengthDelimited ||
          !ReadPayload(&entries, features, &entry)) {
        return false;
      }
      absl::string_view key, value;
      CodedInputStream fields(reinterpret_cast<const uint8_t*>(entry.data()),
                              static_cast<int>(entry.size()));
      fields.PushLimit(static_cast<int>(entry.size()));
      const bool read = ReadFields(&fields, [&](uint32_t field_tag) {
        const int number = FieldOf(field_tag);
        if (number != 1 && number != 2) {
          return WireFormatLite::SkipField(&fields, field_tag);
        }
        return WireTypeOf(field_tag) == kLengthDelimited &&
               ReadPayload(&fields, entry, number == 1 ? &key : &value);
      });
      if (!read) return false;
      auto column = column_of_feature_.find(key);
      if (column != column_of_feature_.end()) {
        found[column->second] = value;
        present[column->second] = true;
      }
      return true;
    });
  });
  if (!walked) {
    return absl::InvalidArgumentError("not a serialized tf.Example");
  }
  // Scoring: a record with none of the labels leaves them out.
  bool any_label = false;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    if (layout.columns[c] == ColumnKind::kLabel && present[c]) any_label = true;
  }
  const bool skip_labels = label == LabelColumn::kOptional && !any_label;
  std::vector<std::string> texts;
  texts.reserve(layout.columns.size());
  std::vector<std::string> values;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    const ColumnKind kind = layout.columns[c];
    if (kind == ColumnKind::kLabel && skip_labels) continue;
    const std::string& name = layout.feature_names[c];
    values.clear();
    if (present[c] && !ReadFeature(found[c], &values)) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature ", name, " is not a tf.Example Feature"));
    }
    if (kind == ColumnKind::kMulti || kind == ColumnKind::kSequence) {
      std::string joined;
      for (size_t v = 0; v < values.size(); ++v) {
        if (values[v].find(layout.multi_separator) != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              "feature ", name, " has a value holding the multi separator '",
              std::string(1, layout.multi_separator), "'"));
        }
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

absl::Status ParseTfExample(absl::string_view record, const InputLayout& layout,
                            Example* example, LabelColumn label) {
  return TfExampleParser(layout).Parse(record, example, label);
}

}  // namespace ps::model
