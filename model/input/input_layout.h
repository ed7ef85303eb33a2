// File: model/input/input_layout.h
//
// How a click log's lines are laid out: the delimiter, whether each file
// starts with a header line, and the kind of every column in file order:
//
//   label   0 or 1 (a line may leave it out when scoring; see line_parser.h)
//   label:NAME  one of several labels (a click, a conversion), 0 or 1, or
//           empty: unknown, and left out of that label's task's loss. A
//           plain label column is named "label"; names are letters, digits
//           and _, different from each other. A model spec's tasks read
//           labels by name (proto/model_spec.proto).
//   dense   a number x, fed to the model as log(1 + max(x, 0)); empty: 0
//   cat     one categorical value (any string; empty is a value of its own)
//   multi   several categorical values separated by multi_separator,
//           embedded one by one and pooled (summed or averaged) into the
//           field's one embedding and one wide weight
//   seq     an ordered list of categorical values (a user's recent items,
//           oldest first) separated by multi_separator: a field like multi
//           (embedded and pooled), and what a spec's `sequence` reads
//           position by position, most recent first
//   seq:F   the same, listing values of cat or multi field F (0-based over
//           the fields): its keys are F's, so that an item and a candidate
//           of the same id are one key, one row (DIN's shared embedding)
//   skip    ignored (a timestamp, a column the model does not use)
//   id      kept verbatim with the example, not a feature: what ps_predict
//           writes beside each probability so that scores join back to
//           their rows (at most one id column)
//   weight  a positive number multiplying the example's loss (down-sampled
//           negatives carry the rate they were kept at, inverted); the loss
//           is the weighted mean over the batch. Not a feature; not read
//           when scoring (line_parser.h). At most one.
//
// TFRecord files (--format=tfrecord) hold tf.Example records, not lines:
// there every column names the feature it reads, KIND:NAME
// ("label:clicked,dense:price,cat:user_id,multi:tags,seq:history"; a plain
// `label` reads the feature "label"; seq:NAME:F shares field F's keys), in
// the order the model numbers them; features not named are not read (no
// skip), and no *N.
//
// A layout has at least one label column (a plain one, or named ones) and
// at least one feature column (dense, cat or multi): all-categorical and
// all-dense layouts are both layouts.
//
// The categorical fields are the cat, multi and seq columns in file order,
// numbered from 0; a cross I:J is a wide-only feature whose keys hash the
// pair of keys of fields I and J (every pair, when a field is multi).
// Criteo's layout (label, dense*13, cat*26 in TSV, no header) is the
// default, and is written "criteo" in a model card so that cards and exports
// of that layout read the same everywhere.

#ifndef PS_MODEL_INPUT_INPUT_LAYOUT_H_
#define PS_MODEL_INPUT_INPUT_LAYOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model_spec.pb.h"

namespace ps::model {

enum class ColumnKind {
  kLabel,
  kDense,
  kCategorical,
  kMulti,
  kSequence,
  kSkip,
  kId,
  kWeight
};

struct InputLayout {
  // The column delimiter: '\t' (--format=tsv) or ',' (--format=csv). No
  // quoting: a value never holds the delimiter.
  char delimiter = '\t';
  // Records of tf.Example in TFRecord files (--format=tfrecord) rather than
  // lines; then feature_names says which feature each column reads.
  bool tfrecord = false;
  std::vector<std::string> feature_names;
  // Whether each file's first line is a header (skipped).
  bool header = false;
  // Every column, in file order (InputLayout::Criteo() fills in Criteo's).
  std::vector<ColumnKind> columns;
  // One name per label column, in file order: "label" for a plain one.
  std::vector<std::string> label_names = {"label"};
  // seq:F columns: the seq column's field -> F, whose keys its values are.
  std::map<int, int> sequence_key_fields;
  // What separates the values of a multi column. Default: '|'.
  char multi_separator = '|';
  // How a multi column's values pool into one row of each table the
  // built-ins look them up in (a spec file says so per field). Default: sum.
  Field::Pooling multi_pooling = Field::SUM;
  // Pairs of categorical fields (0-based over the cat, multi and seq columns)
  // crossed into the wide part.
  std::vector<std::pair<int, int>> crosses;
  // A reading limit, not part of the model: the most keys a multi column or
  // a cross may give one line (a longer one is a bad line). Default: 1000.
  int max_values_per_field = 1000;
  // How many of its most recent values a seq column keeps (the older ones
  // are dropped): part of the model, which its card records
  // (ModelCard.max_values_per_field). --max_values_per_field sets both
  // limits. Default: 1000.
  int max_sequence_values = 1000;

  // Criteo's layout.
  static InputLayout Criteo();

  // Counts of each kind; fields() counts cat, multi and seq columns.
  int dense_features() const;
  int fields() const;
  bool has_label() const;
  // How many label columns there are.
  int labels() const;
  // Whether a label column may be empty (unknown): its column is named
  // (label:NAME). A plain label column is always 0 or 1.
  bool label_may_be_unknown(int label) const;
  // The position among the label columns of the one named `name`; -1 if
  // none.
  int LabelIndex(absl::string_view name) const;
  // The field whose id seeds field `field`'s keys: F for a seq:F column,
  // else the field itself.
  uint32_t KeyField(int field) const;
  bool has_multi() const;
  bool has_sequence() const;
  // The kind of field `field`'s column (0-based over the cat, multi and seq
  // columns): kCategorical, kMulti or kSequence.
  ColumnKind field_kind(int field) const;
  bool has_id() const;
  bool has_weight() const;
  // The categorical slots of an example: fields() then one per cross.
  int slots() const { return fields() + static_cast<int>(crosses.size()); }
  // Whether every field holds exactly one key and there are no crosses (each
  // slot one key): the fast path.
  bool one_key_per_slot() const {
    return !has_multi() && !has_sequence() && crosses.empty();
  }
};

// Builds a layout from the flags' values (--format, --header, --columns,
// --multi_separator, --multi_pooling, --crosses). INVALID_ARGUMENT, naming
// the flag, for a bad value: an unknown kind or format, a repeat that is not
// a positive number, no label, two labels of one name (two plain ones), a
// label name that is not letters, digits and _, no feature column (dense, cat
// or multi), several id or weight columns, a cross
// that is not I:J of two different fields that exist, the same cross twice,
// a multi separator that is the delimiter.
absl::StatusOr<InputLayout> MakeInputLayout(absl::string_view format,
                                            bool header,
                                            absl::string_view columns,
                                            absl::string_view multi_separator,
                                            absl::string_view multi_pooling,
                                            absl::string_view crosses);

// A column kind as --columns names it ("label", "dense", "cat", "multi",
// "seq", "skip", "id", "weight").
absl::string_view ColumnKindName(ColumnKind kind);

// The columns as a --columns value, runs folded ("label,dense*13,cat*26";
// named labels as "label:click,label:convert").
std::string ColumnsSpec(const InputLayout& layout);

// A layout as one line of text for a model card: "criteo" for Criteo's,
// else "format=csv header=1 columns=... multi_separator=| multi_pooling=sum
// crosses=0:1,2:3"; and back. ParseLayoutText also takes "" as Criteo's
// (cards written before layouts were recorded).
std::string LayoutText(const InputLayout& layout);
// "sum", "mean" or "max", as --multi_pooling and a layout's text say it.
absl::string_view PoolingName(Field::Pooling pooling);

absl::StatusOr<InputLayout> ParseLayoutText(absl::string_view text);

}  // namespace ps::model

#endif  // PS_MODEL_INPUT_INPUT_LAYOUT_H_
