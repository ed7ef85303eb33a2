// The CPU backend: OpenBLAS for GEMM, plain loops for the rest. Built with
// -DPS_KERNELS_NO_BLAS (only by kernels/gpu_check.sh, on the GPU machine,
// which has no BLAS headers) GEMM is a plain loop: slow, but a fine reference.

#ifndef PS_KERNELS_NO_BLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/backend.h"

namespace ps::kernels {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  Status Allocate(size_t bytes, void** pointer) override {
    // 64-byte alignment for vector loads; at least one byte so that an empty
    // buffer is still a distinct pointer.
    const size_t rounded = ((bytes + 63) / 64) * 64;
    *pointer = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (*pointer == nullptr) {
      return Status(StatusCode::kOutOfMemory, "cannot allocate host buffer");
    }
    return Status::Ok();
  }
  void Free(void* pointer) override { std::free(pointer); }
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, bytes);
    return Status::Ok();
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, bytes);
    return Status::Ok();
  }
  Status Fill(float* x, size_t count, float value) override {
    for (size_t i = 0; i < count; ++i) x[i] = value;
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }

  Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) override {
    if (m == 0 || n == 0) return Status::Ok();
    if (k == 0) {
      // An empty product: C = beta * C, with beta = 0 meaning "overwrite"
      // as in BLAS (so uninitialised C never leaks NaN).
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j)
          c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      }
      return Status::Ok();
    }
#ifndef PS_KERNELS_NO_BLAS
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
                transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
#else
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int p = 0; p < k; ++p) {
          sum += static_cast<double>(transpose_a ? a[p * lda + i]
                                                 : a[i * lda + p]) *
                 (transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
        }
        float& out = c[i * ldc + j];
        out = static_cast<float>(alpha * sum +
                                 (beta == 0.0f ? 0.0f : beta * out));
      }
    }
#endif
    return Status::Ok();
  }

  // The elementwise loops below are written branch-free over restrict
  // pointers so that GCC vectorizes them at -O2; the versions with a
  // conditional store took a fifth of a wide_deep step.
  Status BiasActivation(float* x, const float* bias, int rows, int cols,
                        bool relu) override {
    for (int r = 0; r < rows; ++r) {
      float* __restrict row = x + static_cast<size_t>(r) * cols;
      const float* __restrict b = bias;
      if (relu) {
        for (int c = 0; c < cols; ++c) row[c] = std::max(row[c] + b[c], 0.0f);
      } else {
        for (int c = 0; c < cols; ++c) row[c] += b[c];
      }
    }
    return Status::Ok();
  }

  Status ReluBackward(const float* y, float* dy, size_t count) override {
    const float* __restrict output = y;
    float* __restrict gradient = dy;
    for (size_t i = 0; i < count; ++i)
      gradient[i] = output[i] > 0.0f ? gradient[i] : 0.0f;
    return Status::Ok();
  }

  Status ColumnSums(const float* x, int rows, int cols, float* sums) override {
    float* __restrict out = sums;
    for (int c = 0; c < cols; ++c) out[c] = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const float* __restrict row = x + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) out[c] += row[c];
    }
    return Status::Ok();
  }

  Status CopyColumns(const float* src, int rows, int src_cols, float* dst,
                     int dst_cols, int dst_offset) override {
    for (int r = 0; r < rows; ++r) {
      std::memcpy(dst + static_cast<size_t>(r) * dst_cols + dst_offset,
                  src + static_cast<size_t>(r) * src_cols,
                  src_cols * sizeof(float));
    }
    return Status::Ok();
  }

  Status GatherConcat(const float* rows, const int32_t* index, int batch,
                      int fields, int dim, float* out, int out_cols) override {
    for (int b = 0; b < batch; ++b) {
      float* out_row = out + static_cast<size_t>(b) * out_cols;
      for (int f = 0; f < fields; ++f) {
        const float* row =
            rows + static_cast<size_t>(index[b * fields + f]) * dim;
        std::memcpy(out_row + f * dim, row, dim * sizeof(float));
      }
    }
    return Status::Ok();
  }

  Status GatherSum(const float* rows, const int32_t* index, int batch,
                   int fields, float* out) override {
    for (int b = 0; b < batch; ++b) {
      float sum = 0.0f;
      for (int f = 0; f < fields; ++f) sum += rows[index[b * fields + f]];
      out[b] += sum;
    }
    return Status::Ok();
  }

  Status ScatterReduce(const float* in, int in_cols, int field_stride,
                       const int32_t* index, int batch, int fields, int dim,
                       int num_rows, float* row_grads) override {
    std::memset(row_grads, 0,
                static_cast<size_t>(num_rows) * dim * sizeof(float));
    for (int b = 0; b < batch; ++b) {
      const float* in_row = in + static_cast<size_t>(b) * in_cols;
      for (int f = 0; f < fields; ++f) {
        float* grad =
            row_grads + static_cast<size_t>(index[b * fields + f]) * dim;
        const float* source = in_row + f * field_stride;
        for (int d = 0; d < dim; ++d) grad[d] += source[d];
      }
    }
    return Status::Ok();
  }

  Status FmForward(const float* x, int x_cols, int batch, int fields, int dim,
                   float* logits) override {
    for (int b = 0; b < batch; ++b) {
      const float* v = x + static_cast<size_t>(b) * x_cols;
      float interaction = 0.0f;
      for (int d = 0; d < dim; ++d) {
        float sum = 0.0f, sum_squares = 0.0f;
        for (int f = 0; f < fields; ++f) {
          const float value = v[f * dim + d];
          sum += value;
          sum_squares += value * value;
        }
        interaction += sum * sum - sum_squares;
      }
      logits[b] += 0.5f * interaction;
    }
    return Status::Ok();
  }

  Status FmBackward(const float* x, const float* dlogits, int x_cols, int batch,
                    int fields, int dim, float* dx) override {
    for (int b = 0; b < batch; ++b) {
      const float* v = x + static_cast<size_t>(b) * x_cols;
      float* dv = dx + static_cast<size_t>(b) * x_cols;
      for (int d = 0; d < dim; ++d) {
        float sum = 0.0f;
        for (int f = 0; f < fields; ++f) sum += v[f * dim + d];
        for (int f = 0; f < fields; ++f) {
          dv[f * dim + d] += dlogits[b] * (sum - v[f * dim + d]);
        }
      }
    }
    return Status::Ok();
  }

  Status SigmoidCrossEntropy(const float* logits, const float* labels,
                             int batch, float* probabilities, float* dlogits,
                             float* loss_sum) override {
    double loss = 0.0;
    for (int b = 0; b < batch; ++b) {
      const float z = logits[b];
      const float p = 1.0f / (1.0f + std::exp(-z));
      probabilities[b] = p;
      dlogits[b] = (p - labels[b]) / static_cast<float>(batch);
      // BCE = max(z, 0) - z * y + log(1 + exp(-|z|)): no overflow.
      loss += std::max(z, 0.0f) - z * labels[b] +
              std::log1p(std::exp(-std::fabs(z)));
    }
    *loss_sum = static_cast<float>(loss);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend() {
  return std::make_unique<CpuBackend>();
}

void SetCpuBackendThreads(int threads) {
#ifndef PS_KERNELS_NO_BLAS
  openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
}

std::string BetterOpenBlasCoreType() {
#ifdef PS_KERNELS_NO_BLAS
  return "";
#else
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  const char* core = openblas_get_corename();
  if (core == nullptr || std::string(core) != "Prescott") return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  return "";
#endif
}

}  // namespace ps::kernels
