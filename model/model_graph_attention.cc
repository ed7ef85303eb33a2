// ModelGraph's attention_pooling layer (DIN's local activation unit), made
// of the backend's kernels: no kernel of its own, so the CPU and CUDA run
// the same steps.
//
// With B examples, L positions and keys of dim d, the keys' embedding value
// (B x L*d) is read as BL = B * L rows of d (row i is example i / L's
// position i % L), and the query (B x d) repeated L times to match:
//
//   x      = [q, k, q - k, q * k]                       BL x 4d
//   a_l    = relu(a_{l-1} W_l + b_l), a_0 = x, then a linear unit: s (BL)
//   w      = s * mask                                   BL
//   out[b] = sum over its L rows i of w[i] * k[i]       B x d
//
// Scratch (NodeBuffers::scratch): the query repeated, x, a_1..a_M (M = the
// hidden layers and the unit; a_M is s), w, w repeated over d, w * k, and
// constants rebuilt when the batch changes: the row-to-example index
// (i / L), the broadcast index (i for each of d columns), -1s and 1s.

#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/kernel_status.h"
#include "model/model_graph.h"

namespace ps::model {
namespace {

// Scratch slots after the MLP's M outputs.
enum AttentionScratch {
  kQueryRows = 0,
  kX = 1,
  kFirstActivation = 2,
};

}  // namespace

// The slots past the activations: w, w over d, w * k, the row-to-example
// index, the broadcast index, -1s, 1s.
struct ModelGraph::AttentionSlots {
  int weights, broadcast, weighted, example_index, broadcast_index, minus_ones,
      ones;
  explicit AttentionSlots(int layers)
      : weights(kFirstActivation + layers),
        broadcast(weights + 1),
        weighted(weights + 2),
        example_index(weights + 3),
        broadcast_index(weights + 4),
        minus_ones(weights + 5),
        ones(weights + 6) {}
  int count() const { return ones + 1; }
};

absl::Status ModelGraph::AttentionConstants(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  NodeBuffers& buffers = nodes_[n];
  const int layers =
      plan_.spec().layer(node.index).attention_pooling().units_size() + 1;
  const AttentionSlots slots(layers);
  buffers.scratch.resize(slots.count());
  if (buffers.constants_batch == batch) return absl::OkStatus();
  const int positions = node.rows;
  const int dim = node.row_dim;
  const size_t rows = static_cast<size_t>(batch) * positions;
  std::vector<int32_t> example_index(rows), broadcast_index(rows * dim);
  for (size_t i = 0; i < rows; ++i) {
    example_index[i] = static_cast<int32_t>(i / positions);
    for (int c = 0; c < dim; ++c)
      broadcast_index[i * dim + c] = static_cast<int32_t>(i);
  }
  static_assert(sizeof(int32_t) == sizeof(float),
                "indices share float buffers");
  for (const auto& [slot, host, count] :
       {std::make_tuple(slots.example_index,
                        static_cast<const void*>(example_index.data()), rows),
        std::make_tuple(slots.broadcast_index,
                        static_cast<const void*>(broadcast_index.data()),
                        rows * dim)}) {
    Buffer& buffer = buffers.scratch[slot];
    RETURN_IF_ERROR(Reserve(&buffer, count));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyToDevice(buffer.data, host, count * sizeof(float)));
  }
  RETURN_IF_ERROR(Reserve(&buffers.scratch[slots.minus_ones], rows * dim));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(
      buffers.scratch[slots.minus_ones].data, rows * dim, -1.0f));
  RETURN_IF_ERROR(Reserve(&buffers.scratch[slots.ones], dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Fill(buffers.scratch[slots.ones].data, dim, 1.0f));
  buffers.constants_batch = batch;
  return absl::OkStatus();
}

const float* ModelGraph::SequenceMask(int n) const {
  const PlanNode& node = plan_.nodes()[n];
  const int sequence = plan_.nodes()[node.inputs[1]].inputs[0];
  return in_->sequence_masks[plan_.SequenceOf(sequence)].data;
}

absl::Status ModelGraph::ForwardAttention(int n, int batch) {
  RETURN_IF_ERROR(AttentionConstants(n, batch));
  const PlanNode& node = plan_.nodes()[n];
  const AttentionPoolingLayer& attention =
      plan_.spec().layer(node.index).attention_pooling();
  NodeBuffers& buffers = nodes_[n];
  const int layers = attention.units_size() + 1;
  const AttentionSlots slots(layers);
  const int dim = node.row_dim;
  const size_t rows = static_cast<size_t>(batch) * node.rows;
  const auto reserve = [&](int slot, size_t floats) -> float* {
    return Reserve(&buffers.scratch[slot], floats).ok()
               ? buffers.scratch[slot].data
               : nullptr;
  };
  const float* query = Value(node.inputs[0]);
  const float* keys = Value(node.inputs[1]);
  const auto* example_index = reinterpret_cast<const int32_t*>(
      buffers.scratch[slots.example_index].data);
  float* query_rows = reserve(kQueryRows, rows * dim);
  float* x = reserve(kX, rows * 4 * dim);
  float* scratch = reserve(slots.weighted, rows * dim);
  if (query_rows == nullptr || x == nullptr || scratch == nullptr) {
    return absl::ResourceExhaustedError("attention_pooling's scratch");
  }
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->GatherConcat(
      query, example_index, static_cast<int>(rows), 1, dim, query_rows, dim));
  const int width = 4 * dim;
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyColumns(
      query_rows, static_cast<int>(rows), dim, x, width, 0));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->CopyColumns(keys, static_cast<int>(rows), dim, x, width, dim));
  // q - k, as -k + q.
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(keys, buffers.scratch[slots.minus_ones].data, scratch,
                         rows * dim, /*accumulate=*/false));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Add(query_rows, scratch, rows * dim));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyColumns(
      scratch, static_cast<int>(rows), dim, x, width, 2 * dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(query_rows, keys, scratch, rows * dim, false));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyColumns(
      scratch, static_cast<int>(rows), dim, x, width, 3 * dim));
  // The MLP over the rows.
  const int first = plan_.FirstTensor(n);
  const float* in = x;
  int in_width = width;
  for (int l = 0; l < layers; ++l) {
    const int out_width = l + 1 < layers ? attention.units(l) : 1;
    float* out = reserve(kFirstActivation + l, rows * out_width);
    if (out == nullptr) {
      return absl::ResourceExhaustedError("attention_pooling's scratch");
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        false, false, static_cast<int>(rows), out_width, in_width, 1.0f, in,
        in_width, in_->params[first + 2 * l].data, out_width, 0.0f, out,
        out_width));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->BiasActivation(
        out, in_->params[first + 2 * l + 1].data, static_cast<int>(rows),
        out_width, /*relu=*/l + 1 < layers));
    in = out;
    in_width = out_width;
  }
  // The weights, masked; each row's key scaled by its weight; summed per
  // example.
  float* weights = reserve(slots.weights, rows);
  float* broadcast = reserve(slots.broadcast, rows * dim);
  if (weights == nullptr || broadcast == nullptr) {
    return absl::ResourceExhaustedError("attention_pooling's scratch");
  }
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(in, SequenceMask(n), weights, rows, false));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->GatherConcat(weights,
                             reinterpret_cast<const int32_t*>(
                                 buffers.scratch[slots.broadcast_index].data),
                             static_cast<int>(rows), dim, 1, broadcast, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(keys, broadcast, scratch, rows * dim, false));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->ScatterReduce(
      scratch, dim, dim, example_index, static_cast<int>(rows), 1, dim, batch,
      buffers.value.data));
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardAttention(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const AttentionPoolingLayer& attention =
      plan_.spec().layer(node.index).attention_pooling();
  NodeBuffers& buffers = nodes_[n];
  const int layers = attention.units_size() + 1;
  const AttentionSlots slots(layers);
  const int dim = node.row_dim;
  const int width = 4 * dim;
  const int rows = batch * node.rows;
  const size_t cells = static_cast<size_t>(rows) * dim;
  // Gradient scratch: the upstream per row (d), a product, its row sums,
  // then per MLP layer its output's gradient, then x's, then the query
  // rows'.
  buffers.scratch_gradients.resize(5 + layers);
  const auto reserve = [&](int slot, size_t floats) -> float* {
    return Reserve(&buffers.scratch_gradients[slot], floats).ok()
               ? buffers.scratch_gradients[slot].data
               : nullptr;
  };
  float* upstream = reserve(0, cells);
  float* product = reserve(1, cells);
  float* row_sums = reserve(2, rows);
  float* dx = reserve(3 + layers, static_cast<size_t>(rows) * width);
  float* dquery_rows = reserve(4 + layers, cells);
  if (upstream == nullptr || product == nullptr || row_sums == nullptr ||
      dx == nullptr || dquery_rows == nullptr) {
    return absl::ResourceExhaustedError("attention_pooling's scratch");
  }
  const auto* example_index = reinterpret_cast<const int32_t*>(
      buffers.scratch[slots.example_index].data);
  const float* keys = Value(node.inputs[1]);
  const float* query_rows = buffers.scratch[kQueryRows].data;
  float* dkeys = nodes_[node.inputs[1]].gradient.data;
  // d out[b] reaches each of its rows: d(w * k) = upstream.
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->GatherConcat(
      buffers.gradient.data, example_index, rows, 1, dim, upstream, dim));
  // dk += upstream * w; dw = rows' sums of upstream * k, masked.
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(upstream, buffers.scratch[slots.broadcast].data, dkeys,
                         cells, /*accumulate=*/true));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(upstream, keys, product, cells, false));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Gemm(false, false, rows, 1, dim, 1.0f, product, dim,
                     buffers.scratch[slots.ones].data, 1, 0.0f, row_sums, 1));
  float* dscore = reserve(3 + layers - 1, rows);
  if (dscore == nullptr) {
    return absl::ResourceExhaustedError("attention_pooling's scratch");
  }
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(row_sums, SequenceMask(n), dscore, rows, false));
  // Back through the MLP to x.
  const int first = plan_.FirstTensor(n);
  const float* gradient = dscore;
  for (int l = layers - 1; l >= 0; --l) {
    const int out_width = l + 1 < layers ? attention.units(l) : 1;
    const int in_width = l == 0 ? width : attention.units(l - 1);
    const float* in = l == 0 ? buffers.scratch[kX].data
                             : buffers.scratch[kFirstActivation + l - 1].data;
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        true, false, in_width, out_width, rows, 1.0f, in, in_width, gradient,
        out_width, 0.0f, param_grads_[first + 2 * l].data, out_width));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ColumnSums(
        gradient, rows, out_width, param_grads_[first + 2 * l + 1].data));
    float* below =
        l == 0 ? dx : reserve(3 + l - 1, static_cast<size_t>(rows) * in_width);
    if (below == nullptr) {
      return absl::ResourceExhaustedError("attention_pooling's scratch");
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        false, true, rows, in_width, out_width, 1.0f, gradient, out_width,
        in_->params[first + 2 * l].data, out_width, 0.0f, below, in_width));
    if (l > 0) {
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->ReluBackward(
          in, below, static_cast<size_t>(rows) * in_width));
    }
    gradient = below;
  }
  // x = [q, k, q - k, q * k]: dq gets parts 0 and 2 and part 3 * k; dk
  // parts 1, -2 and part 3 * q.
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(dquery_rows, cells, 0.0f));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->AccumulateColumns(dx, rows, width, 0, dquery_rows, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->AccumulateColumns(dx, rows, width, 2 * dim, dquery_rows, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->AccumulateColumns(dx, rows, width, dim, dkeys, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(product, cells, 0.0f));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->AccumulateColumns(dx, rows, width, 2 * dim, product, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(product, buffers.scratch[slots.minus_ones].data, dkeys,
                         cells, /*accumulate=*/true));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(product, cells, 0.0f));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->AccumulateColumns(dx, rows, width, 3 * dim, product, dim));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(product, keys, dquery_rows, cells, true));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Multiply(product, query_rows, dkeys, cells, true));
  // The query's rows add up to its gradient.
  if (plan_.nodes()[node.inputs[0]].trained) {
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->ScatterAdd(dquery_rows, dim, dim, example_index, rows, 1, dim,
                             nodes_[node.inputs[0]].gradient.data));
  }
  return absl::OkStatus();
}

}  // namespace ps::model
