// File: model/batch_inputs.h
//
// One batch as a model graph's step takes it (model/model_graph.h), built
// from parsed examples for a planned spec: for each table of the spec, the
// batch's distinct keys to fetch (from the shards when training, from an
// export when scoring) and, after them, one pooled row per (example, slot)
// that holds several keys; each lookup's row per example; each dense group
// transformed; the labels and the examples' weights. The trainer and the
// scorers build their steps the same way from it.
//
// Keys per slot: a field's are its column's (features.h), a cross's the
// layout's cross of it (LayoutForPlan() puts the spec's crosses in the
// layout, in spec order), a bucketized group's one BucketKey() per column.
// A multi field's rows pool by the field's pooling: SUM, MEAN, or MAX (per
// dimension; the gradient goes to the row that held the maximum).
//
// Not thread-safe: one batch, one owner. The plan must outlive it.

#ifndef PS_MODEL_BATCH_INPUTS_H_
#define PS_MODEL_BATCH_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "base/key_index.h"
#include "model/input/features.h"
#include "model/input/input_layout.h"
#include "model/model_graph.h"
#include "model/model_plan.h"

namespace ps::model {

// The layout's columns as a spec sees them.
std::vector<model::ColumnUse> ColumnUses(const InputLayout& layout);

// Plans `parsed` against the layout's columns and labels
// (ModelPlan::Create()).
absl::StatusOr<model::ModelPlan> PlanForLayout(
    const model::ParsedModelSpec& parsed, const InputLayout& layout);

// `layout` with the spec's crosses (in spec order) as its crosses, so that
// parsed examples hold their keys. INVALID_ARGUMENT if the layout already
// has other crosses (--crosses with a spec that declares its own).
absl::Status LayoutForPlan(const model::ModelPlan& plan, InputLayout* layout);

class BatchInputs {
 public:
  // One table's rows for the batch.
  struct TableRows {
    // The keys to fetch, distinct.
    std::vector<uint64_t> keys;
    // keys.size() fetched rows, then one per pool; dim floats each.
    std::vector<float> rows;
    // Pool p holds the rows members[pool_begin(p), pool_end[p]) (positions
    // among the fetched rows), summed then scaled by scale[p], or their
    // maximum (max[p]).
    std::vector<int32_t> members;
    std::vector<uint32_t> pool_end;
    std::vector<float> scale;
    std::vector<bool> max;
    // For MAX pools, after PoolRows(): per pool and dimension, the member
    // row that held the maximum.
    std::vector<int32_t> argmax;
    int dim = 0;

    uint32_t pool_begin(size_t pool) const {
      return pool == 0 ? 0 : pool_end[pool - 1];
    }
    size_t row_count() const { return keys.size() + pool_end.size(); }

    // Empties the keys and pools (not the rows' buffers, which are reused).
    void Clear() {
      keys.clear();
      members.clear();
      pool_end.clear();
      scale.clear();
      max.clear();
    }
  };

  // Where a lookup's keys are in an example (per lookup of the plan).
  struct LookupSource {
    // Example slot (fields then crosses), or -1 for a bucketized group.
    int example_slot = -1;
    // Bucketized: the column's position among the dense columns.
    int dense_column = -1;
    model::Field::Pooling pooling = model::Field::SUM;
    // A field of a seq column: its most recent keys pooled (0: all).
    int max_length = 0;
    // A sequence: the position read (0: the most recent item), and the
    // field id whose missing key stands where the example has no item.
    int position = -1;
    uint32_t field_id = 0;
  };

  // Empty, to be assigned one that has a plan.
  BatchInputs() = default;
  // `layout` is the one the plan's columns are positions in (the model's
  // training layout, fitted by LayoutForPlan()). Examples may be parsed
  // with another that has the same fields, dense columns and crosses in the
  // same order (ps_predict's reordered columns).
  BatchInputs(const model::ModelPlan* plan, const InputLayout& layout);

  // Fills everything but the fetched rows and dense parameters from
  // `examples` (parsed with the layout given at construction, which
  // LayoutForPlan() fitted), and sizes the row buffers.
  void Prepare(const std::vector<Example>& examples);

  // The keys of stored table `stored` (ModelPlan::stored_tables(): its
  // first table's), and where its fetched rows go: stored_rows[stored] for
  // one that holds several tables, else its one table's rows.
  const std::vector<uint64_t>& StoredKeys(size_t stored) const;
  float* StoredRows(size_t stored);

  // After the fetch: copies each table's columns out of the stored rows
  // that hold several tables, then computes the pooled rows.
  void PoolRows();

  // After the step: adds each pooled row's gradient to its members' (all of
  // them for SUM and MEAN, scaled; the maximum's for MAX) and truncates each
  // table's gradient to its fetched rows, so that they line up with keys.
  void FoldPooledGradients(std::vector<std::vector<float>>* table_grads) const;

  // After FoldPooledGradients(): the gradients per stored table, as the
  // servers take them (each table's columns side by side, in the order of
  // StoredKeys()), from `table_grads` per table of the spec, whose vectors
  // it moves from (a stored table holding one) or reads.
  std::vector<std::vector<float>> StoredGradients(
      std::vector<std::vector<float>>* table_grads) const;

  // The step's view of this batch; points into it.
  model::GraphInputs Inputs() const;

  // Where each lookup's keys come from (per lookup of the plan); per dense
  // group, its columns' positions among the dense columns; per sequence,
  // its example slot and the field whose keys its values are. What a model
  // run outside this code (a TorchScript export) needs to read examples
  // alike.
  const std::vector<LookupSource>& lookup_sources() const { return sources_; }
  const std::vector<std::vector<int>>& dense_columns() const {
    return dense_columns_;
  }
  const std::vector<int>& sequence_slots() const { return sequence_slots_; }
  const std::vector<uint32_t>& sequence_key_fields() const {
    return sequence_key_fields_;
  }

  int batch = 0;
  // Per table of the spec.
  std::vector<TableRows> tables;
  // Per stored table of the plan: for one that holds several tables, its
  // fetched rows (StoredKeys() x its dim); empty for the others.
  std::vector<std::vector<float>> stored_rows;
  // lookups x batch, lookup-major (model::GraphInputs).
  std::vector<int32_t> lookup_index;
  // Per dense group (plan.dense_nodes()): batch x columns, transformed.
  std::vector<std::vector<float>> dense;
  // Per sequence (plan.sequence_nodes()): batch x max_length, 1 where the
  // example has an item at that position (most recent first), else 0.
  std::vector<std::vector<float>> sequence_masks;
  // tasks x batch, task-major (the plan's tasks()): each task's label of
  // each example (0 when unknown), and whether it is known.
  std::vector<float> labels;
  std::vector<uint8_t> label_known;
  // A weighted loss's factors (model::GraphInputs::loss_scale), tasks x
  // batch: each example's weight over the mean weight of the examples whose
  // label the task knows (0 for the others), times the task's loss weight,
  // so that each task's loss is the weighted mean of its known examples'
  // losses. Empty when every label is known, every example weighs the same
  // and every loss weight is 1 (the plain mean).
  std::vector<float> loss_scale;
  // Per dense tensor, padded to whole chunks.
  std::vector<std::vector<float>> dense_params;
  // When set, the step reads these dense tensors instead of dense_params: a
  // scorer's model, whose tensors stay the same from batch to batch, lends
  // them (ExportedModel::Fetch()) rather than copying them into each batch;
  // dense_params is then empty and unused. They must outlive the step.
  const std::vector<std::vector<float>>* lent_dense_params = nullptr;

 private:
  // How many keys, members and pools a leader table had after as many
  // lookups as its follower has.
  struct Prefix {
    size_t keys = 0, members = 0, pools = 0;
  };

  // Prepare()'s steps after the leaders' keys: each follower's copy of its
  // leader's first keys and pools (`prefixes`, per table), the pooled rows'
  // places once every table's keys are counted, and the dense inputs.
  void CopyFromLeaders(const std::vector<Prefix>& prefixes);
  void PlacePooledRows();
  void PrepareLabels(const std::vector<Example>& examples);
  void PrepareDense(const std::vector<Example>& examples);
  void PrepareSequenceMasks(const std::vector<Example>& examples);
  // Items example `example` has in example slot `slot` (a seq column): its
  // keys, but none when it holds the field's missing key alone.
  static uint32_t SequenceLength(const Example& example, int slot,
                                 uint32_t field_id);

  // Per dense group: per column, its position among the dense columns.
  std::vector<std::vector<int>> dense_columns_;
  // Per sequence: its example slot (its field id), and the field whose keys
  // its values are (InputLayout::KeyField()).
  std::vector<int> sequence_slots_;
  std::vector<uint32_t> sequence_key_fields_;
  // Per lookup.
  std::vector<LookupSource> sources_;
  // Per table: its lookups, in order.
  std::vector<std::vector<int>> table_lookups_;
  // Per table: the table whose lookups begin with all of this one's (the
  // same nodes and slots, in order), whose first keys it copies rather
  // than hashing them again (wide_deep's wide table, its embedding
  // table's); or -1.
  std::vector<int> leader_;
  // Per table that is no follower, during Prepare(): each key's position
  // among its keys (kept from call to call for its memory).
  std::vector<KeyIndex> positions_;
  const model::ModelPlan* plan_ = nullptr;
};

}  // namespace ps::model

#endif  // PS_MODEL_BATCH_INPUTS_H_
