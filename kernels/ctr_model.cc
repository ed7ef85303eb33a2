#include "kernels/ctr_model.h"

#include <algorithm>
#include <cmath>

namespace ps::kernels {
namespace {

struct NamedModel {
  const char* name;
  ModelKind kind;
};
constexpr NamedModel kModels[] = {
    {"lr", ModelKind::kLogisticRegression},
    {"wide_deep", ModelKind::kWideDeep},
    {"deepfm", ModelKind::kDeepFm},
};

}  // namespace

const char* ModelName(ModelKind kind) {
  for (const NamedModel& model : kModels) {
    if (model.kind == kind) return model.name;
  }
  return "unknown";
}

bool ModelKindFromName(const std::string& name, ModelKind* kind) {
  for (const NamedModel& model : kModels) {
    if (name == model.name) {
      *kind = model.kind;
      return true;
    }
  }
  return false;
}

std::vector<DenseTensorSpec> DenseTensors(const ModelConfig& config) {
  std::vector<DenseTensorSpec> tensors;
  if (config.dense_features > 0)
    tensors.push_back({"wide.dense_weights", config.dense_features, 1, 0.0f});
  tensors.push_back({"wide.bias", 1, 1, 0.0f});
  if (config.kind == ModelKind::kLogisticRegression) return tensors;
  int in = config.fields * config.embedding_dim + config.dense_features;
  std::vector<int> widths = config.hidden;
  widths.push_back(1);
  for (size_t l = 0; l < widths.size(); ++l) {
    const int out = widths[l];
    const float glorot = std::sqrt(6.0f / static_cast<float>(in + out));
    const std::string layer = "mlp." + std::to_string(l);
    tensors.push_back({layer + ".weights", in, out, glorot});
    tensors.push_back({layer + ".bias", 1, out, 0.0f});
    in = out;
  }
  return tensors;
}

CtrModel::CtrModel(const ModelConfig& config, Backend* backend)
    : config_(config), tensors_(DenseTensors(config)), backend_(backend) {
  for (InputBuffers& set : inputs_) set.params.resize(tensors_.size());
  param_grads_.resize(tensors_.size());
  const size_t layers = deep() ? config_.hidden.size() + 1 : 0;
  activations_.resize(layers);
  gradients_.resize(layers);
}

void CtrModel::Release(Buffer& buffer) {
  if (buffer.data != nullptr) backend_->Free(buffer.data);
  buffer.data = nullptr;
}

CtrModel::~CtrModel() {
  for (InputBuffers& set : inputs_) {
    for (Input* input : {&set.index, &set.wide_index, &set.dense, &set.labels,
                         &set.embedding_rows, &set.wide_rows}) {
      Release(input->storage);
    }
    for (Input& input : set.params) Release(input.storage);
  }
  for (Buffer* buffer : {&logits_, &probabilities_, &dlogits_, &loss_,
                         &embedding_grads_, &wide_grads_}) {
    Release(*buffer);
  }
  for (auto* group : {&param_grads_, &activations_, &gradients_}) {
    for (Buffer& buffer : *group) Release(buffer);
  }
}

Status CtrModel::Reserve(Buffer* buffer, size_t floats) {
  // At least one float, so that a layout without some kind of column (no
  // dense features, no fields) still has a buffer to point at.
  floats = std::max<size_t>(floats, 1);
  if (buffer->capacity >= floats && buffer->data != nullptr)
    return Status::Ok();
  if (buffer->data != nullptr) backend_->Free(buffer->data);
  buffer->data = nullptr;
  buffer->capacity = 0;
  void* pointer = nullptr;
  KERNELS_RETURN_IF_ERROR(backend_->Allocate(floats * sizeof(float), &pointer));
  buffer->data = static_cast<float*>(pointer);
  buffer->capacity = floats;
  return Status::Ok();
}

Status CtrModel::Upload(Input* input, const void* host, size_t floats,
                        bool idle) {
  if (backend_->ComputesOnHostMemory()) {
    input->data = static_cast<const float*>(host);
    return Status::Ok();
  }
  Buffer* storage = &input->storage;
  KERNELS_RETURN_IF_ERROR(Reserve(storage, floats));
  input->data = storage->data;
  return idle ? backend_->CopyToIdleDevice(storage->data, host,
                                           floats * sizeof(float))
              : backend_->CopyToDevice(storage->data, host,
                                       floats * sizeof(float));
}

Status CtrModel::UploadInputs(const StepInputs& in, bool with_labels,
                              InputBuffers* set, bool idle) {
  if (in.batch < 0 || in.num_unique < 0 ||
      in.dense_params.size() != tensors_.size()) {
    return Status(StatusCode::kInvalidArgument,
                  "step inputs do not match the model (batch, unique keys or "
                  "dense tensor count)");
  }
  if ((config_.crosses > 0) != (in.wide_index != nullptr)) {
    return Status(StatusCode::kInvalidArgument,
                  "step inputs have a wide index exactly when the model has "
                  "crosses");
  }
  const size_t batch = in.batch;
  static_assert(sizeof(int32_t) == sizeof(float), "index shares float buffers");
  KERNELS_RETURN_IF_ERROR(
      Upload(&set->index, in.index, batch * config_.fields, idle));
  if (config_.crosses > 0) {
    KERNELS_RETURN_IF_ERROR(
        Upload(&set->wide_index, in.wide_index, batch * wide_slots(), idle));
  }
  KERNELS_RETURN_IF_ERROR(
      Upload(&set->dense, in.dense, batch * config_.dense_features, idle));
  KERNELS_RETURN_IF_ERROR(
      Upload(&set->wide_rows, in.wide_rows, WideRows(in), idle));
  for (size_t t = 0; t < tensors_.size(); ++t) {
    KERNELS_RETURN_IF_ERROR(
        Upload(&set->params[t], in.dense_params[t], tensors_[t].size(), idle));
  }
  if (deep()) {
    KERNELS_RETURN_IF_ERROR(Upload(
        &set->embedding_rows, in.embedding_rows,
        static_cast<size_t>(in.num_unique) * config_.embedding_dim, idle));
  }
  if (with_labels)
    KERNELS_RETURN_IF_ERROR(Upload(&set->labels, in.labels, batch, idle));
  return Status::Ok();
}

int CtrModel::WideRows(const StepInputs& in) const {
  return config_.crosses > 0 ? in.num_wide_rows : in.num_unique;
}

const int32_t* CtrModel::WideIndex(const InputBuffers& set) const {
  return reinterpret_cast<const int32_t*>(
      config_.crosses > 0 ? set.wide_index.data : set.index.data);
}

Status CtrModel::Forward(const StepInputs& in, const InputBuffers& set) {
  const int batch = in.batch;
  const int fields = config_.fields;
  const int dim = config_.embedding_dim;
  const int32_t* index = reinterpret_cast<const int32_t*>(set.index.data);
  const std::vector<Input>& params = set.params;
  KERNELS_RETURN_IF_ERROR(Reserve(&logits_, batch));
  KERNELS_RETURN_IF_ERROR(backend_->Fill(logits_.data, batch, 0.0f));

  // Wide part: per-key weights, dense weights, bias.
  if (wide_slots() > 0) {
    KERNELS_RETURN_IF_ERROR(backend_->GatherSum(
        set.wide_rows.data, WideIndex(set), batch, wide_slots(), logits_.data));
  }
  if (config_.dense_features > 0) {
    KERNELS_RETURN_IF_ERROR(backend_->Gemm(
        false, false, batch, 1, config_.dense_features, 1.0f, set.dense.data,
        config_.dense_features, params[0].data, 1, 1.0f, logits_.data, 1));
  }
  KERNELS_RETURN_IF_ERROR(backend_->BiasActivation(
      logits_.data, params[BiasTensor()].data, batch, 1, false));
  if (!deep()) return Status::Ok();

  // Deep part: x0 = [embeddings | dense] -> hidden layers -> one logit.
  const int width = input_width();
  KERNELS_RETURN_IF_ERROR(
      Reserve(&activations_[0], static_cast<size_t>(batch) * width));
  float* x0 = activations_[0].data;
  if (fields > 0) {
    KERNELS_RETURN_IF_ERROR(backend_->GatherConcat(
        set.embedding_rows.data, index, batch, fields, dim, x0, width));
  }
  if (config_.dense_features > 0) {
    KERNELS_RETURN_IF_ERROR(backend_->CopyColumns(set.dense.data, batch,
                                                  config_.dense_features, x0,
                                                  width, fields * dim));
  }
  int in_width = width;
  for (size_t l = 0; l < config_.hidden.size(); ++l) {
    const int out_width = config_.hidden[l];
    KERNELS_RETURN_IF_ERROR(
        Reserve(&activations_[l + 1], static_cast<size_t>(batch) * out_width));
    KERNELS_RETURN_IF_ERROR(backend_->Gemm(
        false, false, batch, out_width, in_width, 1.0f, activations_[l].data,
        in_width, params[LayerWeightsTensor(l)].data, out_width, 0.0f,
        activations_[l + 1].data, out_width));
    KERNELS_RETURN_IF_ERROR(backend_->BiasActivation(
        activations_[l + 1].data, params[LayerBiasTensor(l)].data, batch,
        out_width, true));
    in_width = out_width;
  }
  const size_t last = config_.hidden.size();
  KERNELS_RETURN_IF_ERROR(backend_->Gemm(
      false, false, batch, 1, in_width, 1.0f, activations_[last].data, in_width,
      params[LayerWeightsTensor(last)].data, 1, 1.0f, logits_.data, 1));
  KERNELS_RETURN_IF_ERROR(backend_->BiasActivation(
      logits_.data, params[LayerBiasTensor(last)].data, batch, 1, false));
  if (config_.kind == ModelKind::kDeepFm && fields > 0) {
    KERNELS_RETURN_IF_ERROR(
        backend_->FmForward(x0, width, batch, fields, dim, logits_.data));
  }
  return Status::Ok();
}

Status CtrModel::Backward(const StepInputs& in, const InputBuffers& set) {
  const int batch = in.batch;
  const int fields = config_.fields;
  const int dim = config_.embedding_dim;
  const int32_t* index = reinterpret_cast<const int32_t*>(set.index.data);
  const std::vector<Input>& params = set.params;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    KERNELS_RETURN_IF_ERROR(Reserve(&param_grads_[t], tensors_[t].size()));
  }
  // Wide part.
  KERNELS_RETURN_IF_ERROR(Reserve(&wide_grads_, WideRows(in)));
  if (wide_slots() > 0 && WideRows(in) > 0) {
    KERNELS_RETURN_IF_ERROR(backend_->ScatterReduce(
        dlogits_.data, 1, 0, WideIndex(set), batch, wide_slots(), 1,
        WideRows(in), wide_grads_.data));
  }
  if (config_.dense_features > 0) {
    KERNELS_RETURN_IF_ERROR(
        backend_->Gemm(true, false, config_.dense_features, 1, batch, 1.0f,
                       set.dense.data, config_.dense_features, dlogits_.data, 1,
                       0.0f, param_grads_[0].data, 1));
  }
  KERNELS_RETURN_IF_ERROR(backend_->ColumnSums(
      dlogits_.data, batch, 1, param_grads_[BiasTensor()].data));
  if (!deep()) return Status::Ok();

  // Deep part, from the logit back to x0.
  const size_t layers = config_.hidden.size() + 1;
  const float* upstream = dlogits_.data;
  for (size_t l = layers; l-- > 0;) {
    const int in_width = l == 0 ? input_width() : config_.hidden[l - 1];
    const int out_width = l + 1 == layers ? 1 : config_.hidden[l];
    // dW = x_l^T * upstream; db = column sums of upstream.
    KERNELS_RETURN_IF_ERROR(backend_->Gemm(
        true, false, in_width, out_width, batch, 1.0f, activations_[l].data,
        in_width, upstream, out_width, 0.0f,
        param_grads_[LayerWeightsTensor(l)].data, out_width));
    KERNELS_RETURN_IF_ERROR(backend_->ColumnSums(
        upstream, batch, out_width, param_grads_[LayerBiasTensor(l)].data));
    // dx_l = upstream * W^T, masked by the ReLU that produced x_l. Of the
    // MLP's input only the embeddings' columns: the dense features need no
    // gradient, and their columns of dx_0 are left unwritten.
    KERNELS_RETURN_IF_ERROR(
        Reserve(&gradients_[l], static_cast<size_t>(batch) * in_width));
    const int dx_width =
        l == 0 ? config_.fields * config_.embedding_dim : in_width;
    if (dx_width == 0) break;  // no fields: nothing below needs a gradient
    KERNELS_RETURN_IF_ERROR(
        backend_->Gemm(false, true, batch, dx_width, out_width, 1.0f, upstream,
                       out_width, params[LayerWeightsTensor(l)].data, out_width,
                       0.0f, gradients_[l].data, in_width));
    if (l > 0) {
      KERNELS_RETURN_IF_ERROR(
          backend_->ReluBackward(activations_[l].data, gradients_[l].data,
                                 static_cast<size_t>(batch) * in_width));
    }
    upstream = gradients_[l].data;
  }
  KERNELS_RETURN_IF_ERROR(
      Reserve(&embedding_grads_, static_cast<size_t>(in.num_unique) * dim));
  if (fields == 0 || in.num_unique == 0) return Status::Ok();
  const int width = input_width();
  if (config_.kind == ModelKind::kDeepFm) {
    KERNELS_RETURN_IF_ERROR(
        backend_->FmBackward(activations_[0].data, dlogits_.data, width, batch,
                             fields, dim, gradients_[0].data));
  }
  return backend_->ScatterReduce(gradients_[0].data, width, dim, index, batch,
                                 fields, dim, in.num_unique,
                                 embedding_grads_.data);
}

Status CtrModel::TrainStep(const StepInputs& in, StepOutputs* out,
                           const StepInputs* next) {
  InputBuffers& set = inputs_[active_];
  if (!set.staged)
    KERNELS_RETURN_IF_ERROR(
        UploadInputs(in, /*with_labels=*/true, &set, /*idle=*/false));
  set.staged = false;
  KERNELS_RETURN_IF_ERROR(Forward(in, set));
  const int batch = in.batch;
  KERNELS_RETURN_IF_ERROR(Reserve(&probabilities_, batch));
  KERNELS_RETURN_IF_ERROR(Reserve(&dlogits_, batch));
  KERNELS_RETURN_IF_ERROR(Reserve(&loss_, 1));
  KERNELS_RETURN_IF_ERROR(backend_->SigmoidCrossEntropy(
      logits_.data, set.labels.data, /*scale=*/nullptr, batch,
      probabilities_.data, dlogits_.data, loss_.data));
  KERNELS_RETURN_IF_ERROR(Backward(in, set));
  if (next != nullptr) {
    // The other set was last read by the step before this one, which its
    // copy of the outputs to the host waited out: the upload need not wait
    // for this step's kernels, and runs while they do; the next step's
    // kernels wait for it.
    InputBuffers& other = inputs_[1 - active_];
    KERNELS_RETURN_IF_ERROR(
        UploadInputs(*next, /*with_labels=*/true, &other, /*idle=*/true));
    other.staged = true;
    active_ = 1 - active_;
  }

  out->probabilities.resize(batch);
  KERNELS_RETURN_IF_ERROR(backend_->CopyToHost(
      out->probabilities.data(), probabilities_.data, batch * sizeof(float)));
  KERNELS_RETURN_IF_ERROR(
      backend_->CopyToHost(&out->loss_sum, loss_.data, sizeof(float)));
  out->wide_grads.resize(WideRows(in));
  KERNELS_RETURN_IF_ERROR(
      backend_->CopyToHost(out->wide_grads.data(), wide_grads_.data,
                           out->wide_grads.size() * sizeof(float)));
  if (deep()) {
    out->embedding_grads.resize(static_cast<size_t>(in.num_unique) *
                                config_.embedding_dim);
    KERNELS_RETURN_IF_ERROR(
        backend_->CopyToHost(out->embedding_grads.data(), embedding_grads_.data,
                             out->embedding_grads.size() * sizeof(float)));
  } else {
    out->embedding_grads.clear();
  }
  out->dense_grads.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    out->dense_grads[t].resize(tensors_[t].size());
    KERNELS_RETURN_IF_ERROR(
        backend_->CopyToHost(out->dense_grads[t].data(), param_grads_[t].data,
                             tensors_[t].size() * sizeof(float)));
  }
  return Status::Ok();
}

Status CtrModel::Predict(const StepInputs& in,
                         std::vector<float>* probabilities) {
  // Use the set that holds no staged inputs.
  InputBuffers& set = inputs_[inputs_[active_].staged ? 1 - active_ : active_];
  KERNELS_RETURN_IF_ERROR(
      UploadInputs(in, /*with_labels=*/false, &set, /*idle=*/false));
  KERNELS_RETURN_IF_ERROR(Forward(in, set));
  std::vector<float> logits(in.batch);
  KERNELS_RETURN_IF_ERROR(backend_->CopyToHost(logits.data(), logits_.data,
                                               in.batch * sizeof(float)));
  probabilities->resize(in.batch);
  for (int b = 0; b < in.batch; ++b) {
    (*probabilities)[b] = 1.0f / (1.0f + std::exp(-logits[b]));
  }
  return Status::Ok();
}

}  // namespace ps::kernels
