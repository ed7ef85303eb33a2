// File: model/model_graph.h
//
// ModelGraph runs a planned model (model_plan.h) on a kernels::Backend: the
// forward pass of every layer in the plan's order, the mean binary
// cross-entropy of each task's logit (summed over the tasks, each scaled by
// its loss_scale), and the backward pass back to the rows
// of every table and every dense tensor. The same code runs on the CPU and a
// GPU; each layer's math is the backend's kernels (docs/models.md).
//
// Parameters come in per step (pulled from the servers) and gradients go out
// (to be pushed); the graph keeps no parameters, only scratch buffers in
// backend memory, grown to the largest batch seen.
//
// Not thread-safe: one graph per thread. The plan and the backend must
// outlive the graph.

#ifndef PS_MODEL_MODEL_GRAPH_H_
#define PS_MODEL_MODEL_GRAPH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "model/model_plan.h"

namespace ps::model {

// A step's inputs, all in host memory.
struct GraphInputs {
  int batch = 0;
  // tasks x batch labels in {0, 1}, task-major (the plan's tasks() order);
  // unused by Predict().
  const float* labels = nullptr;
  // tasks x batch factors of each example's loss per task (kernels/
  // backend.h's SigmoidCrossEntropy scale: a weighted or masked loss, and the
  // task's loss weight), or null for 1; unused by Predict().
  const float* loss_scale = nullptr;
  // Per table of the spec: its rows for this batch (table_rows[t] holds
  // table_row_counts[t] x dim floats; rows the step does not read may be
  // left out, but every index below must be in range).
  std::vector<const float*> table_rows;
  std::vector<int> table_row_counts;
  // plan.lookups().size() x batch, lookup-major: example b's row of lookup
  // l is lookup_index[l * batch + b], an index into its table's rows.
  const int32_t* lookup_index = nullptr;
  // One per plan.dense_nodes(): batch x its columns, already transformed.
  std::vector<const float*> dense_inputs;
  // One per plan.sequence_nodes(): batch x max_length, 1 where the example
  // has an item at that position, else 0.
  std::vector<const float*> sequence_masks;
  // One per plan.dense_tensors().
  std::vector<const float*> dense_params;
};

// A step's results, in host memory; vectors are resized by the graph.
struct GraphOutputs {
  // The sum of task_loss_sums: each task's sum over the batch of its scaled
  // cross-entropy.
  float loss_sum = 0.0f;
  std::vector<float> task_loss_sums;
  // tasks x batch, task-major.
  std::vector<float> probabilities;
  // Per table: the gradient of each of its rows (table_row_counts x dim;
  // zero for rows the batch did not read).
  std::vector<std::vector<float>> table_grads;
  // Per plan.dense_tensors() entry.
  std::vector<std::vector<float>> dense_grads;
};

class ModelGraph {
 public:
  ModelGraph(const ModelPlan* plan, kernels::Backend* backend);
  ~ModelGraph();

  ModelGraph(const ModelGraph&) = delete;
  ModelGraph& operator=(const ModelGraph&) = delete;

  // Forward and backward: fills every field of `outputs`. Given `next`,
  // the inputs of the step after this one, a backend that computes in its
  // own memory (a GPU) copies them there while this step's kernels run,
  // and the next TrainStep() skips their upload: it must be given the same
  // inputs, their host arrays unchanged.
  absl::Status TrainStep(const GraphInputs& inputs, GraphOutputs* outputs,
                         const GraphInputs* next = nullptr);

  // Forward only: each task's probabilities, tasks x batch, task-major.
  // Leaves staged inputs be.
  absl::Status Predict(const GraphInputs& inputs,
                       std::vector<float>* probabilities);

 private:
  struct Buffer {
    float* data = nullptr;
    size_t capacity = 0;
  };
  // One input array: what the kernels read (the caller's array on a backend
  // that computes on host memory, else `storage`, its copy).
  struct Input {
    Buffer storage;
    const float* data = nullptr;
  };
  // Per node: its value and, when it is trained, its gradient; and the
  // layer's own scratch (an mlp's hidden layers, a cross's steps, the
  // stacked rows of fm and dot_interaction).
  struct NodeBuffers {
    Buffer value, gradient;
    std::vector<Buffer> scratch;
    std::vector<Buffer> scratch_gradients;
    // The batch its constant scratch (attention_pooling's indices) was
    // built for; -1: none yet.
    int constants_batch = -1;
  };
  // An embedding layer read by one concat alone writes its value (and reads
  // its gradient) in place, as columns of the concat's: no copy either way.
  struct ConcatView {
    int concat = -1;  // the concat node; -1: the layer has its own buffers
    int offset = 0;   // its first column there
  };

  // A step's inputs as the kernels read them. Two, so that the next step's
  // upload overlaps this one's kernels.
  struct InputSet {
    Input labels;
    // Its data is null when the step's loss is not scaled.
    Input loss_scale;
    std::vector<Input> table_rows, dense_inputs, params, sequence_masks;
    // Per embedding or wide layer: its rows' indices, example-major (batch
    // x its lookups, so that one kernel call gathers or scatters them all),
    // and their host copy, which the kernels read on a CPU.
    std::vector<Input> layer_index;
    std::vector<std::vector<int32_t>> layer_index_host;
    std::vector<int> table_row_counts;
    // Holds the next TrainStep()'s inputs already.
    bool staged = false;
  };

  // Whether `node` is a task's output.
  bool IsOutput(int node) const;
  absl::Status Reserve(Buffer* buffer, size_t floats);
  // `idle`: nothing queued reads `input` (CopyToIdleDevice).
  absl::Status Upload(Input* input, const void* host, size_t floats, bool idle);
  absl::Status UploadInputs(const GraphInputs& inputs, bool with_labels,
                            InputSet* set, bool idle);
  // The value of node n, as the kernels read it.
  const float* Value(int node) const;
  // Where a layer's value or gradient is, and its row stride (its own
  // buffer, or its columns of the concat it is a view of).
  float* ValueOf(int node, int* stride);
  float* GradientOf(int node, int* stride);
  // An embedding or wide layer's indices (InputSet::layer_index).
  const int32_t* LayerIndex(int node) const;
  absl::Status Forward(int batch);
  absl::Status Backward(int batch);
  absl::Status ForwardLayer(int node, int batch);
  absl::Status BackwardLayer(int node, int batch);
  // embedding and wide: rows gathered (and the wide layer's dense part);
  // their gradient scattered back to the tables' rows.
  absl::Status ForwardLookup(int node, int batch, float* value, int stride);
  absl::Status BackwardLookup(int node, int batch, const float* gradient,
                              int stride);
  // fm and dot_interaction: their inputs' rows side by side (the input's
  // own value when there is one input); the gradient of those rows, split
  // among the inputs.
  absl::Status StackRows(int node, int batch, const float** rows);
  absl::Status BackwardInteraction(int node, int batch, const float* gradient);
  absl::Status ForwardMlp(int node, int batch);
  absl::Status BackwardMlp(int node, int batch);
  // Backend::DeclareStableInput(), within a TrainStep() only: a matrix
  // Predict() reads is read once, and a copy kept would only hold memory.
  void DeclareStableInput(const float* data, size_t count);
  absl::Status ForwardCross(int node, int batch);
  absl::Status BackwardCross(int node, int batch);
  // attention_pooling (model_graph_attention.cc): its scratch's places, its
  // constants for `batch`, the mask of its sequence.
  struct AttentionSlots;
  absl::Status AttentionConstants(int node, int batch);
  const float* SequenceMask(int node) const;
  absl::Status ForwardAttention(int node, int batch);
  absl::Status BackwardAttention(int node, int batch);
  // mmoe and slice (model_graph_mmoe.cc).
  struct MmoeSlots;
  absl::Status MmoeConstants(int node, int batch);
  absl::Status ForwardMmoe(int node, int batch);
  absl::Status BackwardMmoe(int node, int batch);
  absl::Status ForwardSlice(int node, int batch);
  absl::Status BackwardSlice(int node, int batch);
  void Release(Buffer& buffer);

  const ModelPlan& plan_;
  kernels::Backend* const backend_;
  // Within a TrainStep().
  bool training_step_ = false;

  InputSet sets_[2];
  // The set the next TrainStep() reads; in_: the one this step reads.
  int active_ = 0;
  const InputSet* in_ = &sets_[0];
  std::vector<NodeBuffers> nodes_;
  std::vector<ConcatView> views_;
  // Per embedding or wide layer: its lookups (into plan.lookups()), in the
  // order of its columns.
  std::vector<std::vector<int>> layer_lookups_;
  std::vector<Buffer> table_grads_, param_grads_;
  Buffer probabilities_, dlogits_, loss_;
};

}  // namespace ps::model

#endif  // PS_MODEL_MODEL_GRAPH_H_
