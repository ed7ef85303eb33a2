#include "model/model_graph.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/kernel_status.h"

namespace ps::model {
namespace {

// One training step, during which the graph makes the backend
// DeclareStableInput() promises: none made before it carries in, and they
// end when the step returns, however it returns.
class TrainingStep {
 public:
  TrainingStep(kernels::Backend* backend, bool* training_step)
      : backend_(backend), training_step_(training_step) {
    backend_->ForgetStableInputs();
    *training_step_ = true;
  }
  ~TrainingStep() {
    *training_step_ = false;
    backend_->ForgetStableInputs();
  }
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

 private:
  kernels::Backend* const backend_;
  bool* const training_step_;
};

bool HiddenRelu(const MlpLayer& mlp) {
  return mlp.activation() != MlpLayer::NONE;
}
bool LastRelu(const MlpLayer& mlp) {
  return mlp.last_activation() == MlpLayer::RELU;
}
// Tensors per cross layer: weights and bias, or u, v and bias.
int CrossTensors(const CrossLayer& cross) {
  return cross.low_rank() == 0 ? 2 : 3;
}

}  // namespace

ModelGraph::ModelGraph(const ModelPlan* plan, kernels::Backend* backend)
    : plan_(*plan), backend_(backend) {
  const size_t tables = plan_.spec().table_size();
  for (InputSet& set : sets_) {
    set.table_rows.resize(tables);
    set.dense_inputs.resize(plan_.dense_nodes().size());
    set.sequence_masks.resize(plan_.sequence_nodes().size());
    set.params.resize(plan_.dense_tensors().size());
    set.layer_index.resize(plan_.nodes().size());
    set.layer_index_host.resize(plan_.nodes().size());
  }
  layer_lookups_.resize(plan_.nodes().size());
  for (size_t n = 0; n < plan_.nodes().size(); ++n) {
    const PlanNode& node = plan_.nodes()[n];
    if (node.table < 0) continue;
    for (int input : node.inputs) {
      for (int slot = 0; slot < plan_.nodes()[input].slots; ++slot) {
        layer_lookups_[n].push_back(plan_.LookupOf(node.table, input, slot));
      }
    }
  }
  table_grads_.resize(tables);
  param_grads_.resize(plan_.dense_tensors().size());
  nodes_.resize(plan_.nodes().size());
  views_.resize(plan_.nodes().size());
  std::vector<int> readers(plan_.nodes().size(), 0);
  for (const PlanNode& node : plan_.nodes()) {
    for (int input : node.inputs) ++readers[input];
  }
  for (size_t c = 0; c < plan_.nodes().size(); ++c) {
    const PlanNode& node = plan_.nodes()[c];
    if (node.kind != PlanNode::Kind::kLayer ||
        !plan_.spec().layer(node.index).has_concat()) {
      continue;
    }
    int offset = 0;
    for (int input : node.inputs) {
      const PlanNode& input_node = plan_.nodes()[input];
      if (input_node.kind == PlanNode::Kind::kLayer &&
          plan_.spec().layer(input_node.index).has_embedding() &&
          readers[input] == 1 && !IsOutput(input)) {
        views_[input] = {static_cast<int>(c), offset};
      }
      offset += input_node.width;
    }
  }
}

bool ModelGraph::IsOutput(int node) const {
  for (const PlanTask& task : plan_.tasks()) {
    if (task.output == node) return true;
  }
  return false;
}

void ModelGraph::Release(Buffer& buffer) {
  if (buffer.data != nullptr) backend_->Free(buffer.data);
  buffer.data = nullptr;
  buffer.capacity = 0;
}

ModelGraph::~ModelGraph() {
  for (InputSet& set : sets_) {
    Release(set.labels.storage);
    Release(set.loss_scale.storage);
    for (auto* inputs : {&set.table_rows, &set.dense_inputs, &set.params,
                         &set.layer_index, &set.sequence_masks}) {
      for (Input& input : *inputs) Release(input.storage);
    }
  }
  for (NodeBuffers& node : nodes_) {
    Release(node.value);
    Release(node.gradient);
    for (Buffer& buffer : node.scratch) Release(buffer);
    for (Buffer& buffer : node.scratch_gradients) Release(buffer);
  }
  for (auto* buffers : {&table_grads_, &param_grads_}) {
    for (Buffer& buffer : *buffers) Release(buffer);
  }
  for (Buffer* buffer : {&probabilities_, &dlogits_, &loss_}) Release(*buffer);
}

absl::Status ModelGraph::Reserve(Buffer* buffer, size_t floats) {
  // At least one float, so that an empty batch still has a buffer.
  floats = std::max<size_t>(floats, 1);
  if (buffer->data != nullptr && buffer->capacity >= floats) {
    return absl::OkStatus();
  }
  Release(*buffer);
  void* pointer = nullptr;
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Allocate(floats * sizeof(float), &pointer));
  buffer->data = static_cast<float*>(pointer);
  buffer->capacity = floats;
  return absl::OkStatus();
}

absl::Status ModelGraph::Upload(Input* input, const void* host, size_t floats,
                                bool idle) {
  if (backend_->ComputesOnHostMemory()) {
    input->data = static_cast<const float*>(host);
    return absl::OkStatus();
  }
  if (absl::Status s = Reserve(&input->storage, floats); !s.ok()) return s;
  input->data = input->storage.data;
  if (floats == 0) return absl::OkStatus();
  const size_t bytes = floats * sizeof(float);
  MODEL_RETURN_IF_KERNEL_ERROR(
      idle ? backend_->CopyToIdleDevice(input->storage.data, host, bytes)
           : backend_->CopyToDevice(input->storage.data, host, bytes));
  return absl::OkStatus();
}

absl::Status ModelGraph::UploadInputs(const GraphInputs& in, bool with_labels,
                                      InputSet* set, bool idle) {
  const int tables = plan_.spec().table_size();
  if (in.batch < 0 || static_cast<int>(in.table_rows.size()) != tables ||
      static_cast<int>(in.table_row_counts.size()) != tables ||
      in.dense_inputs.size() != set->dense_inputs.size() ||
      in.sequence_masks.size() != set->sequence_masks.size() ||
      in.dense_params.size() != set->params.size() ||
      (with_labels && in.batch > 0 && in.labels == nullptr) ||
      (in.batch > 0 && !plan_.lookups().empty() &&
       in.lookup_index == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the step's inputs do not match the model \"", plan_.spec().name(),
        "\" (tables, dense inputs, dense tensors, labels or lookups)"));
  }
  static_assert(sizeof(int32_t) == sizeof(float),
                "indices share float buffers");
  const size_t batch = in.batch;
  if (with_labels) {
    const size_t labels = batch * plan_.tasks().size();
    if (absl::Status s = Upload(&set->labels, in.labels, labels, idle);
        !s.ok()) {
      return s;
    }
    set->loss_scale.data = nullptr;
    if (in.loss_scale != nullptr) {
      if (absl::Status s =
              Upload(&set->loss_scale, in.loss_scale, labels, idle);
          !s.ok()) {
        return s;
      }
    }
  }
  for (size_t n = 0; n < layer_lookups_.size(); ++n) {
    const std::vector<int>& lookups = layer_lookups_[n];
    if (lookups.empty()) continue;
    std::vector<int32_t>& host = set->layer_index_host[n];
    host.resize(lookups.size() * batch);
    for (size_t i = 0; i < lookups.size(); ++i) {
      const int32_t* column = in.lookup_index + lookups[i] * batch;
      for (size_t b = 0; b < batch; ++b)
        host[b * lookups.size() + i] = column[b];
    }
    if (absl::Status s =
            Upload(&set->layer_index[n], host.data(), host.size(), idle);
        !s.ok()) {
      return s;
    }
  }
  set->table_row_counts = in.table_row_counts;
  for (int t = 0; t < tables; ++t) {
    if (absl::Status s = Upload(
            &set->table_rows[t], in.table_rows[t],
            static_cast<size_t>(in.table_row_counts[t]) * plan_.table_dim(t),
            idle);
        !s.ok()) {
      return s;
    }
  }
  for (size_t d = 0; d < set->dense_inputs.size(); ++d) {
    const int width = plan_.nodes()[plan_.dense_nodes()[d]].width;
    if (absl::Status s = Upload(&set->dense_inputs[d], in.dense_inputs[d],
                                batch * width, idle);
        !s.ok()) {
      return s;
    }
  }
  for (size_t q = 0; q < set->sequence_masks.size(); ++q) {
    const int positions = plan_.nodes()[plan_.sequence_nodes()[q]].slots;
    if (absl::Status s = Upload(&set->sequence_masks[q], in.sequence_masks[q],
                                batch * positions, idle);
        !s.ok()) {
      return s;
    }
  }
  for (size_t t = 0; t < set->params.size(); ++t) {
    if (absl::Status s = Upload(&set->params[t], in.dense_params[t],
                                plan_.dense_tensors()[t].size(), idle);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

const float* ModelGraph::Value(int node) const {
  if (plan_.nodes()[node].kind == PlanNode::Kind::kDense) {
    const std::vector<int>& dense = plan_.dense_nodes();
    const size_t position =
        std::find(dense.begin(), dense.end(), node) - dense.begin();
    return in_->dense_inputs[position].data;
  }
  return nodes_[node].value.data;
}

float* ModelGraph::ValueOf(int n, int* stride) {
  const ConcatView& view = views_[n];
  if (view.concat < 0) {
    *stride = plan_.nodes()[n].width;
    return nodes_[n].value.data;
  }
  *stride = plan_.nodes()[view.concat].width;
  return nodes_[view.concat].value.data + view.offset;
}

float* ModelGraph::GradientOf(int n, int* stride) {
  const ConcatView& view = views_[n];
  if (view.concat < 0) {
    *stride = plan_.nodes()[n].width;
    return nodes_[n].gradient.data;
  }
  *stride = plan_.nodes()[view.concat].width;
  return nodes_[view.concat].gradient.data + view.offset;
}

const int32_t* ModelGraph::LayerIndex(int node) const {
  return reinterpret_cast<const int32_t*>(in_->layer_index[node].data);
}

absl::Status ModelGraph::Forward(int batch) {
  for (size_t n = 0; n < plan_.nodes().size(); ++n) {
    if (plan_.nodes()[n].kind != PlanNode::Kind::kLayer) continue;
    if (absl::Status s = ForwardLayer(n, batch); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::StackRows(int n, int batch, const float** rows) {
  const PlanNode& node = plan_.nodes()[n];
  if (node.inputs.size() == 1) {
    *rows = Value(node.inputs[0]);
    return absl::OkStatus();
  }
  NodeBuffers& buffers = nodes_[n];
  buffers.scratch.resize(1);
  const int width = node.rows * node.row_dim;
  if (absl::Status s =
          Reserve(&buffers.scratch[0], static_cast<size_t>(batch) * width);
      !s.ok()) {
    return s;
  }
  int offset = 0;
  for (int input : node.inputs) {
    const int input_width = plan_.nodes()[input].width;
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyColumns(Value(input), batch, input_width,
                              buffers.scratch[0].data, width, offset));
    offset += input_width;
  }
  *rows = buffers.scratch[0].data;
  return absl::OkStatus();
}

absl::Status ModelGraph::ForwardLayer(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const Layer& layer = plan_.spec().layer(node.index);
  NodeBuffers& buffers = nodes_[n];
  const size_t count = static_cast<size_t>(batch) * node.width;
  // A view writes into its concat's buffer, reserved here first.
  Buffer& own =
      views_[n].concat < 0 ? buffers.value : nodes_[views_[n].concat].value;
  const size_t own_count =
      views_[n].concat < 0
          ? count
          : static_cast<size_t>(batch) * plan_.nodes()[views_[n].concat].width;
  if (absl::Status s = Reserve(&own, own_count); !s.ok()) return s;
  int stride = 0;
  float* value = ValueOf(n, &stride);
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
    case Layer::kWide:
      return ForwardLookup(n, batch, value, stride);
    case Layer::kConcat: {
      int offset = 0;
      for (int input : node.inputs) {
        const int input_width = plan_.nodes()[input].width;
        if (views_[input].concat != n) {
          MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyColumns(
              Value(input), batch, input_width, value, node.width, offset));
        }
        offset += input_width;
      }
      return absl::OkStatus();
    }
    case Layer::kMlp:
      return ForwardMlp(n, batch);
    case Layer::kFm:
    case Layer::kDotInteraction: {
      const float* rows = nullptr;
      if (absl::Status s = StackRows(n, batch, &rows); !s.ok()) return s;
      if (layer.has_fm()) {
        MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(value, batch, 0.0f));
        MODEL_RETURN_IF_KERNEL_ERROR(
            backend_->FmForward(rows, node.rows * node.row_dim, batch,
                                node.rows, node.row_dim, value));
      } else {
        MODEL_RETURN_IF_KERNEL_ERROR(backend_->DotInteraction(
            rows, batch, node.rows, node.row_dim,
            layer.dot_interaction().self_interaction(), value));
      }
      return absl::OkStatus();
    }
    case Layer::kCross:
      return ForwardCross(n, batch);
    case Layer::kAttentionPooling:
      return ForwardAttention(n, batch);
    case Layer::kMmoe:
      return ForwardMmoe(n, batch);
    case Layer::kSlice:
      return ForwardSlice(n, batch);
    case Layer::kAdd:
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(value, count, 0.0f));
      for (int input : node.inputs) {
        MODEL_RETURN_IF_KERNEL_ERROR(backend_->Add(Value(input), value, count));
      }
      return absl::OkStatus();
    case Layer::KIND_NOT_SET:
      break;
  }
  return absl::InternalError(
      absl::StrCat("layer \"", node.name, "\" has no kind"));
}

absl::Status ModelGraph::ForwardLookup(int n, int batch, float* value,
                                       int stride) {
  const PlanNode& node = plan_.nodes()[n];
  const Layer& layer = plan_.spec().layer(node.index);
  const float* rows = in_->table_rows[node.table].data;
  if (layer.has_wide())
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(value, batch, 0.0f));
  int tensor = plan_.FirstTensor(n);
  for (int input : node.inputs) {
    const PlanNode& input_node = plan_.nodes()[input];
    if (input_node.categorical()) continue;
    // The wide layer's dense part: value += x w.
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        false, false, batch, 1, input_node.width, 1.0f, Value(input),
        input_node.width, in_->params[tensor++].data, 1, 1.0f, value, 1));
  }
  const int lookups = static_cast<int>(layer_lookups_[n].size());
  if (lookups > 0 && layer.has_wide()) {
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->GatherSum(rows, LayerIndex(n), batch, lookups, value));
  } else if (lookups > 0) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->GatherConcat(
        rows, LayerIndex(n), batch, lookups, node.row_dim, value, stride));
  }
  if (layer.has_wide()) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->BiasActivation(
        value, in_->params[tensor].data, batch, 1, false));
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardLookup(int n, int batch, const float* gradient,
                                        int stride) {
  const PlanNode& node = plan_.nodes()[n];
  const Layer& layer = plan_.spec().layer(node.index);
  const auto trained = [&](int input) { return plan_.nodes()[input].trained; };
  float* grads = table_grads_[node.table].data;
  int tensor = plan_.FirstTensor(n);
  for (int input : node.inputs) {
    const PlanNode& input_node = plan_.nodes()[input];
    if (!input_node.categorical()) {
      // dw = x^T g; dx += g w^T.
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          true, false, input_node.width, 1, batch, 1.0f, Value(input),
          input_node.width, gradient, 1, 0.0f, param_grads_[tensor].data, 1));
      if (trained(input)) {
        MODEL_RETURN_IF_KERNEL_ERROR(
            backend_->Gemm(false, true, batch, input_node.width, 1, 1.0f,
                           gradient, 1, in_->params[tensor].data, 1, 1.0f,
                           nodes_[input].gradient.data, input_node.width));
      }
      ++tensor;
    }
  }
  const int lookups = static_cast<int>(layer_lookups_[n].size());
  if (lookups > 0 && layer.has_wide()) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ScatterAdd(
        gradient, 1, 0, LayerIndex(n), batch, lookups, 1, grads));
  } else if (lookups > 0) {
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->ScatterAdd(gradient, stride, node.row_dim, LayerIndex(n),
                             batch, lookups, node.row_dim, grads));
  }
  if (layer.has_wide()) {
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->ColumnSums(gradient, batch, 1, param_grads_[tensor].data));
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardInteraction(int n, int batch,
                                             const float* gradient) {
  const PlanNode& node = plan_.nodes()[n];
  const Layer& layer = plan_.spec().layer(node.index);
  NodeBuffers& buffers = nodes_[n];
  const auto trained = [&](int input) { return plan_.nodes()[input].trained; };
  const int width = node.rows * node.row_dim;
  const float* rows =
      node.inputs.size() == 1 ? Value(node.inputs[0]) : buffers.scratch[0].data;
  // The rows' gradient: straight into a lone input's, else stacked and
  // then split among the inputs.
  float* drows = nullptr;
  if (node.inputs.size() == 1) {
    drows = nodes_[node.inputs[0]].gradient.data;
  } else {
    buffers.scratch_gradients.resize(1);
    const size_t count = static_cast<size_t>(batch) * width;
    if (absl::Status s = Reserve(&buffers.scratch_gradients[0], count);
        !s.ok()) {
      return s;
    }
    drows = buffers.scratch_gradients[0].data;
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(drows, count, 0.0f));
  }
  if (layer.has_fm()) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->FmBackward(
        rows, gradient, width, batch, node.rows, node.row_dim, drows));
  } else {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->DotInteractionBackward(
        rows, gradient, batch, node.rows, node.row_dim,
        layer.dot_interaction().self_interaction(), drows));
  }
  if (node.inputs.size() == 1) return absl::OkStatus();
  int offset = 0;
  for (int input : node.inputs) {
    const int input_width = plan_.nodes()[input].width;
    if (trained(input)) {
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
          drows, batch, width, offset, nodes_[input].gradient.data,
          input_width));
    }
    offset += input_width;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::ForwardMlp(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const MlpLayer& mlp = plan_.spec().layer(node.index).mlp();
  NodeBuffers& buffers = nodes_[n];
  const int layers = mlp.units_size();
  buffers.scratch.resize(layers - 1);
  const float* x = Value(node.inputs[0]);
  int in_width = plan_.nodes()[node.inputs[0]].width;
  const int first = plan_.FirstTensor(n);
  // Unchanged until the step ends, and read again by Backward()'s GEMMs
  // when training: the MLP's input, each layer's weights, and each layer's
  // output once activated.
  DeclareStableInput(x, static_cast<size_t>(batch) * in_width);
  for (int l = 0; l < layers; ++l) {
    const int out_width = mlp.units(l);
    DeclareStableInput(in_->params[first + 2 * l].data,
                       static_cast<size_t>(in_width) * out_width);
    Buffer* out = l + 1 == layers ? &buffers.value : &buffers.scratch[l];
    if (absl::Status s = Reserve(out, static_cast<size_t>(batch) * out_width);
        !s.ok()) {
      return s;
    }
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Gemm(false, false, batch, out_width, in_width, 1.0f, x,
                       in_width, in_->params[first + 2 * l].data, out_width,
                       0.0f, out->data, out_width));
    const bool relu = l + 1 == layers ? LastRelu(mlp) : HiddenRelu(mlp);
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->BiasActivation(out->data, in_->params[first + 2 * l + 1].data,
                                 batch, out_width, relu));
    DeclareStableInput(out->data, static_cast<size_t>(batch) * out_width);
    x = out->data;
    in_width = out_width;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::ForwardCross(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const CrossLayer& cross = plan_.spec().layer(node.index).cross();
  NodeBuffers& buffers = nodes_[n];
  const int layers = cross.num_layers();
  const int width = node.width;
  const int rank = cross.low_rank();
  const size_t count = static_cast<size_t>(batch) * width;
  // scratch: u_l (layers), x_{l+1} but the last (layers - 1), and with a
  // low rank t_l = x_l U_l (layers).
  buffers.scratch.resize(3 * layers);
  const float* x0 = Value(node.inputs[0]);
  const float* x = x0;
  const int first = plan_.FirstTensor(n);
  const int per_layer = CrossTensors(cross);
  for (int l = 0; l < layers; ++l) {
    const int tensor = first + per_layer * l;
    Buffer& u = buffers.scratch[l];
    if (absl::Status s = Reserve(&u, count); !s.ok()) return s;
    if (rank == 0) {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Gemm(false, false, batch, width, width, 1.0f, x, width,
                         in_->params[tensor].data, width, 0.0f, u.data, width));
    } else {
      Buffer& t = buffers.scratch[2 * layers + l];
      if (absl::Status s = Reserve(&t, static_cast<size_t>(batch) * rank);
          !s.ok()) {
        return s;
      }
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Gemm(false, false, batch, rank, width, 1.0f, x, width,
                         in_->params[tensor].data, rank, 0.0f, t.data, rank));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, false, batch, width, rank, 1.0f, t.data, rank,
          in_->params[tensor + 1].data, width, 0.0f, u.data, width));
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->BiasActivation(
        u.data, in_->params[tensor + per_layer - 1].data, batch, width, false));
    Buffer& next =
        l + 1 == layers ? buffers.value : buffers.scratch[layers + l];
    if (absl::Status s = Reserve(&next, count); !s.ok()) return s;
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(next.data, count, 0.0f));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Add(x, next.data, count));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Multiply(x0, u.data, next.data, count, true));
    x = next.data;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::Backward(int batch) {
  const std::vector<PlanNode>& nodes = plan_.nodes();
  for (size_t n = 0; n < nodes.size(); ++n) {
    // A view's gradient is its concat's columns, zeroed with them.
    if (!nodes[n].trained || views_[n].concat >= 0) continue;
    const size_t count = static_cast<size_t>(batch) * nodes[n].width;
    if (absl::Status s = Reserve(&nodes_[n].gradient, count); !s.ok()) {
      return s;
    }
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Fill(nodes_[n].gradient.data, count, 0.0f));
  }
  for (size_t t = 0; t < table_grads_.size(); ++t) {
    const size_t count =
        static_cast<size_t>(in_->table_row_counts[t]) * plan_.table_dim(t);
    if (absl::Status s = Reserve(&table_grads_[t], count); !s.ok()) return s;
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Fill(table_grads_[t].data, count, 0.0f));
  }
  for (size_t t = 0; t < param_grads_.size(); ++t) {
    if (absl::Status s =
            Reserve(&param_grads_[t], plan_.dense_tensors()[t].size());
        !s.ok()) {
      return s;
    }
  }
  for (size_t t = 0; t < plan_.tasks().size(); ++t) {
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Add(dlogits_.data + t * batch,
                      nodes_[plan_.tasks()[t].output].gradient.data, batch));
  }
  for (int n = static_cast<int>(nodes.size()) - 1; n >= 0; --n) {
    if (!nodes[n].trained) continue;
    if (absl::Status s = BackwardLayer(n, batch); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardLayer(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const Layer& layer = plan_.spec().layer(node.index);
  int stride = 0;
  const float* gradient = GradientOf(n, &stride);
  const auto trained = [&](int input) { return plan_.nodes()[input].trained; };
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
    case Layer::kWide:
      return BackwardLookup(n, batch, gradient, stride);
    case Layer::kConcat: {
      int offset = 0;
      for (int input : node.inputs) {
        const int input_width = plan_.nodes()[input].width;
        if (trained(input) && views_[input].concat != n) {
          MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
              gradient, batch, node.width, offset, nodes_[input].gradient.data,
              input_width));
        }
        offset += input_width;
      }
      return absl::OkStatus();
    }
    case Layer::kMlp:
      return BackwardMlp(n, batch);
    case Layer::kFm:
    case Layer::kDotInteraction:
      return BackwardInteraction(n, batch, gradient);
    case Layer::kCross:
      return BackwardCross(n, batch);
    case Layer::kAttentionPooling:
      return BackwardAttention(n, batch);
    case Layer::kMmoe:
      return BackwardMmoe(n, batch);
    case Layer::kSlice:
      return BackwardSlice(n, batch);
    case Layer::kAdd:
      for (int input : node.inputs) {
        if (!trained(input)) continue;
        MODEL_RETURN_IF_KERNEL_ERROR(
            backend_->Add(gradient, nodes_[input].gradient.data,
                          static_cast<size_t>(batch) * node.width));
      }
      return absl::OkStatus();
    case Layer::KIND_NOT_SET:
      break;
  }
  return absl::InternalError(
      absl::StrCat("layer \"", node.name, "\" has no kind"));
}

absl::Status ModelGraph::BackwardMlp(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const MlpLayer& mlp = plan_.spec().layer(node.index).mlp();
  NodeBuffers& buffers = nodes_[n];
  const int layers = mlp.units_size();
  const int input = node.inputs[0];
  const PlanNode& input_node = plan_.nodes()[input];
  const bool input_trained = input_node.trained;
  const int first = plan_.FirstTensor(n);
  buffers.scratch_gradients.resize(layers - 1);
  float* upstream = buffers.gradient.data;
  if (LastRelu(mlp)) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ReluBackward(
        buffers.value.data, upstream, static_cast<size_t>(batch) * node.width));
  }
  // Each layer's upstream gradient, final from here, is read by two GEMMs.
  DeclareStableInput(upstream, static_cast<size_t>(batch) * node.width);
  for (int l = layers - 1; l >= 0; --l) {
    const int out_width = mlp.units(l);
    const int in_width = l == 0 ? input_node.width : mlp.units(l - 1);
    const float* x = l == 0 ? Value(input) : buffers.scratch[l - 1].data;
    const float* weights = in_->params[first + 2 * l].data;
    // dW = x^T upstream; db = column sums of upstream.
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        true, false, in_width, out_width, batch, 1.0f, x, in_width, upstream,
        out_width, 0.0f, param_grads_[first + 2 * l].data, out_width));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ColumnSums(
        upstream, batch, out_width, param_grads_[first + 2 * l + 1].data));
    if (l == 0) {
      if (!input_trained) break;
      // dx = upstream W^T, added to the input's gradient.
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, true, batch, in_width, out_width, 1.0f, upstream, out_width,
          weights, out_width, 1.0f, nodes_[input].gradient.data, in_width));
      break;
    }
    Buffer& dx = buffers.scratch_gradients[l - 1];
    if (absl::Status s = Reserve(&dx, static_cast<size_t>(batch) * in_width);
        !s.ok()) {
      return s;
    }
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Gemm(false, true, batch, in_width, out_width, 1.0f, upstream,
                       out_width, weights, out_width, 0.0f, dx.data, in_width));
    if (HiddenRelu(mlp)) {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->ReluBackward(buffers.scratch[l - 1].data, dx.data,
                                 static_cast<size_t>(batch) * in_width));
    }
    DeclareStableInput(dx.data, static_cast<size_t>(batch) * in_width);
    upstream = dx.data;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardCross(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const CrossLayer& cross = plan_.spec().layer(node.index).cross();
  NodeBuffers& buffers = nodes_[n];
  const int layers = cross.num_layers();
  const int width = node.width;
  const int rank = cross.low_rank();
  const size_t count = static_cast<size_t>(batch) * width;
  const int input = node.inputs[0];
  const bool input_trained = plan_.nodes()[input].trained;
  float* input_gradient = input_trained ? nodes_[input].gradient.data : nullptr;
  const float* x0 = Value(input);
  const int first = plan_.FirstTensor(n);
  const int per_layer = CrossTensors(cross);
  // scratch_gradients: du, dt (low rank), and two for the gradient of x_l
  // in turn.
  buffers.scratch_gradients.resize(4);
  Buffer& du = buffers.scratch_gradients[0];
  Buffer& dt = buffers.scratch_gradients[1];
  if (absl::Status s = Reserve(&du, count); !s.ok()) return s;
  // dt is one float, unused, at full rank.
  const size_t dt_count = static_cast<size_t>(batch) * rank;
  if (absl::Status s = Reserve(&dt, dt_count); !s.ok()) return s;
  const float* upstream = buffers.gradient.data;  // of x_{l+1}
  for (int l = layers - 1; l >= 0; --l) {
    const int tensor = first + per_layer * l;
    const float* x = l == 0 ? x0 : buffers.scratch[layers + l - 1].data;
    const float* u = buffers.scratch[l].data;
    // x_{l+1} = x0 * u + x_l: du = g * x0; dx0 += g * u; dx_l = g + du W^T.
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Multiply(upstream, x0, du.data, count, false));
    if (input_trained) {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Multiply(upstream, u, input_gradient, count, true));
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ColumnSums(
        du.data, batch, width, param_grads_[tensor + per_layer - 1].data));
    if (rank == 0) {
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          true, false, width, width, batch, 1.0f, x, width, du.data, width,
          0.0f, param_grads_[tensor].data, width));
    } else {
      const float* t = buffers.scratch[2 * layers + l].data;
      // u = t V, t = x U: dV = t^T du; dt = du V^T; dU = x^T dt.
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          true, false, rank, width, batch, 1.0f, t, rank, du.data, width, 0.0f,
          param_grads_[tensor + 1].data, width));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, true, batch, rank, width, 1.0f, du.data, width,
          in_->params[tensor + 1].data, width, 0.0f, dt.data, rank));
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Gemm(true, false, width, rank, batch, 1.0f, x, width,
                         dt.data, rank, 0.0f, param_grads_[tensor].data, rank));
    }
    float* below = nullptr;  // the gradient of x_l
    if (l > 0) {
      Buffer& next = buffers.scratch_gradients[2 + l % 2];
      if (absl::Status s = Reserve(&next, count); !s.ok()) return s;
      below = next.data;
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(below, count, 0.0f));
    } else if (input_trained) {
      below = input_gradient;
    } else {
      break;
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Add(upstream, below, count));
    if (rank == 0) {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Gemm(false, true, batch, width, width, 1.0f, du.data, width,
                         in_->params[tensor].data, width, 1.0f, below, width));
    } else {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->Gemm(false, true, batch, width, rank, 1.0f, dt.data, rank,
                         in_->params[tensor].data, rank, 1.0f, below, width));
    }
    upstream = below;
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::TrainStep(const GraphInputs& in, GraphOutputs* out,
                                   const GraphInputs* next) {
  const TrainingStep training_step(backend_, &training_step_);
  InputSet& set = sets_[active_];
  if (!set.staged) {
    if (absl::Status s = UploadInputs(in, /*with_labels=*/true, &set,
                                      /*idle=*/false);
        !s.ok()) {
      return s;
    }
  }
  set.staged = false;
  in_ = &set;
  const int batch = in.batch;
  if (absl::Status s = Forward(batch); !s.ok()) return s;
  const size_t tasks = plan_.tasks().size();
  for (Buffer* buffer : {&probabilities_, &dlogits_}) {
    if (absl::Status s = Reserve(buffer, tasks * batch); !s.ok()) return s;
  }
  if (absl::Status s = Reserve(&loss_, tasks); !s.ok()) return s;
  for (size_t t = 0; t < tasks; ++t) {
    const size_t offset = t * batch;
    const float* scale = in_->loss_scale.data;
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->SigmoidCrossEntropy(
        nodes_[plan_.tasks()[t].output].value.data, in_->labels.data + offset,
        scale == nullptr ? nullptr : scale + offset, batch,
        probabilities_.data + offset, dlogits_.data + offset, loss_.data + t));
  }
  if (absl::Status s = Backward(batch); !s.ok()) return s;
  if (next != nullptr && !backend_->ComputesOnHostMemory()) {
    // The other set was last read by the step before this one, whose copy
    // of its outputs to the host waited those kernels out: the upload need
    // not wait for this step's kernels and runs while they do; the next
    // step's kernels wait for it.
    InputSet& other = sets_[1 - active_];
    if (absl::Status s = UploadInputs(*next, /*with_labels=*/true, &other,
                                      /*idle=*/true);
        !s.ok()) {
      return s;
    }
    other.staged = true;
    active_ = 1 - active_;
  }

  out->probabilities.resize(tasks * batch);
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->CopyToHost(out->probabilities.data(), probabilities_.data,
                           out->probabilities.size() * sizeof(float)));
  out->task_loss_sums.resize(tasks);
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyToHost(
      out->task_loss_sums.data(), loss_.data, tasks * sizeof(float)));
  out->loss_sum = 0.0f;
  for (float task_loss : out->task_loss_sums) out->loss_sum += task_loss;
  out->table_grads.resize(table_grads_.size());
  for (size_t t = 0; t < table_grads_.size(); ++t) {
    out->table_grads[t].resize(static_cast<size_t>(in_->table_row_counts[t]) *
                               plan_.table_dim(t));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyToHost(out->table_grads[t].data(), table_grads_[t].data,
                             out->table_grads[t].size() * sizeof(float)));
  }
  out->dense_grads.resize(param_grads_.size());
  for (size_t t = 0; t < param_grads_.size(); ++t) {
    out->dense_grads[t].resize(plan_.dense_tensors()[t].size());
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyToHost(out->dense_grads[t].data(), param_grads_[t].data,
                             out->dense_grads[t].size() * sizeof(float)));
  }
  return absl::OkStatus();
}

void ModelGraph::DeclareStableInput(const float* data, size_t count) {
  if (training_step_) backend_->DeclareStableInput(data, count);
}

absl::Status ModelGraph::Predict(const GraphInputs& in,
                                 std::vector<float>* probabilities) {
  // The set that holds no staged inputs.
  InputSet& set = sets_[sets_[active_].staged ? 1 - active_ : active_];
  if (absl::Status s =
          UploadInputs(in, /*with_labels=*/false, &set, /*idle=*/false);
      !s.ok()) {
    return s;
  }
  in_ = &set;
  if (absl::Status s = Forward(in.batch); !s.ok()) return s;
  const size_t batch = in.batch;
  probabilities->resize(plan_.tasks().size() * batch);
  for (size_t t = 0; t < plan_.tasks().size(); ++t) {
    float* logits = probabilities->data() + t * batch;
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyToHost(logits, nodes_[plan_.tasks()[t].output].value.data,
                             batch * sizeof(float)));
    for (size_t b = 0; b < batch; ++b) {
      logits[b] = 1.0f / (1.0f + std::exp(-logits[b]));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps::model
