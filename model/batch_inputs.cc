#include "model/batch_inputs.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ps::model {
namespace {

// Copies `rows` rows of `width` floats from `from` (a row every
// `from_stride` floats) to `to` (a row every `to_stride`): a table's
// columns out of the rows stored with another's, or its gradients back.
void CopyColumns(const float* from, size_t from_stride, float* to,
                 size_t to_stride, int width, size_t rows) {
  for (size_t r = 0; r < rows; ++r) {
    std::copy_n(from + r * from_stride, width, to + r * to_stride);
  }
}

using model::ColumnUse;
using model::PlanNode;

// Per column of the layout: its position among the columns of its kind
// (categorical: the field id; dense: the dense index); -1 for the others.
std::vector<int> PositionsByKind(const InputLayout& layout) {
  std::vector<int> positions(layout.columns.size(), -1);
  int categorical = 0, dense = 0;
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    switch (layout.columns[c]) {
      case ColumnKind::kCategorical:
      case ColumnKind::kMulti:
      case ColumnKind::kSequence:
        positions[c] = categorical++;
        break;
      case ColumnKind::kDense:
        positions[c] = dense++;
        break;
      default:
        break;
    }
  }
  return positions;
}

float Transform(const model::DenseInput& group, int column, double raw) {
  switch (group.transform()) {
    case model::DenseInput::IDENTITY:
      return static_cast<float>(raw);
    case model::DenseInput::STANDARDIZE:
      return static_cast<float>((raw - group.mean(column)) / group.std(column));
    default:
      return DenseFeature(raw);
  }
}

int32_t Bucket(const model::DenseInput& group, double raw) {
  const auto& boundaries = group.boundaries();
  return static_cast<int32_t>(
      std::upper_bound(boundaries.begin(), boundaries.end(), raw) -
      boundaries.begin());
}

}  // namespace

std::vector<ColumnUse> ColumnUses(const InputLayout& layout) {
  std::vector<ColumnUse> uses;
  for (ColumnKind kind : layout.columns) {
    switch (kind) {
      case ColumnKind::kCategorical:
      case ColumnKind::kMulti:
        uses.push_back(ColumnUse::kCategorical);
        break;
      case ColumnKind::kSequence:
        uses.push_back(ColumnUse::kSequence);
        break;
      case ColumnKind::kDense:
        uses.push_back(ColumnUse::kDense);
        break;
      default:
        uses.push_back(ColumnUse::kOther);
    }
  }
  return uses;
}

absl::StatusOr<model::ModelPlan> PlanForLayout(
    const model::ParsedModelSpec& parsed, const InputLayout& layout) {
  return model::ModelPlan::Create(parsed, ColumnUses(layout),
                                  layout.label_names);
}

absl::Status LayoutForPlan(const model::ModelPlan& plan, InputLayout* layout) {
  const std::vector<int> positions = PositionsByKind(*layout);
  std::vector<std::pair<int, int>> crosses;
  const model::ModelSpec& spec = plan.spec();
  for (const model::Cross& cross : spec.cross()) {
    int fields[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      for (const model::Field& field : spec.field()) {
        if (field.name() == cross.fields(i))
          fields[i] = positions[field.column()];
      }
    }
    crosses.emplace_back(fields[0], fields[1]);
  }
  if (!layout->crosses.empty() && layout->crosses != crosses) {
    return absl::InvalidArgumentError(
        "--crosses and the model spec's crosses differ: the spec declares "
        "its crosses (leave --crosses out)");
  }
  layout->crosses = std::move(crosses);
  return absl::OkStatus();
}

BatchInputs::BatchInputs(const model::ModelPlan* plan,
                         const InputLayout& layout)
    : plan_(plan) {
  const std::vector<int> positions = PositionsByKind(layout);
  const model::ModelSpec& spec = plan_->spec();
  const int fields = layout.fields();
  tables.resize(spec.table_size());
  for (int t = 0; t < spec.table_size(); ++t)
    tables[t].dim = plan_->table_dim(t);
  for (const model::Lookup& lookup : plan_->lookups()) {
    const PlanNode& node = plan_->nodes()[lookup.node];
    LookupSource source;
    switch (node.kind) {
      case PlanNode::Kind::kField: {
        const model::Field& field = spec.field(node.index);
        source.example_slot = positions[field.column()];
        source.pooling = field.pooling();
        source.max_length = field.max_length();
        break;
      }
      case PlanNode::Kind::kSequence:
        source.example_slot = positions[spec.sequence(node.index).column()];
        source.field_id = layout.KeyField(source.example_slot);
        source.position = lookup.slot;
        break;
      case PlanNode::Kind::kCross:
        source.example_slot = fields + node.index;
        source.pooling = spec.cross(node.index).pooling();
        break;
      default:  // bucketized
        source.dense_column =
            positions[spec.dense(node.index).columns(lookup.slot)];
    }
    sources_.push_back(source);
  }
  const std::vector<model::Lookup>& lookups = plan_->lookups();
  table_lookups_.resize(tables.size());
  for (size_t l = 0; l < lookups.size(); ++l)
    table_lookups_[lookups[l].table].push_back(static_cast<int>(l));
  // A table follows the longest table (then the first) whose lookups begin
  // with all of its own: that one is no follower itself.
  const auto begins_with = [&](int u, int t) {
    const std::vector<int>& longer = table_lookups_[u];
    const std::vector<int>& shorter = table_lookups_[t];
    if (shorter.empty() || longer.size() < shorter.size()) return false;
    for (size_t i = 0; i < shorter.size(); ++i) {
      const model::Lookup& a = lookups[longer[i]];
      const model::Lookup& b = lookups[shorter[i]];
      if (a.node != b.node || a.slot != b.slot) return false;
    }
    return true;
  };
  leader_.assign(tables.size(), -1);
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    for (int u = 0; u < static_cast<int>(tables.size()); ++u) {
      const size_t length = table_lookups_[u].size();
      const size_t own = table_lookups_[t].size();
      if (u == t || !begins_with(u, t) || (length == own && u > t)) continue;
      if (leader_[t] < 0 || length > table_lookups_[leader_[t]].size())
        leader_[t] = u;
    }
  }
  for (int node : plan_->sequence_nodes()) {
    const int slot =
        positions[spec.sequence(plan_->nodes()[node].index).column()];
    sequence_slots_.push_back(slot);
    sequence_key_fields_.push_back(layout.KeyField(slot));
  }
  for (int node : plan_->dense_nodes()) {
    std::vector<int> columns;
    for (int column : spec.dense(plan_->nodes()[node].index).columns()) {
      columns.push_back(positions[column]);
    }
    dense_columns_.push_back(std::move(columns));
  }
}

void BatchInputs::Prepare(const std::vector<Example>& examples) {
  batch = static_cast<int>(examples.size());
  const std::vector<model::Lookup>& lookups = plan_->lookups();
  const model::ModelSpec& spec = plan_->spec();
  PrepareLabels(examples);
  for (TableRows& table : tables) table.Clear();
  lookup_index.resize(lookups.size() * static_cast<size_t>(batch));
  // Per table, the position of each key among its keys (none for a
  // follower, which copies its leader's first keys).
  positions_.resize(tables.size(), KeyIndex(/*huge_pages=*/false));
  for (size_t t = 0; t < tables.size(); ++t) {
    // About half a batch's keys are distinct (Criteo-like data).
    positions_[t].Reset(leader_[t] < 0 ? table_lookups_[t].size() *
                                             static_cast<size_t>(batch) / 2
                                       : 0);
  }
  // Per table: how many keys, members and pools its leader had after as
  // many lookups as it has.
  std::vector<Prefix> prefixes(tables.size());
  const auto position_of = [&](size_t t, uint64_t key) {
    const auto [position, added] =
        positions_[t].TryEmplace(key, tables[t].keys.size());
    if (added) tables[t].keys.push_back(key);
    return static_cast<int32_t>(position);
  };
  // A field's last key of example b + kAhead (its only one, mostly) is
  // prefetched at example b: the positions are megabytes probed at random.
  constexpr int kAhead = 8;
  // A pooled row is written -(pool + 1) until the table's keys are counted.
  for (size_t l = 0; l < lookups.size(); ++l) {
    const size_t t = lookups[l].table;
    if (leader_[t] >= 0) continue;
    const LookupSource& source = sources_[l];
    TableRows& table = tables[t];
    int32_t* index = &lookup_index[l * batch];
    for (int b = 0; b < batch; ++b) {
      if (source.example_slot >= 0 && source.position < 0 &&
          b + kAhead < batch) {
        const Example& ahead = examples[b + kAhead];
        const uint32_t end = ahead.slot_end[source.example_slot];
        if (ahead.slot_begin(source.example_slot) < end) {
          positions_[t].Prefetch(ahead.keys[end - 1]);
        }
      }
      const Example& example = examples[b];
      if (source.example_slot < 0) {
        const model::DenseInput& group =
            spec.dense(plan_->nodes()[lookups[l].node].index);
        index[b] = position_of(
            t, BucketKey(source.dense_column,
                         Bucket(group, example.dense[source.dense_column])));
        continue;
      }
      uint32_t begin = example.slot_begin(source.example_slot);
      const uint32_t end = example.slot_end[source.example_slot];
      if (source.position >= 0) {
        // The position-th most recent item, or the missing key.
        const uint32_t length =
            SequenceLength(example, source.example_slot, source.field_id);
        index[b] =
            position_of(t, static_cast<uint32_t>(source.position) < length
                               ? example.keys[end - 1 - source.position]
                               : FeatureKey(source.field_id, ""));
        continue;
      }
      if (source.max_length > 0 &&
          end - begin > static_cast<uint32_t>(source.max_length)) {
        begin = end - source.max_length;
      }
      if (end - begin == 1) {
        index[b] = position_of(t, example.keys[begin]);
        continue;
      }
      for (uint32_t k = begin; k < end; ++k)
        table.members.push_back(position_of(t, example.keys[k]));
      table.pool_end.push_back(static_cast<uint32_t>(table.members.size()));
      table.scale.push_back(source.pooling == model::Field::MEAN
                                ? 1.0f / static_cast<float>(end - begin)
                                : 1.0f);
      table.max.push_back(source.pooling == model::Field::MAX);
      index[b] = -static_cast<int32_t>(table.pool_end.size());
    }
    for (size_t f = 0; f < tables.size(); ++f) {
      const std::vector<int>& own = table_lookups_[f];
      if (leader_[f] == static_cast<int>(t) &&
          table_lookups_[t][own.size() - 1] == static_cast<int>(l)) {
        prefixes[f] = {table.keys.size(), table.members.size(),
                       table.pool_end.size()};
      }
    }
  }
  CopyFromLeaders(prefixes);
  PlacePooledRows();
  for (TableRows& table : tables) {
    table.rows.resize(table.row_count() * table.dim);
    table.argmax.resize(table.pool_end.size() * table.dim);
  }
  const std::vector<model::StoredTable>& stored = plan_->stored_tables();
  stored_rows.resize(stored.size());
  for (size_t s = 0; s < stored.size(); ++s) {
    if (stored[s].tables.size() < 2) continue;
    stored_rows[s].resize(StoredKeys(s).size() *
                          static_cast<size_t>(stored[s].dim));
  }
  PrepareDense(examples);
  PrepareSequenceMasks(examples);
}

uint32_t BatchInputs::SequenceLength(const Example& example, int slot,
                                     uint32_t field_id) {
  const uint32_t begin = example.slot_begin(slot);
  const uint32_t length = example.slot_end[slot] - begin;
  return length == 1 && example.keys[begin] == FeatureKey(field_id, "")
             ? 0
             : length;
}

void BatchInputs::PrepareSequenceMasks(const std::vector<Example>& examples) {
  const std::vector<int>& nodes = plan_->sequence_nodes();
  sequence_masks.resize(nodes.size());
  for (size_t q = 0; q < nodes.size(); ++q) {
    const int max_length = plan_->nodes()[nodes[q]].slots;
    std::vector<float>& mask = sequence_masks[q];
    mask.assign(static_cast<size_t>(batch) * max_length, 0.0f);
    const uint32_t field_id = sequence_key_fields_[q];
    for (int b = 0; b < batch; ++b) {
      const uint32_t length =
          SequenceLength(examples[b], sequence_slots_[q], field_id);
      const int items = static_cast<int>(
          std::min<uint32_t>(length, static_cast<uint32_t>(max_length)));
      std::fill_n(mask.begin() + static_cast<size_t>(b) * max_length, items,
                  1.0f);
    }
  }
}

void BatchInputs::CopyFromLeaders(const std::vector<Prefix>& prefixes) {
  for (size_t f = 0; f < tables.size(); ++f) {
    if (leader_[f] < 0) continue;
    const TableRows& from = tables[leader_[f]];
    TableRows& to = tables[f];
    const Prefix& prefix = prefixes[f];
    to.keys.assign(from.keys.begin(), from.keys.begin() + prefix.keys);
    to.members.assign(from.members.begin(),
                      from.members.begin() + prefix.members);
    to.pool_end.assign(from.pool_end.begin(),
                       from.pool_end.begin() + prefix.pools);
    to.scale.assign(from.scale.begin(), from.scale.begin() + prefix.pools);
    to.max.assign(from.max.begin(), from.max.begin() + prefix.pools);
    const std::vector<int>& own = table_lookups_[f];
    for (size_t i = 0; i < own.size(); ++i) {
      const size_t source = table_lookups_[leader_[f]][i];
      std::copy_n(lookup_index.data() + source * batch, batch,
                  lookup_index.data() + static_cast<size_t>(own[i]) * batch);
    }
  }
}

void BatchInputs::PlacePooledRows() {
  const std::vector<model::Lookup>& lookups = plan_->lookups();
  for (size_t l = 0; l < lookups.size(); ++l) {
    const int32_t fetched =
        static_cast<int32_t>(tables[lookups[l].table].keys.size());
    int32_t* index = &lookup_index[l * batch];
    for (int b = 0; b < batch; ++b) {
      if (index[b] < 0) index[b] = fetched + (-index[b] - 1);
    }
  }
}

void BatchInputs::PrepareLabels(const std::vector<Example>& examples) {
  const std::vector<model::PlanTask>& tasks = plan_->tasks();
  const size_t count = tasks.size() * batch;
  labels.resize(count);
  label_known.resize(count);
  // An example built in code may give its one label in `label` alone; one
  // read without its labels (scored) knows none.
  const auto label_of = [](const Example& example, int label, bool* known) {
    if (example.labels.empty()) {
      *known = example.has_label && label == 0;
      return *known ? example.label : 0.0f;
    }
    *known = example.label_known[label];
    return example.labels[label];
  };
  bool uniform = true;
  for (size_t t = 0; t < tasks.size(); ++t) {
    uniform = uniform && tasks[t].loss_weight == 1.0f;
    for (int b = 0; b < batch; ++b) {
      bool known = false;
      labels[t * batch + b] = label_of(examples[b], tasks[t].label, &known);
      label_known[t * batch + b] = known;
      uniform = uniform && known && examples[b].weight == examples[0].weight;
    }
  }
  loss_scale.clear();
  if (uniform) return;
  // Per task: each known example's weight over the mean weight of the known
  // examples, times the task's loss weight; 0 for an unknown label.
  loss_scale.resize(count);
  for (size_t t = 0; t < tasks.size(); ++t) {
    double weight_sum = 0.0;
    for (int b = 0; b < batch; ++b) {
      if (label_known[t * batch + b]) weight_sum += examples[b].weight;
    }
    for (int b = 0; b < batch; ++b) {
      loss_scale[t * batch + b] =
          label_known[t * batch + b]
              ? static_cast<float>(static_cast<double>(examples[b].weight) *
                                   batch / weight_sum * tasks[t].loss_weight)
              : 0.0f;
    }
  }
}

void BatchInputs::PrepareDense(const std::vector<Example>& examples) {
  const model::ModelSpec& spec = plan_->spec();
  dense.resize(dense_columns_.size());
  for (size_t d = 0; d < dense_columns_.size(); ++d) {
    const std::vector<int>& columns = dense_columns_[d];
    const model::DenseInput& group =
        spec.dense(plan_->nodes()[plan_->dense_nodes()[d]].index);
    dense[d].resize(static_cast<size_t>(batch) * columns.size());
    float* out = dense[d].data();
    for (int b = 0; b < batch; ++b) {
      for (size_t c = 0; c < columns.size(); ++c) {
        *out++ = Transform(group, c, examples[b].dense[columns[c]]);
      }
    }
  }
}

const std::vector<uint64_t>& BatchInputs::StoredKeys(size_t stored) const {
  return tables[plan_->stored_tables()[stored].tables[0]].keys;
}

float* BatchInputs::StoredRows(size_t stored) {
  const model::StoredTable& table = plan_->stored_tables()[stored];
  return table.tables.size() < 2 ? tables[table.tables[0]].rows.data()
                                 : stored_rows[stored].data();
}

void BatchInputs::PoolRows() {
  const std::vector<model::StoredTable>& stored = plan_->stored_tables();
  for (size_t s = 0; s < stored.size(); ++s) {
    if (stored[s].tables.size() < 2) continue;
    const size_t row_floats = static_cast<size_t>(stored[s].dim);
    const size_t keys = StoredKeys(s).size();
    for (size_t i = 0; i < stored[s].tables.size(); ++i) {
      TableRows& table = tables[stored[s].tables[i]];
      CopyColumns(stored_rows[s].data() + stored[s].first_column[i], row_floats,
                  table.rows.data(), table.dim, table.dim, keys);
    }
  }
  for (TableRows& table : tables) {
    const int dim = table.dim;
    const size_t fetched = table.keys.size();
    for (size_t p = 0; p < table.pool_end.size(); ++p) {
      float* pooled = &table.rows[(fetched + p) * dim];
      if (table.max[p]) {
        int32_t* argmax = &table.argmax[p * dim];
        std::fill(pooled, pooled + dim,
                  -std::numeric_limits<float>::infinity());
        for (uint32_t m = table.pool_begin(p); m < table.pool_end[p]; ++m) {
          const int32_t member = table.members[m];
          const float* row = &table.rows[static_cast<size_t>(member) * dim];
          for (int d = 0; d < dim; ++d) {
            if (row[d] > pooled[d]) {
              pooled[d] = row[d];
              argmax[d] = member;
            }
          }
        }
        continue;
      }
      std::fill(pooled, pooled + dim, 0.0f);
      for (uint32_t m = table.pool_begin(p); m < table.pool_end[p]; ++m) {
        const float* row =
            &table.rows[static_cast<size_t>(table.members[m]) * dim];
        for (int d = 0; d < dim; ++d) pooled[d] += row[d];
      }
      for (int d = 0; d < dim; ++d) pooled[d] *= table.scale[p];
    }
  }
}

void BatchInputs::FoldPooledGradients(
    std::vector<std::vector<float>>* table_grads) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableRows& table = tables[t];
    std::vector<float>& grads = (*table_grads)[t];
    const int dim = table.dim;
    const size_t fetched = table.keys.size();
    for (size_t p = 0; p < table.pool_end.size(); ++p) {
      const float* pooled = &grads[(fetched + p) * dim];
      if (table.max[p]) {
        const int32_t* argmax = &table.argmax[p * dim];
        for (int d = 0; d < dim; ++d)
          grads[static_cast<size_t>(argmax[d]) * dim + d] += pooled[d];
        continue;
      }
      const float scale = table.scale[p];
      for (uint32_t m = table.pool_begin(p); m < table.pool_end[p]; ++m) {
        float* member = &grads[static_cast<size_t>(table.members[m]) * dim];
        for (int d = 0; d < dim; ++d) member[d] += pooled[d] * scale;
      }
    }
    grads.resize(fetched * dim);
  }
}

std::vector<std::vector<float>> BatchInputs::StoredGradients(
    std::vector<std::vector<float>>* table_grads) const {
  const std::vector<model::StoredTable>& stored = plan_->stored_tables();
  std::vector<std::vector<float>> grads(stored.size());
  for (size_t s = 0; s < stored.size(); ++s) {
    if (stored[s].tables.size() < 2) {
      grads[s] = std::move((*table_grads)[stored[s].tables[0]]);
      continue;
    }
    const size_t row_floats = static_cast<size_t>(stored[s].dim);
    const size_t keys = StoredKeys(s).size();
    grads[s].resize(keys * row_floats);
    for (size_t i = 0; i < stored[s].tables.size(); ++i) {
      const int dim = tables[stored[s].tables[i]].dim;
      CopyColumns((*table_grads)[stored[s].tables[i]].data(), dim,
                  grads[s].data() + stored[s].first_column[i], row_floats, dim,
                  keys);
    }
  }
  return grads;
}

model::GraphInputs BatchInputs::Inputs() const {
  model::GraphInputs in;
  in.batch = batch;
  in.labels = labels.data();
  in.loss_scale = loss_scale.empty() ? nullptr : loss_scale.data();
  for (const TableRows& table : tables) {
    in.table_rows.push_back(table.rows.data());
    in.table_row_counts.push_back(static_cast<int>(table.row_count()));
  }
  in.lookup_index = lookup_index.data();
  for (const auto& group : dense) in.dense_inputs.push_back(group.data());
  for (const auto& mask : sequence_masks)
    in.sequence_masks.push_back(mask.data());
  for (const auto& params :
       lent_dense_params != nullptr ? *lent_dense_params : dense_params)
    in.dense_params.push_back(params.data());
  return in;
}

}  // namespace ps::model
