#include "model/builtin_specs.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"

namespace ps::model {
namespace {

// Adds layer `name` reading `inputs`; returns it to set its kind.
Layer* NewLayer(ModelSpec* spec, const std::string& name,
                const std::vector<std::string>& inputs) {
  Layer* layer = spec->add_layer();
  layer->set_name(name);
  for (const std::string& input : inputs) layer->add_inputs(input);
  return layer;
}

MlpLayer* AddMlp(ModelSpec* spec, const std::string& name,
                 const std::string& input, std::vector<int> units) {
  MlpLayer* mlp = NewLayer(spec, name, {input})->mutable_mlp();
  for (int width : units) mlp->add_units(width);
  return mlp;
}

void AddTable(ModelSpec* spec, const std::string& name, int dim,
              float init_scale, const OptimizerSpec& optimizer) {
  Table* table = spec->add_table();
  table->set_name(name);
  table->set_dim(dim);
  table->set_init_scale(init_scale);
  *table->mutable_optimizer() = optimizer;
}

}  // namespace

BuiltinOptions::BuiltinOptions() {
  embedding_optimizer.set_kind(OptimizerSpec::ADAGRAD);
  embedding_optimizer.set_learning_rate(0.05f);
  embedding_optimizer.set_initial_accumulator(0.1f);
  wide_optimizer.set_kind(OptimizerSpec::FTRL);
  wide_optimizer.set_learning_rate(0.05f);
  dense_optimizer.set_kind(OptimizerSpec::ADAM);
  dense_optimizer.set_learning_rate(0.001f);
}

const std::vector<std::string>& BuiltinModelNames() {
  static const auto* names = new std::vector<std::string>{
      "lr", "wide_deep", "deepfm", "dcn_v2", "dlrm", "mmoe", "din"};
  return *names;
}

namespace {

// Which built-in a spec is for.
struct Builtin {
  explicit Builtin(absl::string_view name)
      : lr(name == "lr"),
        wide_deep(name == "wide_deep"),
        deepfm(name == "deepfm"),
        dcn_v2(name == "dcn_v2"),
        dlrm(name == "dlrm"),
        mmoe(name == "mmoe"),
        din(name == "din") {}
  bool known() const {
    return lr || wide_deep || deepfm || dcn_v2 || dlrm || mmoe || din;
  }
  bool has_wide() const { return lr || wide_deep || deepfm || mmoe || din; }

  bool lr, wide_deep, deepfm, dcn_v2, dlrm, mmoe, din;
};

// What the inputs of a built-in are: its fields, whether a dense group is
// there, and what feeds its wide part.
struct BuiltinInputs {
  std::vector<std::string> fields;
  bool has_dense = false;
  std::vector<std::string> wide_inputs;
  // din: the first cat field's name and the first seq column's position.
  std::string first_categorical;
  int first_sequence_column = -1;
};

// Adds the inputs: every categorical column a field, the dense columns one
// group, and the crosses.
absl::StatusOr<BuiltinInputs> AddInputs(absl::string_view name,
                                        const Builtin& builtin,
                                        absl::Span<const ColumnUse> columns,
                                        const BuiltinOptions& options,
                                        ModelSpec* spec) {
  BuiltinInputs inputs;
  DenseInput dense;
  dense.set_name("dense");
  dense.set_transform(DenseInput::LOG1P);
  for (size_t c = 0; c < columns.size(); ++c) {
    if (columns[c] == ColumnUse::kDense) dense.add_columns(c);
    // A seq column is a field like a multi one (pooled).
    if (columns[c] != ColumnUse::kCategorical &&
        columns[c] != ColumnUse::kSequence) {
      continue;
    }
    Field* field = spec->add_field();
    field->set_name(absl::StrCat("field_", inputs.fields.size()));
    field->set_column(c);
    field->set_pooling(options.pooling);
    inputs.fields.push_back(field->name());
    if (columns[c] == ColumnUse::kCategorical &&
        inputs.first_categorical.empty()) {
      inputs.first_categorical = field->name();
    }
    if (columns[c] == ColumnUse::kSequence &&
        inputs.first_sequence_column < 0) {
      inputs.first_sequence_column = static_cast<int>(c);
    }
  }
  inputs.has_dense = dense.columns_size() > 0;
  if (inputs.has_dense) *spec->add_dense() = dense;
  inputs.wide_inputs = inputs.fields;
  if (!builtin.has_wide() && !options.crosses.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("crosses feed the wide part, which ", name,
                     " has not: write a spec with a wide layer to use them"));
  }
  const int fields = static_cast<int>(inputs.fields.size());
  for (const auto& [first, second] : options.crosses) {
    if (first < 0 || second < 0 || first >= fields || second >= fields) {
      return absl::InvalidArgumentError(
          absl::StrCat("cross ", first, ":", second, " names a field the ",
                       fields, " cat and multi columns do not have"));
    }
    Cross* cross = spec->add_cross();
    cross->set_name(absl::StrCat("cross_", first, "_", second));
    cross->add_fields(inputs.fields[first]);
    cross->add_fields(inputs.fields[second]);
    cross->set_pooling(options.pooling);
    inputs.wide_inputs.push_back(cross->name());
  }
  if (builtin.mmoe && options.labels.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     " makes a task of each label and needs two at least "
                     "(label:NAME in --columns); the columns have ",
                     options.labels.size()));
  }
  if (!builtin.mmoe && options.labels.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has one output; the click log has ", options.labels.size(),
        " labels (", absl::StrJoin(options.labels, ", "),
        "): use mmoe, or a spec with a task per label"));
  }
  if (builtin.din &&
      (inputs.first_sequence_column < 0 || inputs.first_categorical.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        " needs a seq column (a user's recent items) and a cat column "
        "(the candidate) in --columns; they have ",
        inputs.first_sequence_column < 0 ? "no seq column" : "no cat column"));
  }
  if (builtin.dlrm && fields + (inputs.has_dense ? 1 : 0) < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " needs at least two rows to interact; the columns give ", fields,
        " field(s)"));
  }
  return inputs;
}

// Adds DLRM's bottom MLP, interaction and top MLP, ending at "top".
void AddDlrm(const BuiltinInputs& inputs, bool embeds, std::vector<int> top,
             const BuiltinOptions& options, ModelSpec* spec) {
  std::vector<std::string> rows;
  if (inputs.has_dense) {
    AddMlp(spec, "bottom", "dense", {64, options.embedding_dim})
        ->set_last_activation(MlpLayer::RELU);
    rows.push_back("bottom");
  }
  if (embeds) rows.push_back("embedding");
  NewLayer(spec, "interaction", rows)->mutable_dot_interaction();
  if (inputs.has_dense) {
    NewLayer(spec, "top_input", {"bottom", "interaction"})->mutable_concat();
  }
  AddMlp(spec, "top", inputs.has_dense ? "top_input" : "interaction", top);
}

// Adds din's interest: the first seq column's recent items, embedded, pooled
// by attention against the first cat field's embedding.
void AddInterest(const BuiltinInputs& inputs, const BuiltinOptions& options,
                 ModelSpec* spec) {
  Sequence* sequence = spec->add_sequence();
  sequence->set_name("history");
  sequence->set_column(inputs.first_sequence_column);
  sequence->set_max_length(options.max_sequence_length);
  NewLayer(spec, "query", {inputs.first_categorical})
      ->mutable_embedding()
      ->set_table("embedding");
  NewLayer(spec, "history_keys", {"history"})
      ->mutable_embedding()
      ->set_table("embedding");
  AttentionPoolingLayer* attention =
      NewLayer(spec, "interest", {"query", "history_keys"})
          ->mutable_attention_pooling();
  for (int units : options.attention_units) attention->add_units(units);
}

// Adds mmoe's experts over `deep_input` and per label a task: its slice's
// tower plus a wide part of its own.
void AddMmoe(const BuiltinInputs& inputs, const std::string& deep_input,
             const BuiltinOptions& options, ModelSpec* spec) {
  const int tasks = static_cast<int>(options.labels.size());
  MmoeLayer* mmoe = NewLayer(spec, "mmoe", {deep_input})->mutable_mmoe();
  mmoe->set_num_experts(options.experts);
  mmoe->set_num_tasks(tasks);
  for (int units : options.hidden) mmoe->add_units(units);
  const int width = options.hidden.empty() ? 0 : options.hidden.back();
  std::vector<std::string> wide_inputs = inputs.wide_inputs;
  if (inputs.has_dense) wide_inputs.push_back("dense");
  for (int t = 0; t < tasks; ++t) {
    const std::string& label = options.labels[t];
    SliceLayer* slice =
        NewLayer(spec, "mmoe_" + label, {"mmoe"})->mutable_slice();
    slice->set_begin(t * width);
    slice->set_width(width);
    AddMlp(spec, "tower_" + label, "mmoe_" + label, {1});
    AddTable(spec, "wide_" + label, 1, 0.0f, options.wide_optimizer);
    NewLayer(spec, "wide_" + label, wide_inputs)
        ->mutable_wide()
        ->set_table("wide_" + label);
    NewLayer(spec, "logit_" + label, {"tower_" + label, "wide_" + label})
        ->mutable_add();
    Task* task = spec->add_task();
    task->set_name(label);
    task->set_label(label);
    task->set_output("logit_" + label);
  }
}

// Adds the tables and layers of `builtin` over `inputs`; the names of the
// terms summed into the logit (none for mmoe, whose tasks name theirs).
std::vector<std::string> AddLayers(const Builtin& builtin, BuiltinInputs inputs,
                                   const BuiltinOptions& options,
                                   ModelSpec* spec) {
  const bool embeds = !builtin.lr && !inputs.fields.empty();
  if (embeds) {
    AddTable(spec, "embedding", options.embedding_dim,
             options.embedding_init_scale, options.embedding_optimizer);
    NewLayer(spec, "embedding", inputs.fields)
        ->mutable_embedding()
        ->set_table("embedding");
  }
  std::vector<int> top = options.hidden;
  top.push_back(1);
  std::vector<std::string> logit_terms;
  // The wide part of lr, wide_deep and deepfm: a weight per key and per
  // dense feature, and a bias. (Its tensors, wide.dense_weights and
  // wide.bias, and the MLP's, mlp.<l>.weights and .bias, keep the names
  // these models' tables had before specs, so that their checkpoints and
  // exports load.)
  if (builtin.has_wide() && !builtin.mmoe) {
    AddTable(spec, "wide", 1, 0.0f, options.wide_optimizer);
    if (options.wide_in_embedding_row && embeds && !builtin.din &&
        inputs.wide_inputs == inputs.fields) {
      spec->mutable_table(spec->table_size() - 1)->set_stored_with("embedding");
    }
    if (inputs.has_dense) inputs.wide_inputs.push_back("dense");
    NewLayer(spec, "wide", inputs.wide_inputs)
        ->mutable_wide()
        ->set_table("wide");
    logit_terms.push_back("wide");
  }
  // The deep input: the embeddings and the dense group side by side (and
  // din's interest).
  std::string deep_input;
  if (builtin.wide_deep || builtin.deepfm || builtin.dcn_v2 || builtin.mmoe ||
      builtin.din) {
    std::vector<std::string> parts;
    if (embeds) parts.push_back("embedding");
    if (inputs.has_dense) parts.push_back("dense");
    if (builtin.din) {
      AddInterest(inputs, options, spec);
      parts.push_back("interest");
    }
    if (parts.size() > 1) {
      NewLayer(spec, "deep_input", parts)->mutable_concat();
      deep_input = "deep_input";
    } else {
      deep_input = parts[0];
    }
  }
  if (builtin.mmoe) {
    AddMmoe(inputs, deep_input, options, spec);
    return {};
  }
  if (builtin.wide_deep || builtin.deepfm || builtin.din) {
    AddMlp(spec, "mlp", deep_input, top);
    logit_terms.push_back("mlp");
  }
  // (Under two fields the pairwise term is zero: deepfm is wide_deep.)
  if (builtin.deepfm && inputs.fields.size() >= 2) {
    NewLayer(spec, "fm", {"embedding"})->mutable_fm();
    logit_terms.push_back("fm");
  }
  if (builtin.dcn_v2) {
    NewLayer(spec, "cross", {deep_input})->mutable_cross()->set_num_layers(3);
    AddMlp(spec, "deep", "cross", top);
    logit_terms.push_back("deep");
  }
  if (builtin.dlrm) {
    AddDlrm(inputs, embeds, top, options, spec);
    logit_terms.push_back("top");
  }
  return logit_terms;
}

}  // namespace

absl::StatusOr<ModelSpec> BuiltinModelSpec(absl::string_view name,
                                           absl::Span<const ColumnUse> columns,
                                           const BuiltinOptions& options) {
  const Builtin builtin(name);
  if (!builtin.known()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model \"", name, "\"; the built-ins are ",
                     absl::StrJoin(BuiltinModelNames(), ", ")));
  }
  ModelSpec spec;
  spec.set_name(std::string(name));
  *spec.mutable_dense_optimizer() = options.dense_optimizer;
  absl::StatusOr<BuiltinInputs> inputs =
      AddInputs(name, builtin, columns, options, &spec);
  if (!inputs.ok()) return inputs.status();
  const std::vector<std::string> logit_terms =
      AddLayers(builtin, *std::move(inputs), options, &spec);
  if (logit_terms.empty()) return spec;  // mmoe: its tasks
  if (logit_terms.size() == 1) {
    spec.set_output(logit_terms[0]);
  } else {
    NewLayer(&spec, "logit", logit_terms)->mutable_add();
    spec.set_output("logit");
  }
  return spec;
}

std::string ModelSpecText(const ModelSpec& spec) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

}  // namespace ps::model
