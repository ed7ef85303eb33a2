// File: kernels/ctr_model.h
//
// CtrModel is the forward and backward pass of the CTR models, composed from
// Backend kernels so that the same code runs on the CPU and on a GPU:
//
//   lr         logit = sum_s wide[key_s] + w . dense + b
//   wide_deep  lr's logit + MLP(concat(embedding[key_f] for f, dense))
//   deepfm     wide_deep's logit + FM second-order term over the embeddings
//
// The wide part sums a weight per field and, when the model has crosses, per
// cross (wide-only slots with their own index). Hidden layers use ReLU; the
// last layer has one output and no activation. The loss is the mean binary
// cross-entropy over the batch. Parameters come in per step (pulled from the
// servers) and gradients go out (to be pushed); the model keeps no parameters,
// only scratch buffers in backend memory.
//
// Not thread-safe: one model per thread. The backend must outlive the model.

#ifndef PS_KERNELS_CTR_MODEL_H_
#define PS_KERNELS_CTR_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/status.h"

namespace ps::kernels {

enum class ModelKind { kLogisticRegression, kWideDeep, kDeepFm };

// The one table of model names ("lr", "wide_deep", "deepfm"): flags, table
// names (<name>.embedding, ...) and reports use them.
const char* ModelName(ModelKind kind);
// The model named `name`; false (and `*kind` untouched) for none.
bool ModelKindFromName(const std::string& name, ModelKind* kind);

struct ModelConfig {
  ModelKind kind = ModelKind::kWideDeep;
  // Categorical fields per example (one key each). Default: 26 (Criteo).
  int fields = 26;
  // Dense (numeric) features per example. Default: 13 (Criteo).
  int dense_features = 13;
  // Wide-only slots per example after the fields (feature crosses); when
  // > 0, StepInputs::wide_index gives the wide part's rows. Default: 0.
  int crosses = 0;
  // Embedding dimension (wide_deep and deepfm). Default: 16.
  int embedding_dim = 16;
  // Hidden layer widths of the MLP. Default: 256, 128.
  std::vector<int> hidden = {256, 128};
};

// One dense parameter tensor (rows x cols), and how it starts.
struct DenseTensorSpec {
  std::string name;
  int rows = 0;
  int cols = 0;
  // Uniform on [-init_scale, init_scale]; 0 starts at zero.
  float init_scale = 0.0f;
  size_t size() const { return static_cast<size_t>(rows) * cols; }
};

// The dense tensors `config` needs, in the order StepInputs and StepOutputs
// use: the wide part's dense weights (only when there are dense features)
// and bias, then for each MLP layer its weights (Glorot-uniform) and bias.
std::vector<DenseTensorSpec> DenseTensors(const ModelConfig& config);

// A step's inputs, all in host memory.
struct StepInputs {
  int batch = 0;
  // Distinct keys in the batch; rows below are indexed by position.
  int num_unique = 0;
  // batch x fields indices into [0, num_unique).
  const int32_t* index = nullptr;
  // With crosses: batch x (fields + crosses) indices into the
  // num_wide_rows wide rows; else null (the wide part reads `index` and
  // num_unique rows).
  const int32_t* wide_index = nullptr;
  int num_wide_rows = 0;
  // batch x dense_features, already transformed (log1p).
  const float* dense = nullptr;
  // batch labels in {0, 1}; unused by Predict().
  const float* labels = nullptr;
  // num_unique x embedding_dim (unused by lr), and the wide rows (dim 1).
  const float* embedding_rows = nullptr;
  const float* wide_rows = nullptr;
  // One pointer per DenseTensors() entry.
  std::vector<const float*> dense_params;
};

// A step's results, in host memory; vectors are resized by the model.
struct StepOutputs {
  float loss_sum = 0.0f;
  std::vector<float> probabilities;
  // num_unique x embedding_dim (empty for lr), and one per wide row.
  std::vector<float> embedding_grads;
  std::vector<float> wide_grads;
  // One per DenseTensors() entry.
  std::vector<std::vector<float>> dense_grads;
};

class CtrModel {
 public:
  CtrModel(const ModelConfig& config, Backend* backend);
  ~CtrModel();

  CtrModel(const CtrModel&) = delete;
  CtrModel& operator=(const CtrModel&) = delete;

  const ModelConfig& config() const { return config_; }

  // Forward and backward: fills every field of `outputs`.
  //
  // If `next` is given, its inputs are copied to the device while this
  // step's kernels run (on a GPU the copy overlaps the compute), and the next
  // call must pass those same inputs, unchanged, as `inputs`. `next` must
  // stay valid until then.
  //
  // On a backend that computes on host memory (the CPU) nothing is copied:
  // the kernels read the arrays of `inputs` (and of a staged `next`) in
  // place, so they must stay valid and unchanged until the call that uses
  // them returns.
  Status TrainStep(const StepInputs& inputs, StepOutputs* outputs,
                   const StepInputs* next = nullptr);

  // Forward only: click probabilities. Does not disturb a staged `next`.
  Status Predict(const StepInputs& inputs, std::vector<float>* probabilities);

 private:
  struct Buffer {
    float* data = nullptr;
    size_t capacity = 0;
  };

  // One input of a step: `data` is what the kernels read, either `storage`
  // (the copy on the device) or, on a backend that computes on host memory,
  // the caller's own array.
  struct Input {
    Buffer storage;
    const float* data = nullptr;
  };

  // A step's inputs on the device. Two sets, so that one can be filled while
  // the other is used.
  struct InputBuffers {
    Input index, wide_index, dense, labels, embedding_rows, wide_rows;
    std::vector<Input> params;
    bool staged = false;
  };

  Status Reserve(Buffer* buffer, size_t floats);
  // Points `input` at `host` (floats of it), copied to the device unless the
  // backend computes on host memory. `idle`: no queued kernel reads the
  // input's storage (Backend::CopyToIdleDevice()).
  Status Upload(Input* input, const void* host, size_t floats, bool idle);
  // Uploads a step's inputs into `set`; `idle` as for Upload().
  Status UploadInputs(const StepInputs& inputs, bool with_labels,
                      InputBuffers* set, bool idle);
  // The wide part's row count and index: the fields' unless the model has
  // crosses.
  int WideRows(const StepInputs& inputs) const;
  const int32_t* WideIndex(const InputBuffers& set) const;
  Status Forward(const StepInputs& inputs, const InputBuffers& set);
  Status Backward(const StepInputs& inputs, const InputBuffers& set);
  void Release(Buffer& buffer);
  bool deep() const { return config_.kind != ModelKind::kLogisticRegression; }
  int wide_slots() const { return config_.fields + config_.crosses; }
  // Positions in tensors_ (DenseTensors()): the wide dense weights come
  // first only when there are dense features.
  size_t BiasTensor() const { return config_.dense_features > 0 ? 1 : 0; }
  size_t LayerWeightsTensor(size_t layer) const {
    return BiasTensor() + 1 + 2 * layer;
  }
  size_t LayerBiasTensor(size_t layer) const {
    return BiasTensor() + 2 + 2 * layer;
  }
  int input_width() const {
    return config_.fields * config_.embedding_dim + config_.dense_features;
  }

  const ModelConfig config_;
  const std::vector<DenseTensorSpec> tensors_;
  Backend* const backend_;

  InputBuffers inputs_[2];
  // The set the next TrainStep() uses.
  int active_ = 0;
  std::vector<Buffer> param_grads_;
  // activations_[0] is the MLP input; activations_[l] the output of hidden
  // layer l; gradients_ mirror them.
  std::vector<Buffer> activations_, gradients_;
  Buffer logits_, probabilities_, dlogits_, loss_;
  Buffer embedding_grads_, wide_grads_;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_CTR_MODEL_H_
