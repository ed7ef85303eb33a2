// File: kernels/backend.h
//
// The math of a CTR training step behind one interface with two backends:
// CPU (oneDNN's GEMMs, plain loops) and CUDA (own kernels + cuBLAS). All
// matrices are row-major float32; every pointer passed to a kernel lives in the
// backend's memory (host memory for the CPU, device memory for CUDA) and comes
// from Allocate(), or, on a backend that ComputesOnHostMemory(), is any host
// array. Kernels may run asynchronously; Synchronize() waits for
// them, and CopyToHost() returns only when the data is on the host.
//
// A backend instance is used by one thread at a time.

#ifndef PS_KERNELS_BACKEND_H_
#define PS_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/status.h"

namespace ps::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda".
  virtual const char* name() const = 0;

  // Whether kernels run on host memory (the CPU), so that they can read the
  // caller's host arrays in place instead of copies. Default: false.
  virtual bool ComputesOnHostMemory() const { return false; }

  // --- memory -------------------------------------------------------------
  virtual Status Allocate(size_t bytes, void** pointer) = 0;
  virtual void Free(void* pointer) = 0;
  virtual Status CopyToDevice(void* device, const void* host, size_t bytes) = 0;
  // CopyToDevice() into memory no queued work reads, as the caller knows:
  // a GPU need not order it after the kernels in flight, so it overlaps
  // them. Default: CopyToDevice().
  virtual Status CopyToIdleDevice(void* device, const void* host,
                                  size_t bytes) {
    return CopyToDevice(device, host, bytes);
  }
  virtual Status CopyToHost(void* host, const void* device, size_t bytes) = 0;
  virtual Status Fill(float* x, size_t count, float value) = 0;
  virtual Status Synchronize() = 0;

  // --- dense algebra --------------------------------------------------------
  // C (m x n, leading dim ldc) = alpha * op(A) * op(B) + beta * C, where
  // op(A) is m x k and op(B) is k x n; lda/ldb are the stored row lengths.
  virtual Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) = 0;

  // A promise that the `count` floats at `data` stay allocated and unchanged
  // until ForgetStableInputs(): a backend that rounds GEMM inputs (kBf16)
  // may then round a matrix lying within them once and reuse the copy in
  // every later Gemm() that reads the same matrix (a training step reads
  // its activations, weights and gradients twice each). Default: ignored.
  virtual void DeclareStableInput(const float* /*data*/, size_t /*count*/) {}
  // Ends every DeclareStableInput() promise; the kept copies are dropped.
  virtual void ForgetStableInputs() {}

  // x (rows x cols) += bias (per column); then ReLU in place if `relu`.
  virtual Status BiasActivation(float* x, const float* bias, int rows, int cols,
                                bool relu) = 0;

  // dy[i] = 0 where y[i] <= 0 (y is a ReLU output).
  virtual Status ReluBackward(const float* y, float* dy, size_t count) = 0;

  // sums[c] = sum over rows of x[r, c].
  virtual Status ColumnSums(const float* x, int rows, int cols,
                            float* sums) = 0;

  // dst[r, dst_offset + c] = src[r, c] for c < src_cols.
  virtual Status CopyColumns(const float* src, int rows, int src_cols,
                             float* dst, int dst_cols, int dst_offset) = 0;

  // --- embeddings -----------------------------------------------------------
  // Gather and concat: out[b, f * dim + d] = rows[index[b * fields + f], d]
  // for each example b and field f; `out` has out_cols columns.
  virtual Status GatherConcat(const float* rows, const int32_t* index,
                              int batch, int fields, int dim, float* out,
                              int out_cols) = 0;

  // out[b] += sum over f of rows[index[b * fields + f]] (rows of dim 1).
  virtual Status GatherSum(const float* rows, const int32_t* index, int batch,
                           int fields, float* out) = 0;

  // Scatter-reduce by unique key: row_grads (num_rows x dim) is zeroed, then
  // row_grads[index[b * fields + f], d] += in[b * in_cols + f * field_stride +
  // d]. field_stride is dim for concatenated input, 0 to broadcast one value
  // per example (dim 1) to every field.
  virtual Status ScatterReduce(const float* in, int in_cols, int field_stride,
                               const int32_t* index, int batch, int fields,
                               int dim, int num_rows, float* row_grads) = 0;

  // --- factorization machine -----------------------------------------------
  // logits[b] += 0.5 * sum_d ((sum_f v[b,f,d])^2 - sum_f v[b,f,d]^2), where
  // v[b,f,d] = x[b * x_cols + f * dim + d].
  virtual Status FmForward(const float* x, int x_cols, int batch, int fields,
                           int dim, float* logits) = 0;

  // dx[b, f * dim + d] += dlogits[b] * (sum_f' v[b,f',d] - v[b,f,d]).
  virtual Status FmBackward(const float* x, const float* dlogits, int x_cols,
                            int batch, int fields, int dim, float* dx) = 0;

  // --- elementwise (a model graph's layers) ---------------------------------
  // y[i] += x[i].
  virtual Status Add(const float* x, float* y, size_t count) = 0;

  // c[i] = a[i] * b[i], or c[i] += a[i] * b[i] when `accumulate`.
  virtual Status Multiply(const float* a, const float* b, float* c,
                          size_t count, bool accumulate) = 0;

  // dst[r, c] += src[r, src_offset + c] for c < dst_cols (dst is rows x
  // dst_cols): a concatenation's backward.
  virtual Status AccumulateColumns(const float* src, int rows, int src_cols,
                                   int src_offset, float* dst,
                                   int dst_cols) = 0;

  // ScatterReduce() without zeroing row_grads first: adds to it.
  virtual Status ScatterAdd(const float* in, int in_cols, int field_stride,
                            const int32_t* index, int batch, int fields,
                            int dim, float* row_grads) = 0;

  // --- softmax (MMoE's gates) -----------------------------------------------
  // y[r, :] = softmax(x[r, :]) per row of `cols` (max-subtracted, so stable
  // for large inputs). x and y may be the same array.
  virtual Status Softmax(const float* x, int rows, int cols, float* y) = 0;

  // dx[r, c] = y[r, c] * (dy[r, c] - sum over k of y[r, k] * dy[r, k]): the
  // gradient through Softmax() (y its output), written, not added.
  virtual Status SoftmaxBackward(const float* y, const float* dy, int rows,
                                 int cols, float* dx) = 0;

  // --- dot interaction (DLRM) -----------------------------------------------
  // For each example b, with v_i = x[b, i * dim .. (i + 1) * dim) for the
  // `rows` rows i: out[b, p] = v_i . v_j for the pairs j < i (j <= i with
  // self_interaction) in row-major order of the lower triangle, p = 0, 1,
  // ... (DotInteractionWidth() of them). x is batch x rows * dim, packed.
  virtual Status DotInteraction(const float* x, int batch, int rows, int dim,
                                bool self_interaction, float* out) = 0;

  // dx[b, i * dim + d] += sum over the pairs p of (i, j) of dout[b, p] *
  // v_j[d] (twice v_i[d] for the pair (i, i)).
  virtual Status DotInteractionBackward(const float* x, const float* dout,
                                        int batch, int rows, int dim,
                                        bool self_interaction, float* dx) = 0;

  // --- loss -----------------------------------------------------------------
  // probabilities = sigmoid(logits); dlogits = scale * (p - label) / batch
  // (the gradient of the mean of the scaled losses); *loss_sum (one float in
  // backend memory) = sum of scale * binary cross-entropy over the batch.
  // `scale`: batch per-example factors (a weighted or masked loss), or null
  // for 1. Stable for large |logit|.
  virtual Status SigmoidCrossEntropy(const float* logits, const float* labels,
                                     const float* scale, int batch,
                                     float* probabilities, float* dlogits,
                                     float* loss_sum) = 0;
};

// The pairs DotInteraction() gives `rows` rows: rows (rows - 1) / 2, or
// rows (rows + 1) / 2 with self-interaction.
inline int DotInteractionWidth(int rows, bool self_interaction) {
  return self_interaction ? rows * (rows + 1) / 2 : rows * (rows - 1) / 2;
}

// How the MLP's GEMMs round their inputs. Every backend accumulates in FP32.
enum class GemmPrecision {
  // Plain FP32 (the default; the CPU and CUDA backends agree to ~1e-5).
  kFp32,
  // TF32 tensor cores through cublasGemmEx (CUDA only): faster, ~1e-3
  // relative error.
  kTf32,
  // Inputs rounded to bfloat16 (CPU only, on CPUs with AVX512_BF16): about
  // twice FP32's GEMM speed, ~4e-3 relative error per input. GEMMs with a
  // dimension under 16 (the logit, the wide part's dense weights) stay FP32:
  // they cost nothing and feed the loss directly.
  kBf16,
};

struct CpuOptions {
  // Threads each large GEMM uses: the calling thread and threads - 1 of the
  // backend's own, which share its blocks (kernels/gemm_team.h). Default 1:
  // a worker's pipeline threads and the shards beside it need the other cores.
  int threads = 1;
  GemmPrecision precision = GemmPrecision::kFp32;
};

// The CPU backend with default options. Never fails to create.
std::unique_ptr<Backend> NewCpuBackend();

// The CPU backend with `options`: kInvalidArgument for threads < 1 or TF32,
// kUnavailable for kBf16 on a CPU without AVX512_BF16 (it would be slower
// than FP32 there, not faster).
Status NewCpuBackend(const CpuOptions& options,
                     std::unique_ptr<Backend>* backend);

// Whether this CPU multiplies bfloat16 natively (AVX512_BF16).
bool CpuHasBf16Gemm();

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_H_
