// The CUDA backend. Each kernel is a plain grid-stride loop or a per-row
// block; GEMMs go to cuBLAS with the row-major trick (C^T = B^T A^T in
// column-major terms).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_backend_library.h"

// Returns a kernels::Status naming the failed call, its file and line.
#define KERNELS_CUDA_RETURN_IF_ERROR(expr)                  \
  do {                                                      \
    cudaError_t kernels_cuda_error_ = (expr);               \
    if (kernels_cuda_error_ != cudaSuccess) {               \
      return ::ps::kernels::Status(                         \
          kernels_cuda_error_ == cudaErrorMemoryAllocation  \
              ? ::ps::kernels::StatusCode::kOutOfMemory     \
              : ::ps::kernels::StatusCode::kCudaError,      \
          std::string(#expr) + " failed at " __FILE__ ":" + \
              std::to_string(__LINE__) + ": " +             \
              cudaGetErrorString(kernels_cuda_error_));     \
    }                                                       \
  } while (false)

#define KERNELS_CUBLAS_RETURN_IF_ERROR(expr)                  \
  do {                                                        \
    cublasStatus_t kernels_cublas_status_ = (expr);           \
    if (kernels_cublas_status_ != CUBLAS_STATUS_SUCCESS) {    \
      return ::ps::kernels::Status(                           \
          ::ps::kernels::StatusCode::kCublasError,            \
          std::string(#expr) + " failed at " __FILE__ ":" +   \
              std::to_string(__LINE__) + ": " +               \
              cublasGetStatusString(kernels_cublas_status_)); \
    }                                                         \
  } while (false)

// After a launch: the launch's own error, if any.
#define KERNELS_CUDA_CHECK_LAUNCH() \
  KERNELS_CUDA_RETURN_IF_ERROR(cudaGetLastError())

namespace ps::kernels {
namespace {

constexpr int kThreads = 256;

int Blocks(size_t work) {
  return static_cast<int>(
      std::min<size_t>((work + kThreads - 1) / kThreads, 65535 * 8));
}

__global__ void FillKernel(float* x, size_t count, float value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    x[i] = value;
  }
}

__global__ void ScaleMatrixKernel(float* c, int rows, int cols, int ldc,
                                  float beta) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    float& value = c[(i / cols) * ldc + i % cols];
    value = beta == 0.0f ? 0.0f : beta * value;
  }
}

__global__ void BiasActivationKernel(float* x, const float* bias, int rows,
                                     int cols, bool relu) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const float value = x[i] + bias[i % cols];
    x[i] = relu && value < 0.0f ? 0.0f : value;
  }
}

__global__ void ReluBackwardKernel(const float* y, float* dy, size_t count) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    if (y[i] <= 0.0f) dy[i] = 0.0f;
  }
}

// One block per column: threads stride over rows, then reduce in shared memory.
__global__ void ColumnSumsKernel(const float* x, int rows, int cols,
                                 float* sums) {
  __shared__ float partial[kThreads];
  const int column = blockIdx.x;
  float sum = 0.0f;
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    sum += x[static_cast<size_t>(r) * cols + column];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[column] = partial[0];
}

__global__ void CopyColumnsKernel(const float* src, int rows, int src_cols,
                                  float* dst, int dst_cols, int dst_offset) {
  const size_t total = static_cast<size_t>(rows) * src_cols;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t r = i / src_cols, c = i % src_cols;
    dst[r * dst_cols + dst_offset + c] = src[i];
  }
}

__global__ void GatherConcatKernel(const float* rows, const int32_t* index,
                                   int batch, int fields, int dim, float* out,
                                   int out_cols) {
  const size_t total = static_cast<size_t>(batch) * fields * dim;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t d = i % dim;
    const size_t bf = i / dim;  // b * fields + f
    const size_t b = bf / fields, f = bf % fields;
    out[b * out_cols + f * dim + d] =
        rows[static_cast<size_t>(index[bf]) * dim + d];
  }
}

__global__ void GatherSumKernel(const float* rows, const int32_t* index,
                                int batch, int fields, float* out) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < batch;
       b += blockDim.x * gridDim.x) {
    float sum = 0.0f;
    for (int f = 0; f < fields; ++f) sum += rows[index[b * fields + f]];
    out[b] += sum;
  }
}

// Scatter-add by unique key; duplicate keys meet in atomicAdd.
__global__ void ScatterAddKernel(const float* in, int in_cols, int field_stride,
                                 const int32_t* index, int batch, int fields,
                                 int dim, float* row_grads) {
  const size_t total = static_cast<size_t>(batch) * fields * dim;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t d = i % dim;
    const size_t bf = i / dim;
    const size_t b = bf / fields, f = bf % fields;
    atomicAdd(&row_grads[static_cast<size_t>(index[bf]) * dim + d],
              in[b * in_cols + f * field_stride + d]);
  }
}

__global__ void AddKernel(const float* x, float* y, size_t count) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    y[i] += x[i];
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* c,
                               size_t count, bool accumulate) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const float product = a[i] * b[i];
    c[i] = accumulate ? c[i] + product : product;
  }
}

__global__ void AccumulateColumnsKernel(const float* src, int rows,
                                        int src_cols, int src_offset,
                                        float* dst, int dst_cols) {
  const size_t total = static_cast<size_t>(rows) * dst_cols;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t r = i / dst_cols, c = i % dst_cols;
    dst[i] += src[r * src_cols + src_offset + c];
  }
}

// The position of the pair (i, j), j <= i, in the lower triangle.
__device__ int PairIndex(int i, int j, bool self_interaction) {
  return self_interaction ? i * (i + 1) / 2 + j : i * (i - 1) / 2 + j;
}

// One thread per (example, i, j) of the whole square; those above the
// triangle return at once.
__global__ void DotInteractionKernel(const float* x, int batch, int rows,
                                     int dim, bool self_interaction, int width,
                                     float* out) {
  const size_t total = static_cast<size_t>(batch) * rows * rows;
  for (size_t t = blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const int j = static_cast<int>(t % rows);
    const int i = static_cast<int>((t / rows) % rows);
    const size_t b = t / (static_cast<size_t>(rows) * rows);
    if (j > i || (j == i && !self_interaction)) continue;
    const float* v = x + b * rows * dim;
    float dot = 0.0f;
    for (int d = 0; d < dim; ++d) dot += v[i * dim + d] * v[j * dim + d];
    out[b * width + PairIndex(i, j, self_interaction)] = dot;
  }
}

// One thread per row: a gate's few columns.
__global__ void SoftmaxKernel(const float* x, int rows, int cols, float* y) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows;
       r += blockDim.x * gridDim.x) {
    const float* in = x + static_cast<size_t>(r) * cols;
    float* out = y + static_cast<size_t>(r) * cols;
    float largest = in[0];
    for (int c = 1; c < cols; ++c) largest = fmaxf(largest, in[c]);
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) {
      out[c] = expf(in[c] - largest);
      sum += out[c];
    }
    for (int c = 0; c < cols; ++c) out[c] /= sum;
  }
}

__global__ void SoftmaxBackwardKernel(const float* y, const float* dy, int rows,
                                      int cols, float* dx) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows;
       r += blockDim.x * gridDim.x) {
    const size_t row = static_cast<size_t>(r) * cols;
    float dot = 0.0f;
    for (int c = 0; c < cols; ++c) dot += y[row + c] * dy[row + c];
    for (int c = 0; c < cols; ++c)
      dx[row + c] = y[row + c] * (dy[row + c] - dot);
  }
}

// One thread per (example, row i, column d): the sum over i's pairs.
__global__ void DotInteractionBackwardKernel(const float* x, const float* dout,
                                             int batch, int rows, int dim,
                                             bool self_interaction, int width,
                                             float* dx) {
  const size_t total = static_cast<size_t>(batch) * rows * dim;
  for (size_t t = blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const int d = static_cast<int>(t % dim);
    const int i = static_cast<int>((t / dim) % rows);
    const size_t b = t / (static_cast<size_t>(rows) * dim);
    const float* v = x + b * rows * dim;
    const float* pairs = dout + b * width;
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j) {
      if (j == i) {
        if (self_interaction)
          sum += 2.0f * pairs[PairIndex(i, i, true)] * v[i * dim + d];
        continue;
      }
      const int p = j < i ? PairIndex(i, j, self_interaction)
                          : PairIndex(j, i, self_interaction);
      sum += pairs[p] * v[j * dim + d];
    }
    dx[b * rows * dim + i * dim + d] += sum;
  }
}

// One thread per (example, embedding column).
__global__ void FmForwardKernel(const float* x, int x_cols, int batch,
                                int fields, int dim, float* logits) {
  const size_t total = static_cast<size_t>(batch) * dim;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t b = i / dim, d = i % dim;
    const float* v = x + b * x_cols;
    float sum = 0.0f, sum_squares = 0.0f;
    for (int f = 0; f < fields; ++f) {
      const float value = v[f * dim + d];
      sum += value;
      sum_squares += value * value;
    }
    atomicAdd(&logits[b], 0.5f * (sum * sum - sum_squares));
  }
}

__global__ void FmBackwardKernel(const float* x, const float* dlogits,
                                 int x_cols, int batch, int fields, int dim,
                                 float* dx) {
  const size_t total = static_cast<size_t>(batch) * dim;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(blockDim.x) * gridDim.x) {
    const size_t b = i / dim, d = i % dim;
    const float* v = x + b * x_cols;
    float sum = 0.0f;
    for (int f = 0; f < fields; ++f) sum += v[f * dim + d];
    for (int f = 0; f < fields; ++f) {
      dx[b * x_cols + f * dim + d] += dlogits[b] * (sum - v[f * dim + d]);
    }
  }
}

__global__ void SigmoidCrossEntropyKernel(const float* logits,
                                          const float* labels,
                                          const float* scale, int batch,
                                          float* probabilities, float* dlogits,
                                          float* loss_sum) {
  __shared__ float partial[kThreads];
  float loss = 0.0f;
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < batch;
       b += blockDim.x * gridDim.x) {
    const float z = logits[b];
    const float p = 1.0f / (1.0f + expf(-z));
    const float factor = scale == nullptr ? 1.0f : scale[b];
    probabilities[b] = p;
    dlogits[b] = factor * (p - labels[b]) / static_cast<float>(batch);
    loss += factor * (fmaxf(z, 0.0f) - z * labels[b] + log1pf(expf(-fabsf(z))));
  }
  partial[threadIdx.x] = loss;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(loss_sum, partial[0]);
}

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
    if (uploaded_ != nullptr) cudaEventDestroy(uploaded_);
    if (computed_ != nullptr) cudaEventDestroy(computed_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (staging_ != nullptr) cudaFreeHost(staging_);
  }

  Status Init(const CudaOptions& options) {
    options_ = options;
    KERNELS_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
    KERNELS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle_));
    KERNELS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle_, stream_));
    if (options.precision == GemmPrecision::kTf32) {
      KERNELS_CUBLAS_RETURN_IF_ERROR(
          cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH));
    }
    return Status::Ok();
  }

  const char* name() const override { return "cuda"; }

  Status Allocate(size_t bytes, void** pointer) override {
    KERNELS_CUDA_RETURN_IF_ERROR(cudaMalloc(pointer, bytes == 0 ? 64 : bytes));
    return Status::Ok();
  }
  void Free(void* pointer) override { cudaFree(pointer); }

  // Stages `bytes` in pinned memory and copies on the copy stream once the
  // compute work queued so far is done (a kernel may still read `device`),
  // then makes the compute stream wait for the copy. The host returns at
  // once unless the previous upload still holds the staging buffer.
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    return Upload(device, host, bytes, /*after_queued_work=*/true);
  }

  // The same without waiting for the compute stream: the copy overlaps the
  // kernels in flight (the next step's inputs, staged during this step).
  Status CopyToIdleDevice(void* device, const void* host,
                          size_t bytes) override {
    return Upload(device, host, bytes, /*after_queued_work=*/false);
  }

  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
    KERNELS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status Fill(float* x, size_t count, float value) override {
    if (count == 0) return Status::Ok();
    FillKernel<<<Blocks(count), kThreads, 0, stream_>>>(x, count, value);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status Synchronize() override {
    KERNELS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) override {
    if (m == 0 || n == 0) return Status::Ok();
    if (k == 0) {
      // An empty product: C = beta * C, as in the CPU backend.
      const size_t total = static_cast<size_t>(m) * n;
      ScaleMatrixKernel<<<Blocks(total), kThreads, 0, stream_>>>(c, m, n, ldc,
                                                                 beta);
      KERNELS_CUDA_CHECK_LAUNCH();
      return Status::Ok();
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (options_.precision == GemmPrecision::kTf32) {
      KERNELS_CUBLAS_RETURN_IF_ERROR(
          cublasGemmEx(handle_, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb,
                       a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                       CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    } else {
      KERNELS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
          handle_, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    }
    return Status::Ok();
  }

  Status BiasActivation(float* x, const float* bias, int rows, int cols,
                        bool relu) override {
    const size_t total = static_cast<size_t>(rows) * cols;
    if (total == 0) return Status::Ok();
    BiasActivationKernel<<<Blocks(total), kThreads, 0, stream_>>>(x, bias, rows,
                                                                  cols, relu);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status ReluBackward(const float* y, float* dy, size_t count) override {
    if (count == 0) return Status::Ok();
    ReluBackwardKernel<<<Blocks(count), kThreads, 0, stream_>>>(y, dy, count);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status ColumnSums(const float* x, int rows, int cols, float* sums) override {
    if (cols == 0) return Status::Ok();
    ColumnSumsKernel<<<cols, kThreads, 0, stream_>>>(x, rows, cols, sums);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status CopyColumns(const float* src, int rows, int src_cols, float* dst,
                     int dst_cols, int dst_offset) override {
    const size_t total = static_cast<size_t>(rows) * src_cols;
    if (total == 0) return Status::Ok();
    CopyColumnsKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        src, rows, src_cols, dst, dst_cols, dst_offset);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status GatherConcat(const float* rows, const int32_t* index, int batch,
                      int fields, int dim, float* out, int out_cols) override {
    const size_t total = static_cast<size_t>(batch) * fields * dim;
    if (total == 0) return Status::Ok();
    GatherConcatKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        rows, index, batch, fields, dim, out, out_cols);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status GatherSum(const float* rows, const int32_t* index, int batch,
                   int fields, float* out) override {
    if (batch == 0) return Status::Ok();
    GatherSumKernel<<<Blocks(batch), kThreads, 0, stream_>>>(rows, index, batch,
                                                             fields, out);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status ScatterReduce(const float* in, int in_cols, int field_stride,
                       const int32_t* index, int batch, int fields, int dim,
                       int num_rows, float* row_grads) override {
    KERNELS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        row_grads, 0, static_cast<size_t>(num_rows) * dim * sizeof(float),
        stream_));
    return ScatterAdd(in, in_cols, field_stride, index, batch, fields, dim,
                      row_grads);
  }

  Status ScatterAdd(const float* in, int in_cols, int field_stride,
                    const int32_t* index, int batch, int fields, int dim,
                    float* row_grads) override {
    const size_t total = static_cast<size_t>(batch) * fields * dim;
    if (total == 0) return Status::Ok();
    ScatterAddKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        in, in_cols, field_stride, index, batch, fields, dim, row_grads);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status Add(const float* x, float* y, size_t count) override {
    if (count == 0) return Status::Ok();
    AddKernel<<<Blocks(count), kThreads, 0, stream_>>>(x, y, count);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status Multiply(const float* a, const float* b, float* c, size_t count,
                  bool accumulate) override {
    if (count == 0) return Status::Ok();
    MultiplyKernel<<<Blocks(count), kThreads, 0, stream_>>>(a, b, c, count,
                                                            accumulate);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status AccumulateColumns(const float* src, int rows, int src_cols,
                           int src_offset, float* dst, int dst_cols) override {
    const size_t total = static_cast<size_t>(rows) * dst_cols;
    if (total == 0) return Status::Ok();
    AccumulateColumnsKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        src, rows, src_cols, src_offset, dst, dst_cols);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status Softmax(const float* x, int rows, int cols, float* y) override {
    if (rows == 0 || cols == 0) return Status::Ok();
    SoftmaxKernel<<<Blocks(rows), kThreads, 0, stream_>>>(x, rows, cols, y);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status SoftmaxBackward(const float* y, const float* dy, int rows, int cols,
                         float* dx) override {
    if (rows == 0 || cols == 0) return Status::Ok();
    SoftmaxBackwardKernel<<<Blocks(rows), kThreads, 0, stream_>>>(y, dy, rows,
                                                                  cols, dx);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status DotInteraction(const float* x, int batch, int rows, int dim,
                        bool self_interaction, float* out) override {
    const size_t total = static_cast<size_t>(batch) * rows * rows;
    if (total == 0) return Status::Ok();
    DotInteractionKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        x, batch, rows, dim, self_interaction,
        DotInteractionWidth(rows, self_interaction), out);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status DotInteractionBackward(const float* x, const float* dout, int batch,
                                int rows, int dim, bool self_interaction,
                                float* dx) override {
    const size_t total = static_cast<size_t>(batch) * rows * dim;
    if (total == 0) return Status::Ok();
    DotInteractionBackwardKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        x, dout, batch, rows, dim, self_interaction,
        DotInteractionWidth(rows, self_interaction), dx);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status FmForward(const float* x, int x_cols, int batch, int fields, int dim,
                   float* logits) override {
    const size_t total = static_cast<size_t>(batch) * dim;
    if (total == 0) return Status::Ok();
    FmForwardKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        x, x_cols, batch, fields, dim, logits);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status FmBackward(const float* x, const float* dlogits, int x_cols, int batch,
                    int fields, int dim, float* dx) override {
    const size_t total = static_cast<size_t>(batch) * dim;
    if (total == 0) return Status::Ok();
    FmBackwardKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        x, dlogits, x_cols, batch, fields, dim, dx);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

  Status SigmoidCrossEntropy(const float* logits, const float* labels,
                             const float* scale, int batch,
                             float* probabilities, float* dlogits,
                             float* loss_sum) override {
    KERNELS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(loss_sum, 0, sizeof(float), stream_));
    if (batch == 0) return Status::Ok();
    SigmoidCrossEntropyKernel<<<std::min(Blocks(batch), 1024), kThreads, 0,
                                stream_>>>(logits, labels, scale, batch,
                                           probabilities, dlogits, loss_sum);
    KERNELS_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  }

 private:
  Status Upload(void* device, const void* host, size_t bytes,
                bool after_queued_work) {
    if (bytes == 0) return Status::Ok();
    // The staging buffer may be reused only after the previous upload left it.
    KERNELS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(uploaded_));
    if (bytes > staging_bytes_) {
      if (staging_ != nullptr)
        KERNELS_CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_));
      staging_ = nullptr;
      KERNELS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, bytes * 2));
      staging_bytes_ = bytes * 2;
    }
    std::memcpy(staging_, host, bytes);
    if (after_queued_work) {
      // Kernels queued before this copy may still read `device`: the copy
      // waits for them (a write-after-read hazard otherwise).
      KERNELS_CUDA_RETURN_IF_ERROR(cudaEventRecord(computed_, stream_));
      KERNELS_CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(copy_stream_, computed_, 0));
    }
    KERNELS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        device, staging_, bytes, cudaMemcpyHostToDevice, copy_stream_));
    KERNELS_CUDA_RETURN_IF_ERROR(cudaEventRecord(uploaded_, copy_stream_));
    KERNELS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, uploaded_, 0));
    return Status::Ok();
  }

  CudaOptions options_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t uploaded_ = nullptr;
  // Recorded on the compute stream before each upload (see CopyToDevice).
  cudaEvent_t computed_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

Status DeviceCount(int* count) {
  *count = 0;
  const cudaError_t error = cudaGetDeviceCount(count);
  if (error == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear the sticky error
  *count = 0;
  // No GPU, or no driver at all: nothing to use, nothing wrong.
  if (error == cudaErrorNoDevice) return Status::Ok();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (driver == 0) return Status::Ok();
  return Status(StatusCode::kUnavailable,
                std::string("a GPU driver is there but CUDA cannot use it (") +
                    cudaGetErrorString(error) + "; driver supports CUDA " +
                    std::to_string(driver) + ", this build's runtime is " +
                    std::to_string(runtime) + ")");
}

Status CreateBackend(const CudaOptions& options,
                     std::unique_ptr<Backend>* backend) {
  if (options.precision == GemmPrecision::kBf16) {
    return Status(StatusCode::kInvalidArgument,
                  "bfloat16 GEMMs are the CPU backend's; on CUDA use FP32 or "
                  "TF32");
  }
  int devices = 0;
  KERNELS_RETURN_IF_ERROR(DeviceCount(&devices));
  if (devices == 0) {
    return Status(StatusCode::kUnavailable,
                  "no CUDA GPU is visible to this process");
  }
  if (options.device < 0 || options.device >= devices) {
    return Status(StatusCode::kInvalidArgument,
                  "GPU " + std::to_string(options.device) +
                      " does not exist (" + std::to_string(devices) +
                      " visible)");
  }
  auto cuda = std::make_unique<CudaBackend>();
  KERNELS_RETURN_IF_ERROR(cuda->Init(options));
  *backend = std::move(cuda);
  return Status::Ok();
}

}  // namespace
}  // namespace ps::kernels

extern "C" __attribute__((visibility("default")))
const ps::kernels::CudaBackendEntryPoints*
PsKernelsCudaBackendEntryPoints() {
  static const ps::kernels::CudaBackendEntryPoints entry_points = {
      ps::kernels::kCudaBackendAbiVersion, &ps::kernels::DeviceCount,
      &ps::kernels::CreateBackend};
  return &entry_points;
}
