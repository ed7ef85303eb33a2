// ModelGraph's mmoe and slice layers, made of the backend's kernels.
//
// mmoe over x (B x w) with E experts of `units` (u the last) and T tasks:
//
//   y_e    = expert e's MLP of x (ReLU on every layer)       B x u
//   Y      = [y_1 .. y_E]                                    B x E u
//   g_t    = softmax(x V_t + c_t)                            B x E
//   G_t    = g_t repeated over each expert's u columns       B x E u
//   out_t  = sum over e of (Y * G_t)[:, e u .. (e + 1) u)    B x u
//
// and out_t is written at columns [t u, (t + 1) u) of the value.

#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/kernel_status.h"
#include "model/model_graph.h"

namespace ps::model {

// Where the mmoe layer's scratch is (NodeBuffers::scratch): each expert's
// layers' outputs, then Y, each task's gate and repeated gate, Y * G_t, one
// task's sum, and the constants: the gate-repeat index and the matrix that
// sums each expert's u columns (E u x E, ones on each block).
struct ModelGraph::MmoeSlots {
  int experts, layers, tasks;
  MmoeSlots(const MmoeLayer& mmoe)
      : experts(mmoe.num_experts()),
        layers(mmoe.units_size()),
        tasks(mmoe.num_tasks()) {}
  int activation(int e, int l) const { return e * layers + l; }
  int stacked() const { return experts * layers; }
  int gate(int t) const { return stacked() + 1 + t; }
  int repeated_gate(int t) const { return stacked() + 1 + tasks + t; }
  int weighted() const { return stacked() + 1 + 2 * tasks; }
  int sum() const { return weighted() + 1; }
  int repeat_index() const { return weighted() + 2; }
  int block_ones() const { return weighted() + 3; }
  int count() const { return weighted() + 4; }
};

absl::Status ModelGraph::MmoeConstants(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const MmoeLayer& mmoe = plan_.spec().layer(node.index).mmoe();
  const MmoeSlots slots(mmoe);
  NodeBuffers& buffers = nodes_[n];
  buffers.scratch.resize(slots.count());
  if (buffers.constants_batch == batch) return absl::OkStatus();
  const int experts = mmoe.num_experts();
  const int units = mmoe.units(mmoe.units_size() - 1);
  const int width = experts * units;
  std::vector<int32_t> repeat(static_cast<size_t>(batch) * width);
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < width; ++c)
      repeat[static_cast<size_t>(b) * width + c] = b * experts + c / units;
  }
  std::vector<float> block_ones(static_cast<size_t>(width) * experts, 0.0f);
  for (int c = 0; c < width; ++c) block_ones[c * experts + c / units] = 1.0f;
  static_assert(sizeof(int32_t) == sizeof(float),
                "indices share float buffers");
  Buffer& index = buffers.scratch[slots.repeat_index()];
  RETURN_IF_ERROR(Reserve(&index, repeat.size()));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyToDevice(
      index.data, repeat.data(), repeat.size() * sizeof(float)));
  Buffer& ones = buffers.scratch[slots.block_ones()];
  RETURN_IF_ERROR(Reserve(&ones, block_ones.size()));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyToDevice(
      ones.data, block_ones.data(), block_ones.size() * sizeof(float)));
  buffers.constants_batch = batch;
  return absl::OkStatus();
}

absl::Status ModelGraph::ForwardMmoe(int n, int batch) {
  RETURN_IF_ERROR(MmoeConstants(n, batch));
  const PlanNode& node = plan_.nodes()[n];
  const MmoeLayer& mmoe = plan_.spec().layer(node.index).mmoe();
  const MmoeSlots slots(mmoe);
  NodeBuffers& buffers = nodes_[n];
  const int experts = mmoe.num_experts();
  const int layers = mmoe.units_size();
  const int units = mmoe.units(layers - 1);
  const int width = experts * units;
  const int input_width = plan_.nodes()[node.inputs[0]].width;
  const float* x = Value(node.inputs[0]);
  const int first = plan_.FirstTensor(n);
  const auto buffer = [&](int slot, size_t floats) -> absl::StatusOr<float*> {
    RETURN_IF_ERROR(Reserve(&buffers.scratch[slot], floats));
    return buffers.scratch[slot].data;
  };
  const size_t rows = batch;
  ASSIGN_OR_RETURN(float* stacked, buffer(slots.stacked(), rows * width));
  for (int e = 0; e < experts; ++e) {
    const float* in = x;
    int in_width = input_width;
    for (int l = 0; l < layers; ++l) {
      const int out_width = mmoe.units(l);
      ASSIGN_OR_RETURN(float* out,
                       buffer(slots.activation(e, l), rows * out_width));
      const int tensor = first + 2 * (e * layers + l);
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, false, batch, out_width, in_width, 1.0f, in, in_width,
          in_->params[tensor].data, out_width, 0.0f, out, out_width));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->BiasActivation(
          out, in_->params[tensor + 1].data, batch, out_width, true));
      in = out;
      in_width = out_width;
    }
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->CopyColumns(in, batch, units, stacked, width, e * units));
  }
  ASSIGN_OR_RETURN(float* weighted, buffer(slots.weighted(), rows * width));
  ASSIGN_OR_RETURN(float* sum, buffer(slots.sum(), rows * units));
  const int gates = first + 2 * experts * layers;
  for (int t = 0; t < mmoe.num_tasks(); ++t) {
    ASSIGN_OR_RETURN(float* gate, buffer(slots.gate(t), rows * experts));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        false, false, batch, experts, input_width, 1.0f, x, input_width,
        in_->params[gates + 2 * t].data, experts, 0.0f, gate, experts));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->BiasActivation(
        gate, in_->params[gates + 2 * t + 1].data, batch, experts, false));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Softmax(gate, batch, experts, gate));
    ASSIGN_OR_RETURN(float* repeated,
                     buffer(slots.repeated_gate(t), rows * width));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->GatherConcat(gate,
                               reinterpret_cast<const int32_t*>(
                                   buffers.scratch[slots.repeat_index()].data),
                               batch, width, 1, repeated, width));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Multiply(stacked, repeated, weighted, rows * width, false));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(sum, rows * units, 0.0f));
    for (int e = 0; e < experts; ++e) {
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
          weighted, batch, width, e * units, sum, units));
    }
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->CopyColumns(
        sum, batch, units, buffers.value.data, node.width, t * units));
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardMmoe(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const MmoeLayer& mmoe = plan_.spec().layer(node.index).mmoe();
  const MmoeSlots slots(mmoe);
  NodeBuffers& buffers = nodes_[n];
  const int experts = mmoe.num_experts();
  const int layers = mmoe.units_size();
  const int units = mmoe.units(layers - 1);
  const int width = experts * units;
  const int input = node.inputs[0];
  const int input_width = plan_.nodes()[input].width;
  const bool input_trained = plan_.nodes()[input].trained;
  const float* x = Value(input);
  float* dx = nodes_[input].gradient.data;
  const int first = plan_.FirstTensor(n);
  const int gates = first + 2 * experts * layers;
  const size_t rows = batch;
  // Gradient scratch: one task's sum, its spread over the experts, the
  // repeated gate's gradient, the gate's and its logits', Y's, one expert's
  // output's, then each expert layer's input's (but the first's).
  enum { kSum, kSpread, kRepeated, kGate, kLogits, kStacked, kExpert, kLayer };
  buffers.scratch_gradients.resize(kLayer + layers);
  const auto buffer = [&](int slot, size_t floats) -> absl::StatusOr<float*> {
    RETURN_IF_ERROR(Reserve(&buffers.scratch_gradients[slot], floats));
    return buffers.scratch_gradients[slot].data;
  };
  ASSIGN_OR_RETURN(float* dsum, buffer(kSum, rows * units));
  ASSIGN_OR_RETURN(float* spread, buffer(kSpread, rows * width));
  ASSIGN_OR_RETURN(float* drepeated, buffer(kRepeated, rows * width));
  ASSIGN_OR_RETURN(float* dgate, buffer(kGate, rows * experts));
  ASSIGN_OR_RETURN(float* dlogits, buffer(kLogits, rows * experts));
  ASSIGN_OR_RETURN(float* dstacked, buffer(kStacked, rows * width));
  ASSIGN_OR_RETURN(float* dexpert, buffer(kExpert, rows * units));
  const float* stacked = buffers.scratch[slots.stacked()].data;
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(dstacked, rows * width, 0.0f));
  for (int t = 0; t < mmoe.num_tasks(); ++t) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(dsum, rows * units, 0.0f));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
        buffers.gradient.data, batch, node.width, t * units, dsum, units));
    for (int e = 0; e < experts; ++e) {
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->CopyColumns(dsum, batch, units, spread, width, e * units));
    }
    const float* repeated = buffers.scratch[slots.repeated_gate(t)].data;
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Multiply(spread, repeated, dstacked, rows * width, true));
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Multiply(spread, stacked, drepeated, rows * width, false));
    // Each expert's u columns summed: the gate's gradient.
    MODEL_RETURN_IF_KERNEL_ERROR(
        backend_->Gemm(false, false, batch, experts, width, 1.0f, drepeated,
                       width, buffers.scratch[slots.block_ones()].data, experts,
                       0.0f, dgate, experts));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->SoftmaxBackward(
        buffers.scratch[slots.gate(t)].data, dgate, batch, experts, dlogits));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
        true, false, input_width, experts, batch, 1.0f, x, input_width, dlogits,
        experts, 0.0f, param_grads_[gates + 2 * t].data, experts));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->ColumnSums(
        dlogits, batch, experts, param_grads_[gates + 2 * t + 1].data));
    if (input_trained) {
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, true, batch, input_width, experts, 1.0f, dlogits, experts,
          in_->params[gates + 2 * t].data, experts, 1.0f, dx, input_width));
    }
  }
  for (int e = 0; e < experts; ++e) {
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(dexpert, rows * units, 0.0f));
    MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
        dstacked, batch, width, e * units, dexpert, units));
    float* upstream = dexpert;
    for (int l = layers - 1; l >= 0; --l) {
      const int out_width = mmoe.units(l);
      const int in_width = l == 0 ? input_width : mmoe.units(l - 1);
      const float* in =
          l == 0 ? x : buffers.scratch[slots.activation(e, l - 1)].data;
      const int tensor = first + 2 * (e * layers + l);
      MODEL_RETURN_IF_KERNEL_ERROR(
          backend_->ReluBackward(buffers.scratch[slots.activation(e, l)].data,
                                 upstream, rows * out_width));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          true, false, in_width, out_width, batch, 1.0f, in, in_width, upstream,
          out_width, 0.0f, param_grads_[tensor].data, out_width));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->ColumnSums(
          upstream, batch, out_width, param_grads_[tensor + 1].data));
      if (l == 0) {
        if (input_trained) {
          MODEL_RETURN_IF_KERNEL_ERROR(
              backend_->Gemm(false, true, batch, input_width, out_width, 1.0f,
                             upstream, out_width, in_->params[tensor].data,
                             out_width, 1.0f, dx, input_width));
        }
        break;
      }
      ASSIGN_OR_RETURN(float* below, buffer(kLayer + l - 1, rows * in_width));
      MODEL_RETURN_IF_KERNEL_ERROR(backend_->Gemm(
          false, true, batch, in_width, out_width, 1.0f, upstream, out_width,
          in_->params[tensor].data, out_width, 0.0f, below, in_width));
      upstream = below;
    }
  }
  return absl::OkStatus();
}

absl::Status ModelGraph::ForwardSlice(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const SliceLayer& slice = plan_.spec().layer(node.index).slice();
  const size_t count = static_cast<size_t>(batch) * node.width;
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Fill(nodes_[n].value.data, count, 0.0f));
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->AccumulateColumns(
      Value(node.inputs[0]), batch, plan_.nodes()[node.inputs[0]].width,
      slice.begin(), nodes_[n].value.data, node.width));
  return absl::OkStatus();
}

absl::Status ModelGraph::BackwardSlice(int n, int batch) {
  const PlanNode& node = plan_.nodes()[n];
  const int input = node.inputs[0];
  if (!plan_.nodes()[input].trained) return absl::OkStatus();
  const SliceLayer& slice = plan_.spec().layer(node.index).slice();
  const int input_width = plan_.nodes()[input].width;
  const size_t count = static_cast<size_t>(batch) * input_width;
  NodeBuffers& buffers = nodes_[n];
  buffers.scratch_gradients.resize(1);
  RETURN_IF_ERROR(Reserve(&buffers.scratch_gradients[0], count));
  float* spread = buffers.scratch_gradients[0].data;
  MODEL_RETURN_IF_KERNEL_ERROR(backend_->Fill(spread, count, 0.0f));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->CopyColumns(buffers.gradient.data, batch, node.width, spread,
                            input_width, slice.begin()));
  MODEL_RETURN_IF_KERNEL_ERROR(
      backend_->Add(spread, nodes_[input].gradient.data, count));
  return absl::OkStatus();
}

}  // namespace ps::model
