// File: model/model_plan.h
//
// A model spec (proto/model_spec.proto), read and checked whole before
// anything trains: ParseModelSpec() reads the text proto, PlanModel() checks
// it against the click log's columns and works out what running it needs
// (each node's width, the order to run the layers in, the lookups of keys in
// tables, the dense parameter tensors). Every error names the node and, for
// a spec read from text, its line.
//
// A ModelPlan is immutable and cheap to share; ModelGraph (model_graph.h)
// runs one.

#ifndef PS_MODEL_MODEL_PLAN_H_
#define PS_MODEL_MODEL_PLAN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/ctr_model.h"
#include "proto/model_spec.pb.h"

namespace ps::model {

// What a click log's column holds, as far as a spec cares.
// A seq column is one of keys like a multi column (a field may pool it), and
// the only one a `sequence` reads.
enum class ColumnUse { kOther, kCategorical, kDense, kSequence };

// A spec read from text, and where each node was written: 1-based lines by
// node name, and by "table NAME" for tables. Empty for a spec built in code.
struct ParsedModelSpec {
  ModelSpec spec;
  std::map<std::string, int> lines;
};

// Reads a text proto. INVALID_ARGUMENT with the line and column of a syntax
// error or an unknown field.
absl::StatusOr<ParsedModelSpec> ParseModelSpec(absl::string_view text);

// One node of the graph.
struct PlanNode {
  enum class Kind {
    kField,
    kCross,
    kDense,            // a dense group, transformed but not bucketized
    kBucketizedDense,  // a dense group whose buckets are keys (categorical)
    kSequence,         // a seq column's positions (categorical)
    kLayer,
  };
  std::string name;
  Kind kind = Kind::kLayer;
  // Index into the spec's field, cross, dense or layer list (by kind).
  int index = 0;
  // Categorical nodes (field, cross, bucketized dense, sequence): keys per
  // example (1, 1, columns, max_length). Others: 0.
  int slots = 0;
  // Width of the value (batch x width); 0 for categorical nodes.
  int width = 0;
  // Inputs, as indices into ModelPlan::nodes().
  std::vector<int> inputs;
  // embedding, wide: the table (index into the spec's tables); else -1.
  int table = -1;
  // fm, dot_interaction: the row width d and the rows k of the inputs
  // together; embedding: the table's dim and its slots; attention_pooling:
  // the keys' dim and their positions.
  int row_dim = 0;
  int rows = 0;
  // Whether its value depends on a trained parameter (a table row or a dense
  // tensor): only those need a gradient. Never true of an input node.
  bool trained = false;
  // Line in the spec's text; 0 if unknown.
  int line = 0;

  bool categorical() const {
    return kind == Kind::kField || kind == Kind::kCross ||
           kind == Kind::kBucketizedDense || kind == Kind::kSequence;
  }
};

// One slot of a categorical node looked up in a table: each example's row of
// it. The model's step takes, per lookup, an index per example into the rows
// fetched from that table.
struct Lookup {
  int table = 0;
  int node = 0;
  int slot = 0;
};

// A table as the servers keep it: one of the spec's tables and those
// stored with it (Table.stored_with), their columns side by side in each
// row, looked up with the first table's keys.
struct StoredTable {
  // The spec's tables: the first, then those stored with it in spec order.
  std::vector<int> tables;
  // Per entry of `tables`: its first column in the row.
  std::vector<int> first_column;
  // The row's width: the tables' dims together.
  int dim = 0;
};

// One prediction the model makes: a logit, the label it learns, and its
// share of the loss. A spec without tasks has one, of its `output` and the
// click log's one label.
struct PlanTask {
  // The spec's task name, or the label's name for a spec without tasks.
  std::string name;
  // The logit's node (index into ModelPlan::nodes()).
  int output = -1;
  // The label's position among the click log's label columns.
  int label = 0;
  float loss_weight = 1.0f;
};

class ModelPlan {
 public:
  // Checks `parsed` against the click log's columns (`columns[i]` is column
  // i's use) and plans it. INVALID_ARGUMENT naming the node and its line: a
  // name used twice or not a name; an input, table or output that does not
  // exist; a column that is not of the node's kind; a cycle; a layer given
  // inputs of the wrong kind or width (fm and dot_interaction: one row
  // width; add: one width; output: width 1); a table without a dim, or a
  // wide layer's table whose dim is not 1; a table stored_with one that is
  // not another table, is stored itself, or is looked up with other keys;
  // standardize or bucketize without
  // their numbers; a task whose label is not one of `labels` (the click
  // log's label columns' names, in file order; empty: one plain label
  // column, "label"), two tasks of one label, a spec without tasks on a
  // click log of several labels.
  static absl::StatusOr<ModelPlan> Create(
      const ParsedModelSpec& parsed, absl::Span<const ColumnUse> columns,
      absl::Span<const std::string> labels = {});

  const ModelSpec& spec() const { return spec_; }
  // Inputs first (fields, crosses, dense groups in spec order), then the
  // layers in an order where every layer comes after its inputs.
  const std::vector<PlanNode>& nodes() const { return nodes_; }
  // At least one; the first task's output is output().
  const std::vector<PlanTask>& tasks() const { return tasks_; }
  int output() const { return tasks_[0].output; }
  // In the order of the step's lookup indices.
  const std::vector<Lookup>& lookups() const { return lookups_; }
  // The position in lookups() of (table, node, slot); -1 if none.
  int LookupOf(int table, int node, int slot) const;
  // The dense parameter tensors, in the order the step takes them: each
  // layer's, in nodes() order (mlp: per layer weights then bias; cross: per
  // layer weights or u and v, then bias).
  const std::vector<kernels::DenseTensorSpec>& dense_tensors() const {
    return dense_tensors_;
  }
  // Per node, the position in dense_tensors() of its first tensor (-1 if it
  // has none).
  int FirstTensor(int node) const { return first_tensor_[node]; }
  // The non-bucketized dense groups, in spec order: the step's dense inputs.
  const std::vector<int>& dense_nodes() const { return dense_nodes_; }
  // The sequences, in spec order: the step's masks.
  const std::vector<int>& sequence_nodes() const { return sequence_nodes_; }
  // The position in sequence_nodes() of node `node`; -1 if it is none.
  int SequenceOf(int node) const;
  int table_dim(int table) const { return spec_.table(table).dim(); }
  // The tables as the servers keep them: one per table of the spec that is
  // stored in no other, in spec order.
  const std::vector<StoredTable>& stored_tables() const {
    return stored_tables_;
  }
  // Per table of the spec: its position in stored_tables(), and its first
  // column in that table's rows (0 unless stored with another).
  int StoredTableOf(int table) const { return stored_of_[table]; }
  int FirstColumnOf(int table) const { return first_column_of_[table]; }
  // Multiply-adds per example of the forward pass's products with the dense
  // weight matrices (mlp, cross, wide's dense weights): what the model's
  // GEMMs cost, and what the backward pass costs twice over.
  int64_t DenseMultiplyAddsPerExample() const;

 private:
  ModelSpec spec_;
  std::vector<PlanNode> nodes_;
  std::vector<PlanTask> tasks_;
  std::vector<Lookup> lookups_;
  std::vector<kernels::DenseTensorSpec> dense_tensors_;
  std::vector<int> first_tensor_;
  std::vector<int> dense_nodes_;
  std::vector<int> sequence_nodes_;
  std::vector<StoredTable> stored_tables_;
  std::vector<int> stored_of_;
  std::vector<int> first_column_of_;
};

}  // namespace ps::model

#endif  // PS_MODEL_MODEL_PLAN_H_
