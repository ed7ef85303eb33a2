// File: model/builtin_specs.h
//
// The built-in models as specs (proto/model_spec.proto), fitted to a click
// log's columns: every cat, multi and seq column is a field, the dense columns
// one LOG1P group. docs/models.md draws each.
//
//   lr         wide(fields, crosses, dense): a weight per key and per dense
//              feature, and a bias
//   wide_deep  lr + mlp(concat(embedding(fields), dense), hidden..., 1)
//   deepfm     wide_deep + fm(embedding(fields))
//   dcn_v2     mlp(cross(concat(embedding(fields), dense)), hidden..., 1)
//   dlrm       bottom = mlp(dense, 64, dim); mlp(concat(bottom,
//              dot_interaction(bottom, embedding(fields))), hidden..., 1)
//   mmoe       a task per label (two at least): mmoe(concat(embedding(fields),
//              dense), 4 experts of hidden...), and per task its slice's
//              mlp(.., 1) + its own wide part (fields, crosses, dense)
//   din        wide_deep whose deep input adds attention_pooling(query =
//              embedding(the first cat field), keys = embedding(the first
//              seq column's max_sequence_length most recent items))
//
// `ps_worker --print_model_spec=NAME` prints one to start a spec of one's
// own from.

#ifndef PS_MODEL_BUILTIN_SPECS_H_
#define PS_MODEL_BUILTIN_SPECS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/model_plan.h"
#include "proto/model_spec.pb.h"

namespace ps::model {

// What the flags say about a built-in (ps_worker's --embedding_dim,
// --hidden, the optimizers, --crosses, --multi_pooling).
struct BuiltinOptions {
  // Embedding dimension of the fields' table. Default: 16.
  int embedding_dim = 16;
  // Hidden widths of the (top) MLP; its last layer, of width 1, comes
  // after them. Default: 256, 128.
  std::vector<int> hidden = {256, 128};
  // Rows of the embedding table start uniform on +-this. Default: 0.05.
  float embedding_init_scale = 0.05f;
  // Defaults: Adagrad (0.05, accumulator 0.1), FTRL (0.05), Adam (0.001).
  OptimizerSpec embedding_optimizer;
  OptimizerSpec wide_optimizer;
  OptimizerSpec dense_optimizer;
  // Crossed fields, as 0-based positions among the cat, multi and seq
  // columns.
  std::vector<std::pair<int, int>> crosses;
  Field::Pooling pooling = Field::SUM;
  // The click log's label columns' names, in file order (mmoe makes a task
  // of each). Default: one plain label.
  std::vector<std::string> labels = {"label"};
  // mmoe's experts, and din's sequence length and attention units.
  // Defaults: 4, 50, {36}.
  int experts = 4;
  int max_sequence_length = 50;
  std::vector<int> attention_units = {36};
  // wide_deep and deepfm without crosses: the servers keep the wide weight
  // of a key in its embedding row, after the embedding (Table.stored_with):
  // one lookup of each key instead of two. Other models, and these with
  // crosses (whose wide part reads keys the embedding does not), keep
  // their tables apart. Default: false (the tables of runs before).
  bool wide_in_embedding_row = false;

  BuiltinOptions();
};

// The built-in names, in the order docs list them.
const std::vector<std::string>& BuiltinModelNames();

// Built-in `name` for a click log whose columns are `columns`.
// INVALID_ARGUMENT for an unknown name, or a model the columns cannot make
// (dlrm needs two rows to interact: two fields, or a field and dense
// columns; mmoe two labels; din a seq column and a cat column; every other
// one label), naming what is missing. deepfm of fewer than two fields has
// no pairwise term.
absl::StatusOr<ModelSpec> BuiltinModelSpec(absl::string_view name,
                                           absl::Span<const ColumnUse> columns,
                                           const BuiltinOptions& options);

// The spec as text, as a spec file holds it.
std::string ModelSpecText(const ModelSpec& spec);

}  // namespace ps::model

#endif  // PS_MODEL_BUILTIN_SPECS_H_
