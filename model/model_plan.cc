#include "model/model_plan.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ps::model {
namespace {

using ::google::protobuf::TextFormat;

// Keeps the first error the text parser reports.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!message_.empty()) return;
    message_ = absl::StrCat("model spec line ", line + 1, ", column ",
                            column + 1, ": ", message);
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Tables and tasks have names of their own, which may be nodes' too.
std::string TableKey(absl::string_view name) {
  return absl::StrCat("table ", name);
}
std::string TaskKey(absl::string_view name) {
  return absl::StrCat("task ", name);
}

// The longest sequence a spec may read; the most experts an mmoe layer has.
constexpr int kMaxSequence = 1000;
constexpr int kMaxExperts = 64;

// A plain label column's name (model/input/input_layout.h).
constexpr absl::string_view kPlainLabel = "label";

bool IsName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

const char* LayerKindName(const Layer& layer) {
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
      return "embedding";
    case Layer::kConcat:
      return "concat";
    case Layer::kMlp:
      return "mlp";
    case Layer::kWide:
      return "wide";
    case Layer::kFm:
      return "fm";
    case Layer::kCross:
      return "cross";
    case Layer::kDotInteraction:
      return "dot_interaction";
    case Layer::kAdd:
      return "add";
    case Layer::kAttentionPooling:
      return "attention_pooling";
    case Layer::kMmoe:
      return "mmoe";
    case Layer::kSlice:
      return "slice";
    case Layer::KIND_NOT_SET:
      break;
  }
  return "layer";
}

float Glorot(int fan_in, int fan_out) {
  return std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
}

// Builds a plan; each check returns the node's error.
class Planner {
 public:
  Planner(const ParsedModelSpec& parsed, absl::Span<const ColumnUse> columns,
          absl::Span<const std::string> labels)
      : parsed_(parsed),
        spec_(parsed.spec),
        columns_(columns),
        labels_(labels) {}

  absl::Status Run(std::vector<PlanNode>* nodes, std::vector<PlanTask>* tasks,
                   std::vector<Lookup>* lookups,
                   std::vector<kernels::DenseTensorSpec>* tensors,
                   std::vector<int>* first_tensor,
                   std::vector<int>* dense_nodes,
                   std::vector<int>* sequence_nodes);
  // After Run(): which tables the servers keep in which (Table.stored_with)
  // given the tables' `lookups`; INVALID_ARGUMENT naming the table whose
  // stored_with is unknown, itself, stored in another, or looked up with
  // other keys.
  absl::Status StoreTables(const std::vector<Lookup>& lookups,
                           std::vector<StoredTable>* stored,
                           std::vector<int>* stored_of,
                           std::vector<int>* first_column_of) const;

 private:
  int LineOf(const std::string& key) const {
    auto found = parsed_.lines.find(key);
    return found == parsed_.lines.end() ? 0 : found->second;
  }
  // "model spec line 12: layer "deep": " (without the line when unknown).
  std::string Where(absl::string_view what, const std::string& name) const {
    const int line = LineOf(what == "table"  ? TableKey(name)
                            : what == "task" ? TaskKey(name)
                                             : name);
    return absl::StrCat("model spec",
                        line > 0 ? absl::StrCat(" line ", line) : std::string(),
                        ": ", what, " \"", name, "\": ");
  }
  absl::Status Error(absl::string_view what, const std::string& name,
                     absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(what, name), message));
  }

  absl::Status AddName(absl::string_view what, const std::string& name);
  absl::Status CheckTables();
  absl::Status AddInputs();
  // AddInputs() of each kind: the nodes of the spec's fields, crosses and
  // dense groups, each checked against --columns.
  absl::Status AddFields();
  absl::Status AddSequences();
  absl::Status AddCrosses();
  absl::Status AddDense();
  absl::Status AddDenseNode(int d);
  // Whether `column` of node `name` (a `what`) is one of --columns, of `use`.
  absl::Status CheckColumn(const char* what, const std::string& name,
                           int column, ColumnUse use) const;
  // attention_pooling's inputs: a query and an embedding of one sequence.
  absl::Status ShapeAttention(PlanNode& node) const;
  absl::Status SortLayers();
  // Adds a node per layer in order_, each shaped.
  absl::Status AddLayerNodes();
  // The tasks: the spec's, or one of `output` and the click log's one label.
  // Checks that each output names a trained node of width 1, that each label
  // is one of the click log's, and that every layer leads to an output.
  absl::StatusOr<std::vector<PlanTask>> FindTasks() const;
  absl::StatusOr<int> FindOutput(const std::string& name,
                                 const std::string& where_what,
                                 const std::string& where_name) const;
  // The lookups and dense tensors of the nodes, in node order.
  void AddParameters(std::vector<Lookup>* lookups,
                     std::vector<kernels::DenseTensorSpec>* tensors,
                     std::vector<int>* first_tensor,
                     std::vector<int>* dense_nodes,
                     std::vector<int>* sequence_nodes) const;
  // The dense tensors of layer node `node`, appended to `tensors`.
  void AddLayerTensors(const PlanNode& node,
                       std::vector<kernels::DenseTensorSpec>* tensors) const;
  absl::Status Visit(int layer, std::vector<int>* state,
                     std::vector<int>* path);
  absl::Status ShapeLayer(int layer);
  // An embedding or wide layer's table, width and rows.
  absl::Status ShapeLookup(int node_index, int dense_inputs);
  // An add layer's width, the same as each of its inputs'.
  absl::Status ShapeAdd(PlanNode& node) const;
  absl::Status RowShape(int node_index, const char* kind);

  const ParsedModelSpec& parsed_;
  const ModelSpec& spec_;
  absl::Span<const ColumnUse> columns_;
  absl::Span<const std::string> labels_;
  absl::flat_hash_map<std::string, int> node_of_;   // name -> node
  absl::flat_hash_map<std::string, int> layer_of_;  // name -> layer
  absl::flat_hash_map<std::string, int> table_of_;  // name -> table
  std::vector<PlanNode> nodes_;
  std::vector<int> order_;  // layers, sorted
};

absl::Status Planner::AddName(absl::string_view what, const std::string& name) {
  if (!IsName(name)) {
    return Error(what, name, "a name is letters, digits and _, and not empty");
  }
  if (node_of_.contains(name) || layer_of_.contains(name)) {
    return Error(what, name, "the name is used twice");
  }
  return absl::OkStatus();
}

absl::Status Planner::CheckTables() {
  if (!IsName(spec_.name())) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec: the model's name \"", spec_.name(),
                     "\" must be letters, digits and _ (it names the tables)"));
  }
  for (int t = 0; t < spec_.table_size(); ++t) {
    const Table& table = spec_.table(t);
    if (!IsName(table.name())) {
      return Error("table", table.name(),
                   "a name is letters, digits and _, and not empty");
    }
    if (!table_of_.emplace(table.name(), t).second) {
      return Error("table", table.name(), "the name is used twice");
    }
    if (table.dim() < 1) {
      return Error("table", table.name(),
                   absl::StrCat("dim must be at least 1, not ", table.dim()));
    }
    if (!(table.init_scale() >= 0)) {
      return Error("table", table.name(), "init_scale must be >= 0");
    }
    if (!table.optimizer().later_columns().empty()) {
      return Error(
          "table", table.name(),
          "its optimizer has later_columns: a table's columns train "
          "with one optimizer (stored_with keeps two tables in a row)");
    }
    if (absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
            Optimizer::Create(table.optimizer());
        !optimizer.ok()) {
      return Error(
          "table", table.name(),
          absl::StrCat("its optimizer: ", optimizer.status().message()));
    }
  }
  if (!spec_.dense_optimizer().later_columns().empty()) {
    return absl::InvalidArgumentError(
        "model spec: dense_optimizer has later_columns, which only tables "
        "stored with others have");
  }
  if (absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
          Optimizer::Create(spec_.dense_optimizer());
      !optimizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model spec: dense_optimizer: ", optimizer.status().message()));
  }
  return absl::OkStatus();
}

absl::Status Planner::StoreTables(const std::vector<Lookup>& lookups,
                                  std::vector<StoredTable>* stored,
                                  std::vector<int>* stored_of,
                                  std::vector<int>* first_column_of) const {
  const int tables = spec_.table_size();
  stored_of->assign(tables, -1);
  first_column_of->assign(tables, 0);
  // Each table's lookups, as (node, slot) in order.
  std::vector<std::vector<std::pair<int, int>>> keys_of(tables);
  for (const Lookup& lookup : lookups)
    keys_of[lookup.table].push_back({lookup.node, lookup.slot});
  for (int t = 0; t < tables; ++t) {
    const Table& table = spec_.table(t);
    if (table.stored_with().empty()) {
      (*stored_of)[t] = static_cast<int>(stored->size());
      stored->push_back({{t}, {0}, table.dim()});
      continue;
    }
    auto owner = table_of_.find(table.stored_with());
    if (owner == table_of_.end() || owner->second == t) {
      return Error("table", table.name(),
                   absl::StrCat("stored_with \"", table.stored_with(),
                                "\" is not another table of the spec"));
    }
    if (!spec_.table(owner->second).stored_with().empty()) {
      return Error(
          "table", table.name(),
          absl::StrCat("stored_with \"", table.stored_with(),
                       "\", a table stored with \"",
                       spec_.table(owner->second).stored_with(), "\" itself"));
    }
    if (keys_of[t] != keys_of[owner->second]) {
      return Error(
          "table", table.name(),
          absl::StrCat("stored_with \"", table.stored_with(),
                       "\", which is looked up with other keys: both tables "
                       "must be read by the same fields and slots, in the "
                       "same order"));
    }
  }
  // The stored ones, after their owners' columns in spec order.
  for (int t = 0; t < tables; ++t) {
    const Table& table = spec_.table(t);
    if (table.stored_with().empty()) continue;
    const int owner = table_of_.at(table.stored_with());
    StoredTable& into = (*stored)[(*stored_of)[owner]];
    (*stored_of)[t] = (*stored_of)[owner];
    (*first_column_of)[t] = into.dim;
    into.tables.push_back(t);
    into.first_column.push_back(into.dim);
    into.dim += table.dim();
  }
  return absl::OkStatus();
}

absl::Status Planner::CheckColumn(const char* what, const std::string& name,
                                  int column, ColumnUse use) const {
  if (column < 0 || column >= static_cast<int>(columns_.size())) {
    return Error(what, name,
                 absl::StrCat("column ", column, " is not one of the ",
                              columns_.size(), " columns of --columns"));
  }
  // A field reads a seq column as it reads a multi one.
  const bool fits =
      columns_[column] == use || (use == ColumnUse::kCategorical &&
                                  columns_[column] == ColumnUse::kSequence);
  if (!fits) {
    return Error(
        what, name,
        absl::StrCat("column ", column, " is not a ",
                     use == ColumnUse::kDense      ? "dense"
                     : use == ColumnUse::kSequence ? "seq"
                                                   : "cat, multi or seq",
                     " column in --columns"));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddInputs() {
  RETURN_IF_ERROR(AddFields());
  RETURN_IF_ERROR(AddSequences());
  RETURN_IF_ERROR(AddCrosses());
  return AddDense();
}

absl::Status Planner::AddFields() {
  for (int f = 0; f < spec_.field_size(); ++f) {
    const Field& field = spec_.field(f);
    if (absl::Status s = AddName("field", field.name()); !s.ok()) return s;
    if (absl::Status s = CheckColumn("field", field.name(), field.column(),
                                     ColumnUse::kCategorical);
        !s.ok()) {
      return s;
    }
    if (field.max_length() < 0 ||
        (field.max_length() > 0 &&
         columns_[field.column()] != ColumnUse::kSequence)) {
      return Error("field", field.name(),
                   "max_length is for a seq column, and not negative");
    }
    PlanNode node;
    node.name = field.name();
    node.kind = PlanNode::Kind::kField;
    node.index = f;
    node.slots = 1;
    node.line = LineOf(field.name());
    node_of_[node.name] = nodes_.size();
    nodes_.push_back(std::move(node));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddSequences() {
  for (int q = 0; q < spec_.sequence_size(); ++q) {
    const Sequence& sequence = spec_.sequence(q);
    RETURN_IF_ERROR(AddName("sequence", sequence.name()));
    RETURN_IF_ERROR(CheckColumn("sequence", sequence.name(), sequence.column(),
                                ColumnUse::kSequence));
    if (sequence.max_length() < 1 || sequence.max_length() > kMaxSequence) {
      return Error("sequence", sequence.name(),
                   absl::StrCat("max_length must be 1 to ", kMaxSequence));
    }
    PlanNode node;
    node.name = sequence.name();
    node.kind = PlanNode::Kind::kSequence;
    node.index = q;
    node.slots = sequence.max_length();
    node.line = LineOf(sequence.name());
    node_of_[node.name] = nodes_.size();
    nodes_.push_back(std::move(node));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddCrosses() {
  for (int c = 0; c < spec_.cross_size(); ++c) {
    const Cross& cross = spec_.cross(c);
    if (absl::Status s = AddName("cross", cross.name()); !s.ok()) return s;
    if (cross.fields_size() != 2 || cross.fields(0) == cross.fields(1)) {
      return Error("cross", cross.name(), "a cross names two different fields");
    }
    for (const std::string& field : cross.fields()) {
      auto found = node_of_.find(field);
      if (found == node_of_.end() ||
          nodes_[found->second].kind != PlanNode::Kind::kField) {
        return Error("cross", cross.name(),
                     absl::StrCat("\"", field, "\" is not a field"));
      }
    }
    PlanNode node;
    node.name = cross.name();
    node.kind = PlanNode::Kind::kCross;
    node.index = c;
    node.slots = 1;
    node.line = LineOf(cross.name());
    node_of_[node.name] = nodes_.size();
    nodes_.push_back(std::move(node));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddDense() {
  for (int d = 0; d < spec_.dense_size(); ++d) {
    RETURN_IF_ERROR(AddDenseNode(d));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddDenseNode(int d) {
  const DenseInput& dense = spec_.dense(d);
  if (absl::Status s = AddName("dense", dense.name()); !s.ok()) return s;
  if (dense.columns_size() == 0) {
    return Error("dense", dense.name(), "it names no columns");
  }
  for (int column : dense.columns()) {
    if (absl::Status s =
            CheckColumn("dense", dense.name(), column, ColumnUse::kDense);
        !s.ok()) {
      return s;
    }
  }
  const bool standardize = dense.transform() == DenseInput::STANDARDIZE;
  const bool bucketize = dense.transform() == DenseInput::BUCKETIZE;
  if (standardize != (dense.mean_size() > 0 || dense.std_size() > 0)) {
    return Error("dense", dense.name(),
                 "mean and std go with transform STANDARDIZE, and it needs "
                 "them");
  }
  if (standardize && (dense.mean_size() != dense.columns_size() ||
                      dense.std_size() != dense.columns_size())) {
    return Error("dense", dense.name(),
                 absl::StrCat("STANDARDIZE needs one mean and one std per "
                              "column (",
                              dense.columns_size(), ")"));
  }
  for (float std : dense.std()) {
    if (!(std > 0)) {
      return Error("dense", dense.name(), "every std must be > 0");
    }
  }
  if (bucketize != (dense.boundaries_size() > 0)) {
    return Error("dense", dense.name(),
                 "boundaries go with transform BUCKETIZE, and it needs them");
  }
  for (int b = 1; b < dense.boundaries_size(); ++b) {
    if (!(dense.boundaries(b) > dense.boundaries(b - 1))) {
      return Error("dense", dense.name(),
                   "boundaries must be strictly ascending");
    }
  }
  PlanNode node;
  node.name = dense.name();
  node.kind =
      bucketize ? PlanNode::Kind::kBucketizedDense : PlanNode::Kind::kDense;
  node.index = d;
  node.slots = bucketize ? dense.columns_size() : 0;
  node.width = bucketize ? 0 : dense.columns_size();
  node.line = LineOf(dense.name());
  node_of_[node.name] = nodes_.size();
  nodes_.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status Planner::Visit(int layer, std::vector<int>* state,
                            std::vector<int>* path) {
  // 0: not seen, 1: on the path, 2: done.
  if ((*state)[layer] == 2) return absl::OkStatus();
  const Layer& spec = spec_.layer(layer);
  if ((*state)[layer] == 1) {
    std::vector<std::string> cycle;
    bool on = false;
    for (int l : *path) {
      on = on || l == layer;
      if (on) cycle.push_back(spec_.layer(l).name());
    }
    cycle.push_back(spec.name());
    return Error("layer", spec.name(),
                 absl::StrCat("its inputs form a cycle: ",
                              absl::StrJoin(cycle, " -> ")));
  }
  (*state)[layer] = 1;
  path->push_back(layer);
  for (const std::string& input : spec.inputs()) {
    auto found = layer_of_.find(input);
    if (found == layer_of_.end()) continue;
    if (absl::Status s = Visit(found->second, state, path); !s.ok()) return s;
  }
  path->pop_back();
  (*state)[layer] = 2;
  order_.push_back(layer);
  return absl::OkStatus();
}

absl::Status Planner::SortLayers() {
  for (int l = 0; l < spec_.layer_size(); ++l) {
    const Layer& layer = spec_.layer(l);
    if (absl::Status s = AddName("layer", layer.name()); !s.ok()) return s;
    layer_of_[layer.name()] = l;
  }
  for (int l = 0; l < spec_.layer_size(); ++l) {
    const Layer& layer = spec_.layer(l);
    if (layer.kind_case() == Layer::KIND_NOT_SET) {
      return Error("layer", layer.name(),
                   "it says no kind (embedding, concat, mlp, wide, fm, cross, "
                   "dot_interaction or add)");
    }
    if (layer.inputs_size() == 0) {
      return Error("layer", layer.name(), "it has no inputs");
    }
    for (const std::string& input : layer.inputs()) {
      if (!node_of_.contains(input) && !layer_of_.contains(input)) {
        return Error("layer", layer.name(),
                     absl::StrCat("unknown input \"", input, "\""));
      }
    }
  }
  std::vector<int> state(spec_.layer_size(), 0), path;
  for (int l = 0; l < spec_.layer_size(); ++l) {
    if (absl::Status s = Visit(l, &state, &path); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// fm and dot_interaction: the inputs' rows (an embedding's rows are its
// slots' rows; any other input of width w is w / d rows of width d).
absl::Status Planner::RowShape(int node_index, const char* kind) {
  PlanNode& node = nodes_[node_index];
  int dim = 0;
  int first_embedding = -1;
  for (int input : node.inputs) {
    if (nodes_[input].row_dim > 0 &&
        nodes_[input].kind == PlanNode::Kind::kLayer &&
        spec_.layer(nodes_[input].index).has_embedding()) {
      // An embedding's rows are its table's: every one must be d wide.
      if (first_embedding >= 0 && nodes_[input].row_dim != dim) {
        return Error(
            "layer", node.name,
            absl::StrCat(kind, " takes rows of one width: embedding \"",
                         nodes_[first_embedding].name, "\" has rows of ", dim,
                         ", embedding \"", nodes_[input].name, "\" of ",
                         nodes_[input].row_dim));
      }
      if (first_embedding < 0) {
        first_embedding = input;
        dim = nodes_[input].row_dim;
      }
    }
  }
  if (dim == 0) dim = nodes_[node.inputs[0]].width;
  int rows = 0;
  for (int input : node.inputs) {
    const int width = nodes_[input].width;
    if (dim == 0 || width % dim != 0) {
      return Error(
          "layer", node.name,
          absl::StrCat(kind, " takes rows of one width (", dim, "); input \"",
                       nodes_[input].name, "\" has width ", width));
    }
    rows += width / dim;
  }
  if (rows < 2) {
    return Error("layer", node.name,
                 absl::StrCat(kind,
                              " needs at least two rows; its inputs "
                              "have ",
                              rows));
  }
  node.row_dim = dim;
  node.rows = rows;
  return absl::OkStatus();
}

absl::Status Planner::ShapeLookup(int node_index, int dense_inputs) {
  PlanNode& node = nodes_[node_index];
  const Layer& layer = spec_.layer(node.index);
  if (layer.has_embedding() && dense_inputs > 0) {
    return Error("layer", node.name,
                 "embedding reads fields, crosses and bucketized dense "
                 "groups only");
  }
  if (layer.has_wide() && dense_inputs > 1) {
    return Error("layer", node.name,
                 "wide reads keys and at most one dense input");
  }
  const std::string& table =
      layer.has_embedding() ? layer.embedding().table() : layer.wide().table();
  auto found = table_of_.find(table);
  if (found == table_of_.end()) {
    return Error("layer", node.name,
                 absl::StrCat("unknown table \"", table, "\""));
  }
  node.table = found->second;
  const int dim = spec_.table(node.table).dim();
  if (layer.has_wide() && dim != 1) {
    return Error("layer", node.name,
                 absl::StrCat("a wide layer's table has dim 1; \"", table,
                              "\" has ", dim));
  }
  int slots = 0;
  for (int input : node.inputs) slots += nodes_[input].slots;
  node.row_dim = dim;
  node.rows = slots;
  node.width = layer.has_embedding() ? slots * dim : 1;
  node.trained = true;
  return absl::OkStatus();
}

absl::Status Planner::ShapeAttention(PlanNode& node) const {
  const AttentionPoolingLayer& attention =
      spec_.layer(node.index).attention_pooling();
  if (node.inputs.size() != 2) {
    return Error("layer", node.name,
                 "attention_pooling reads two inputs: a query and an "
                 "embedding of one sequence");
  }
  const PlanNode& keys = nodes_[node.inputs[1]];
  const bool keys_of_a_sequence =
      keys.kind == PlanNode::Kind::kLayer &&
      spec_.layer(keys.index).has_embedding() && keys.inputs.size() == 1 &&
      nodes_[keys.inputs[0]].kind == PlanNode::Kind::kSequence;
  if (!keys_of_a_sequence) {
    return Error("layer", node.name,
                 absl::StrCat("its second input \"", keys.name,
                              "\" must be an embedding layer of one sequence "
                              "alone"));
  }
  const PlanNode& query = nodes_[node.inputs[0]];
  if (query.width != keys.row_dim) {
    return Error(
        "layer", node.name,
        absl::StrCat("the query \"", query.name, "\" has width ", query.width,
                     "; the keys' dim is ", keys.row_dim));
  }
  for (int units : attention.units()) {
    if (units < 1) {
      return Error("layer", node.name,
                   absl::StrCat("units must be >= 1, not ", units));
    }
  }
  node.row_dim = keys.row_dim;
  node.rows = keys.rows;
  node.width = keys.row_dim;
  node.trained = true;
  return absl::OkStatus();
}

absl::Status Planner::ShapeAdd(PlanNode& node) const {
  node.width = nodes_[node.inputs[0]].width;
  for (int input : node.inputs) {
    if (nodes_[input].width != node.width) {
      return Error(
          "layer", node.name,
          absl::StrCat("add takes inputs of one width; \"",
                       nodes_[node.inputs[0]].name, "\" has ", node.width,
                       ", \"", nodes_[input].name, "\" ", nodes_[input].width));
    }
  }
  return absl::OkStatus();
}

absl::Status Planner::ShapeLayer(int node_index) {
  PlanNode& node = nodes_[node_index];
  const Layer& layer = spec_.layer(node.index);
  const char* kind = LayerKindName(layer);
  int categorical_inputs = 0;
  for (int input : node.inputs) {
    categorical_inputs += nodes_[input].categorical() ? 1 : 0;
  }
  if (layer.has_embedding() || layer.has_wide()) {
    return ShapeLookup(
        node_index, static_cast<int>(node.inputs.size()) - categorical_inputs);
  }
  if (categorical_inputs > 0) {
    return Error("layer", node.name,
                 absl::StrCat(kind,
                              " cannot read keys: put an embedding or wide "
                              "layer between it and the fields"));
  }
  const auto one_input = [&]() -> absl::Status {
    if (node.inputs.size() != 1) {
      return Error(
          "layer", node.name,
          absl::StrCat(kind, " takes one input, not ", node.inputs.size()));
    }
    return absl::OkStatus();
  };
  for (int input : node.inputs)
    node.trained = node.trained || nodes_[input].trained;
  switch (layer.kind_case()) {
    case Layer::kConcat:
      for (int input : node.inputs) node.width += nodes_[input].width;
      return absl::OkStatus();
    case Layer::kMlp: {
      if (absl::Status s = one_input(); !s.ok()) return s;
      if (layer.mlp().units_size() == 0) {
        return Error("layer", node.name, "mlp needs units");
      }
      for (int units : layer.mlp().units()) {
        if (units < 1) {
          return Error("layer", node.name,
                       absl::StrCat("units must be >= 1, not ", units));
        }
      }
      node.width = layer.mlp().units(layer.mlp().units_size() - 1);
      node.trained = true;
      return absl::OkStatus();
    }
    case Layer::kFm:
      if (absl::Status s = RowShape(node_index, kind); !s.ok()) return s;
      node.width = 1;
      return absl::OkStatus();
    case Layer::kDotInteraction:
      if (absl::Status s = RowShape(node_index, kind); !s.ok()) return s;
      node.width = kernels::DotInteractionWidth(
          node.rows, layer.dot_interaction().self_interaction());
      return absl::OkStatus();
    case Layer::kCross:
      if (absl::Status s = one_input(); !s.ok()) return s;
      if (layer.cross().num_layers() < 1 || layer.cross().low_rank() < 0) {
        return Error("layer", node.name,
                     "cross needs num_layers >= 1 and low_rank >= 0");
      }
      node.width = nodes_[node.inputs[0]].width;
      node.trained = true;
      return absl::OkStatus();
    case Layer::kAdd:
      return ShapeAdd(node);
    case Layer::kAttentionPooling:
      return ShapeAttention(node);
    case Layer::kMmoe: {
      RETURN_IF_ERROR(one_input());
      const MmoeLayer& mmoe = layer.mmoe();
      if (mmoe.num_experts() < 1 || mmoe.num_experts() > kMaxExperts ||
          mmoe.num_tasks() < 1 || mmoe.units_size() == 0) {
        return Error("layer", node.name,
                     absl::StrCat("mmoe needs num_experts 1 to ", kMaxExperts,
                                  ", num_tasks >= 1 and units"));
      }
      for (int units : mmoe.units()) {
        if (units < 1) {
          return Error("layer", node.name,
                       absl::StrCat("units must be >= 1, not ", units));
        }
      }
      node.width = mmoe.num_tasks() * mmoe.units(mmoe.units_size() - 1);
      node.trained = true;
      return absl::OkStatus();
    }
    case Layer::kSlice: {
      RETURN_IF_ERROR(one_input());
      const SliceLayer& slice = layer.slice();
      const int input_width = nodes_[node.inputs[0]].width;
      if (slice.begin() < 0 || slice.width() < 1 ||
          slice.begin() + slice.width() > input_width) {
        return Error(
            "layer", node.name,
            absl::StrCat("slice [", slice.begin(), ", ",
                         slice.begin() + slice.width(),
                         ") is not within its input's width ", input_width));
      }
      node.width = slice.width();
      return absl::OkStatus();
    }
    default:
      break;
  }
  return Error("layer", node.name, "unknown kind");
}

absl::Status Planner::Run(std::vector<PlanNode>* nodes,
                          std::vector<PlanTask>* tasks,
                          std::vector<Lookup>* lookups,
                          std::vector<kernels::DenseTensorSpec>* tensors,
                          std::vector<int>* first_tensor,
                          std::vector<int>* dense_nodes,
                          std::vector<int>* sequence_nodes) {
  if (absl::Status s = CheckTables(); !s.ok()) return s;
  if (absl::Status s = AddInputs(); !s.ok()) return s;
  if (absl::Status s = SortLayers(); !s.ok()) return s;
  if (absl::Status s = AddLayerNodes(); !s.ok()) return s;
  absl::StatusOr<std::vector<PlanTask>> found = FindTasks();
  if (!found.ok()) return found.status();
  AddParameters(lookups, tensors, first_tensor, dense_nodes, sequence_nodes);
  *tasks = *std::move(found);
  *nodes = std::move(nodes_);
  return absl::OkStatus();
}

absl::Status Planner::AddLayerNodes() {
  for (int l : order_) {
    const Layer& layer = spec_.layer(l);
    PlanNode node;
    node.name = layer.name();
    node.kind = PlanNode::Kind::kLayer;
    node.index = l;
    node.line = LineOf(layer.name());
    for (const std::string& input : layer.inputs()) {
      node.inputs.push_back(node_of_.at(input));
    }
    node_of_[node.name] = nodes_.size();
    nodes_.push_back(std::move(node));
    if (absl::Status s = ShapeLayer(nodes_.size() - 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Planner::FindOutput(const std::string& name,
                                        const std::string& where_what,
                                        const std::string& where_name) const {
  auto found = node_of_.find(name);
  if (found == node_of_.end()) {
    const std::string message =
        absl::StrCat("output \"", name, "\" is not a node");
    return where_name.empty() ? absl::InvalidArgumentError(
                                    absl::StrCat("model spec: ", message))
                              : Error(where_what, where_name, message);
  }
  const PlanNode& out = nodes_[found->second];
  if (out.categorical() || out.width != 1) {
    return Error("layer", out.name,
                 absl::StrCat("an output is a logit, of width 1; it has "
                              "width ",
                              out.width));
  }
  if (!out.trained) {
    return Error("layer", out.name,
                 "the output depends on no table and no trained layer");
  }
  return found->second;
}

absl::StatusOr<std::vector<PlanTask>> Planner::FindTasks() const {
  const std::vector<std::string> plain = {std::string(kPlainLabel)};
  const absl::Span<const std::string> labels =
      labels_.empty() ? absl::Span<const std::string>(plain) : labels_;
  std::vector<PlanTask> tasks;
  if (spec_.task_size() == 0) {
    if (spec_.output().empty()) {
      return absl::InvalidArgumentError(
          "model spec: `output` names no node (the logit's), and there is no "
          "`task`");
    }
    if (labels.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model spec: the click log has ", labels.size(), " labels (",
          absl::StrJoin(labels, ", "),
          "): give one `task` per label to learn, each with its output, "
          "rather than one `output`"));
    }
    absl::StatusOr<int> output = FindOutput(spec_.output(), "output", "");
    if (!output.ok()) return output.status();
    tasks.push_back({labels[0], *output, 0, 1.0f});
  } else if (!spec_.output().empty()) {
    return absl::InvalidArgumentError(
        "model spec: give `output` or `task`s, not both (each task names its "
        "output)");
  }
  for (const Task& task : spec_.task()) {
    if (!IsName(task.name())) {
      return Error("task", task.name(),
                   "a name is letters, digits and _, and not empty");
    }
    for (const PlanTask& other : tasks) {
      if (other.name == task.name()) {
        return Error("task", task.name(), "the name is used twice");
      }
    }
    PlanTask planned;
    planned.name = task.name();
    planned.label = -1;
    for (size_t l = 0; l < labels.size(); ++l) {
      if (labels[l] == task.label()) planned.label = static_cast<int>(l);
    }
    if (planned.label < 0) {
      return Error("task", task.name(),
                   absl::StrCat("label \"", task.label(),
                                "\" is not one of the click log's labels (",
                                absl::StrJoin(labels, ", "),
                                "; label:NAME in --columns)"));
    }
    for (const PlanTask& other : tasks) {
      if (other.label == planned.label) {
        return Error("task", task.name(),
                     absl::StrCat("task \"", other.name, "\" learns label \"",
                                  task.label(), "\" already"));
      }
    }
    if (!(task.loss_weight() >= 0.0f) || !std::isfinite(task.loss_weight())) {
      return Error("task", task.name(),
                   "loss_weight must be a finite number >= 0 (0: 1)");
    }
    planned.loss_weight =
        task.loss_weight() == 0.0f ? 1.0f : task.loss_weight();
    if (task.output().empty()) {
      return Error("task", task.name(), "`output` names no node (its logit's)");
    }
    absl::StatusOr<int> output = FindOutput(task.output(), "task", task.name());
    if (!output.ok()) return output.status();
    planned.output = *output;
    tasks.push_back(std::move(planned));
  }
  // Every layer must feed an output.
  std::vector<bool> used(nodes_.size(), false);
  for (const PlanTask& task : tasks) used[task.output] = true;
  for (int n = static_cast<int>(nodes_.size()) - 1; n >= 0; --n) {
    if (!used[n]) continue;
    for (int input : nodes_[n].inputs) used[input] = true;
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].kind == PlanNode::Kind::kLayer && !used[n]) {
      return Error("layer", nodes_[n].name,
                   tasks.size() == 1
                       ? absl::StrCat("it does not lead to the output \"",
                                      nodes_[tasks[0].output].name, "\"")
                       : std::string("it leads to no task's output"));
    }
  }
  return tasks;
}

void Planner::AddParameters(std::vector<Lookup>* lookups,
                            std::vector<kernels::DenseTensorSpec>* tensors,
                            std::vector<int>* first_tensor,
                            std::vector<int>* dense_nodes,
                            std::vector<int>* sequence_nodes) const {
  first_tensor->assign(nodes_.size(), -1);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const PlanNode& node = nodes_[n];
    if (node.kind == PlanNode::Kind::kDense) dense_nodes->push_back(n);
    if (node.kind == PlanNode::Kind::kSequence) sequence_nodes->push_back(n);
    if (node.kind != PlanNode::Kind::kLayer) continue;
    const size_t before = tensors->size();
    AddLayerTensors(node, tensors);
    if (tensors->size() > before) (*first_tensor)[n] = before;
    if (node.table < 0) continue;
    for (int input : node.inputs) {
      for (int slot = 0; slot < nodes_[input].slots; ++slot) {
        bool seen = false;
        for (const Lookup& lookup : *lookups) {
          seen = seen || (lookup.table == node.table && lookup.node == input &&
                          lookup.slot == slot);
        }
        if (!seen) lookups->push_back({node.table, input, slot});
      }
    }
  }
}

void Planner::AddLayerTensors(
    const PlanNode& node,
    std::vector<kernels::DenseTensorSpec>* tensors) const {
  const Layer& layer = spec_.layer(node.index);
  if (layer.has_wide()) {
    for (int input : node.inputs) {
      if (nodes_[input].categorical()) continue;
      tensors->push_back({absl::StrCat(node.name, ".dense_weights"),
                          nodes_[input].width, 1, 0.0f});
    }
    tensors->push_back({absl::StrCat(node.name, ".bias"), 1, 1, 0.0f});
  }
  if (layer.has_mmoe()) {
    const MmoeLayer& mmoe = layer.mmoe();
    const int width = nodes_[node.inputs[0]].width;
    for (int e = 0; e < mmoe.num_experts(); ++e) {
      int in = width;
      for (int l = 0; l < mmoe.units_size(); ++l) {
        const int out_width = mmoe.units(l);
        const std::string prefix =
            absl::StrCat(node.name, ".expert", e, ".", l);
        tensors->push_back(
            {prefix + ".weights", in, out_width, Glorot(in, out_width)});
        tensors->push_back({prefix + ".bias", 1, out_width, 0.0f});
        in = out_width;
      }
    }
    for (int t = 0; t < mmoe.num_tasks(); ++t) {
      const std::string prefix = absl::StrCat(node.name, ".gate", t);
      tensors->push_back({prefix + ".weights", width, mmoe.num_experts(),
                          Glorot(width, mmoe.num_experts())});
      tensors->push_back({prefix + ".bias", 1, mmoe.num_experts(), 0.0f});
    }
  }
  if (layer.has_attention_pooling()) {
    int in = 4 * node.row_dim;
    const AttentionPoolingLayer& attention = layer.attention_pooling();
    for (int l = 0; l <= attention.units_size(); ++l) {
      const int out_width = l < attention.units_size() ? attention.units(l) : 1;
      const std::string prefix = absl::StrCat(node.name, ".", l);
      tensors->push_back(
          {prefix + ".weights", in, out_width, Glorot(in, out_width)});
      tensors->push_back({prefix + ".bias", 1, out_width, 0.0f});
      in = out_width;
    }
  }
  if (layer.has_mlp()) {
    int in = nodes_[node.inputs[0]].width;
    const MlpLayer& mlp = layer.mlp();
    for (int l = 0; l < mlp.units_size(); ++l) {
      const int out_width = mlp.units(l);
      const std::string prefix = absl::StrCat(node.name, ".", l);
      tensors->push_back({prefix + ".weights", in, out_width,
                          mlp.weight_init() == MlpLayer::ZEROS
                              ? 0.0f
                              : Glorot(in, out_width)});
      tensors->push_back({prefix + ".bias", 1, out_width, 0.0f});
      in = out_width;
    }
  }
  if (layer.has_cross()) {
    const int width = node.width;
    const int rank = layer.cross().low_rank();
    for (int l = 0; l < layer.cross().num_layers(); ++l) {
      const std::string prefix = absl::StrCat(node.name, ".", l);
      if (rank == 0) {
        tensors->push_back(
            {prefix + ".weights", width, width, Glorot(width, width)});
      } else {
        tensors->push_back({prefix + ".u", width, rank, Glorot(width, rank)});
        tensors->push_back({prefix + ".v", rank, width, Glorot(rank, width)});
      }
      tensors->push_back({prefix + ".bias", 1, width, 0.0f});
    }
  }
}

}  // namespace

absl::StatusOr<ParsedModelSpec> ParseModelSpec(absl::string_view text) {
  ParsedModelSpec parsed;
  TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(std::string(text), &parsed.spec)) {
    return absl::InvalidArgumentError(
        errors.message().empty() ? std::string("model spec: cannot parse")
                                 : errors.message());
  }
  const auto* descriptor = ModelSpec::descriptor();
  const auto record = [&](const char* field_name, int count,
                          const auto& name_of) {
    const auto* field = descriptor->FindFieldByName(field_name);
    for (int i = 0; i < count; ++i) {
      const TextFormat::ParseLocation location = tree.GetLocation(field, i);
      if (location.line >= 0) {
        parsed.lines.emplace(name_of(i), location.line + 1);
      }
    }
  };
  const ModelSpec& spec = parsed.spec;
  record("table", spec.table_size(),
         [&](int i) { return TableKey(spec.table(i).name()); });
  record("field", spec.field_size(),
         [&](int i) { return spec.field(i).name(); });
  record("cross", spec.cross_size(),
         [&](int i) { return spec.cross(i).name(); });
  record("dense", spec.dense_size(),
         [&](int i) { return spec.dense(i).name(); });
  record("layer", spec.layer_size(),
         [&](int i) { return spec.layer(i).name(); });
  record("task", spec.task_size(),
         [&](int i) { return TaskKey(spec.task(i).name()); });
  return parsed;
}

absl::StatusOr<ModelPlan> ModelPlan::Create(
    const ParsedModelSpec& parsed, absl::Span<const ColumnUse> columns,
    absl::Span<const std::string> labels) {
  ModelPlan plan;
  Planner planner(parsed, columns, labels);
  if (absl::Status s = planner.Run(&plan.nodes_, &plan.tasks_, &plan.lookups_,
                                   &plan.dense_tensors_, &plan.first_tensor_,
                                   &plan.dense_nodes_, &plan.sequence_nodes_);
      !s.ok()) {
    return s;
  }
  RETURN_IF_ERROR(planner.StoreTables(plan.lookups_, &plan.stored_tables_,
                                      &plan.stored_of_,
                                      &plan.first_column_of_));
  plan.spec_ = parsed.spec;
  return plan;
}

int64_t ModelPlan::DenseMultiplyAddsPerExample() const {
  // An attention_pooling layer's MLP runs once per position.
  absl::flat_hash_map<std::string, int64_t> runs;
  for (const PlanNode& node : nodes_) {
    if (node.kind == PlanNode::Kind::kLayer &&
        spec_.layer(node.index).has_attention_pooling()) {
      runs[node.name] = node.rows;
    }
  }
  int64_t multiply_adds = 0;
  for (const kernels::DenseTensorSpec& tensor : dense_tensors_) {
    // Every tensor but a bias is a matrix the inputs are multiplied by.
    if (absl::EndsWith(tensor.name, ".bias")) continue;
    auto found = runs.find(tensor.name.substr(0, tensor.name.find('.')));
    multiply_adds += static_cast<int64_t>(tensor.size()) *
                     (found == runs.end() ? 1 : found->second);
  }
  return multiply_adds;
}

int ModelPlan::SequenceOf(int node) const {
  for (size_t q = 0; q < sequence_nodes_.size(); ++q) {
    if (sequence_nodes_[q] == node) return static_cast<int>(q);
  }
  return -1;
}

int ModelPlan::LookupOf(int table, int node, int slot) const {
  for (size_t l = 0; l < lookups_.size(); ++l) {
    const Lookup& lookup = lookups_[l];
    if (lookup.table == table && lookup.node == node && lookup.slot == slot) {
      return static_cast<int>(l);
    }
  }
  return -1;
}

}  // namespace ps::model
