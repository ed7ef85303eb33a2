// The CPU backend: oneDNN for GEMM, plain loops for the rest. Built with
// -DPS_KERNELS_NO_ONEDNN (only by kernels/gpu_check.sh, on the GPU machine,
// which has no oneDNN) GEMM is a plain loop: slow, but a fine reference.

#ifndef PS_KERNELS_NO_ONEDNN
#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>

#include <dnnl.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "base/half.h"
#include "kernels/backend.h"
#include "kernels/gemm_team.h"

namespace ps::kernels {
namespace {

// Compiles a function twice, for the baseline x86-64 and for AVX-512
// (x86-64-v4), the copy the CPU runs chosen when the program loads (an
// ifunc): the loops it marks are memory-bound, and move 16 floats an
// instruction on AVX-512 against 4. For loops whose copies give the same
// bits (kernels/BUILD compiles this file with -ffp-contract=off, so no
// copy fuses a multiply and an add). GCC only: Clang 14's resolver never
// picks the "arch=" copy, and under ThreadSanitizer the resolver is
// instrumented and runs before the sanitizer starts (a crash at load).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PS_KERNELS_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PS_KERNELS_THREAD_SANITIZER 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(PS_KERNELS_THREAD_SANITIZER)
#define PS_KERNELS_VECTOR_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v4")))
#else
#define PS_KERNELS_VECTOR_CLONES
#endif

#ifndef PS_KERNELS_NO_ONEDNN
// OK, or what a failed dnnl_sgemm() of that shape says.
Status SgemmStatus(dnnl_status_t status, int m, int n, int k, int lda, int ldb,
                   int ldc) {
  if (status == dnnl_success) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                std::string("oneDNN's sgemm failed (") +
                    dnnl_status2str(status) + ") for m " + std::to_string(m) +
                    " n " + std::to_string(n) + " k " + std::to_string(k) +
                    " lda " + std::to_string(lda) + " ldb " +
                    std::to_string(ldb) + " ldc " + std::to_string(ldc));
}

// Rounds rows [first_row, end_row) of `cols` floats, `stride` apart, to
// the same rows of a packed bfloat16 copy at `packed` (`cols` apart).
// Integer arithmetic only, so its two copies give the same bits; the
// AVX-512 one rounds a 4096 x 429 operand at 2.7x the baseline's rate.
PS_KERNELS_VECTOR_CLONES void RoundRowsToBfloat16(const float* in,
                                                  int first_row, int end_row,
                                                  int cols, int stride,
                                                  uint16_t* packed) {
  for (int r = first_row; r < end_row; ++r) {
    const float* __restrict row = in + static_cast<size_t>(r) * stride;
    uint16_t* __restrict rounded = packed + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) rounded[c] = FloatToBfloat16(row[c]);
  }
}

#endif

// The hot elementwise loops of a step. None multiplies and adds, so the
// two copies (PS_KERNELS_VECTOR_CLONES) give the same bits. Written
// branch-free over restrict pointers so that they vectorize (versions with
// a conditional store took a fifth of a wide_deep step).

PS_KERNELS_VECTOR_CLONES void AddBiasToRows(float* x, const float* bias,
                                            int rows, int cols, bool relu) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    const float* __restrict b = bias;
    if (relu) {
      for (int c = 0; c < cols; ++c) row[c] = std::max(row[c] + b[c], 0.0f);
    } else {
      for (int c = 0; c < cols; ++c) row[c] += b[c];
    }
  }
}

PS_KERNELS_VECTOR_CLONES void ZeroWhereNotPositive(const float* y, float* dy,
                                                   size_t count) {
  const float* __restrict output = y;
  float* __restrict gradient = dy;
  for (size_t i = 0; i < count; ++i)
    gradient[i] = output[i] > 0.0f ? gradient[i] : 0.0f;
}

PS_KERNELS_VECTOR_CLONES void SumColumns(const float* x, int rows, int cols,
                                         float* sums) {
  float* __restrict out = sums;
  for (int c = 0; c < cols; ++c) out[c] = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float* __restrict row = x + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) out[c] += row[c];
  }
}

// A row of 16 floats (the usual embedding width) is copied with a copy of
// known size, which the compiler inlines, rather than a call to memcpy.
PS_KERNELS_VECTOR_CLONES void GatherRows(const float* rows,
                                         const int32_t* index, int batch,
                                         int fields, int dim, float* out,
                                         int out_cols) {
  for (int b = 0; b < batch; ++b) {
    float* out_row = out + static_cast<size_t>(b) * out_cols;
    const int32_t* row_index = index + static_cast<size_t>(b) * fields;
    if (dim == 16) {
      for (int f = 0; f < fields; ++f) {
        std::memcpy(out_row + f * 16,
                    rows + static_cast<size_t>(row_index[f]) * 16,
                    16 * sizeof(float));
      }
    } else {
      for (int f = 0; f < fields; ++f) {
        std::memcpy(out_row + f * dim,
                    rows + static_cast<size_t>(row_index[f]) * dim,
                    dim * sizeof(float));
      }
    }
  }
}

PS_KERNELS_VECTOR_CLONES void ScatterAddRows(const float* in, int in_cols,
                                             int field_stride,
                                             const int32_t* index, int batch,
                                             int fields, int dim,
                                             float* row_grads) {
  for (int b = 0; b < batch; ++b) {
    const float* in_row = in + static_cast<size_t>(b) * in_cols;
    for (int f = 0; f < fields; ++f) {
      float* __restrict grad =
          row_grads + static_cast<size_t>(index[b * fields + f]) * dim;
      const float* __restrict source = in_row + f * field_stride;
      for (int d = 0; d < dim; ++d) grad[d] += source[d];
    }
  }
}

// ScatterAddRows for the rows this part owns: a part owns each run of
// kScatterRunRows rows whose number modulo `parts` is `part`, so that parts
// on different threads never write the same cache line. Each row gets its
// sums in the order ScatterAddRows adds them: the same bits.
constexpr int kScatterRunRows = 64;
PS_KERNELS_VECTOR_CLONES void ScatterAddOwnedRows(
    const float* in, int in_cols, int field_stride, const int32_t* index,
    int batch, int fields, int dim, float* row_grads, int part, int parts) {
  for (int b = 0; b < batch; ++b) {
    const float* in_row = in + static_cast<size_t>(b) * in_cols;
    for (int f = 0; f < fields; ++f) {
      const int32_t row = index[b * fields + f];
      if (static_cast<uint32_t>(row) / kScatterRunRows % parts !=
          static_cast<uint32_t>(part)) {
        continue;
      }
      float* __restrict grad = row_grads + static_cast<size_t>(row) * dim;
      const float* __restrict source = in_row + f * field_stride;
      for (int d = 0; d < dim; ++d) grad[d] += source[d];
    }
  }
}

PS_KERNELS_VECTOR_CLONES void AddInto(const float* x, float* y, size_t count) {
  const float* __restrict in = x;
  float* __restrict out = y;
  for (size_t i = 0; i < count; ++i) out[i] += in[i];
}

PS_KERNELS_VECTOR_CLONES void AddColumnsInto(const float* src, int rows,
                                             int src_cols, int src_offset,
                                             float* dst, int dst_cols) {
  for (int r = 0; r < rows; ++r) {
    const float* __restrict in =
        src + static_cast<size_t>(r) * src_cols + src_offset;
    float* __restrict out = dst + static_cast<size_t>(r) * dst_cols;
    for (int c = 0; c < dst_cols; ++c) out[c] += in[c];
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuOptions& options) : options_(options) {
#ifndef PS_KERNELS_NO_ONEDNN
    if (options_.threads > 1) {
      // Each helper runs oneDNN on itself alone, as the caller does.
      team_ = std::make_unique<GemmTeam>(options_.threads,
                                         [] { omp_set_num_threads(1); });
    }
#endif
  }

  const char* name() const override { return "cpu"; }
  bool ComputesOnHostMemory() const override { return true; }

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
    if (value == 0.0f) {
      if (count > 0) std::memset(x, 0, count * sizeof(float));
      return Status::Ok();
    }
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
    // Thin GEMMs stay FP32 (backend.h, GemmPrecision::kBf16).
    const bool bf16 = options_.precision == GemmPrecision::kBf16 && m >= 16 &&
                      n >= 16 && k >= 16;
#ifndef PS_KERNELS_NO_ONEDNN
    // oneDNN runs on the calling thread alone (its OpenMP team would split a
    // GEMM evenly, and wait for a thread slowed by other work on its core);
    // a large GEMM is cut into blocks the backend's team shares instead.
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    const GemmSplit split = SplitGemm(m, n, k, threads());
    if (bf16) {
      return Bf16Gemm(split, transpose_a, transpose_b, m, n, k, alpha, a, lda,
                      b, ldb, beta, c, ldc);
    }
    if (split.count == 1) {
      return SgemmStatus(
          dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                     alpha, a, lda, b, ldb, beta, c, ldc),
          m, n, k, lda, ldb, ldc);
    }
    try {
      std::vector<dnnl_status_t> statuses(static_cast<size_t>(split.count),
                                          dnnl_success);
      RunBlocks(split.count, [&](int index, int) {
        const GemmBlock block = GemmBlockOf(split, index, transpose_a,
                                            transpose_b, m, n, lda, ldb, ldc);
        statuses[static_cast<size_t>(index)] =
            dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N',
                       block.m, block.n, k, alpha, a + block.a_offset, lda,
                       b + block.b_offset, ldb, beta, c + block.c_offset, ldc);
      });
      for (const dnnl_status_t status : statuses) {
        if (status != dnnl_success) {
          return SgemmStatus(status, m, n, k, lda, ldb, ldc);
        }
      }
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory,
                    "cannot allocate a GEMM's blocks for the team");
    }
#else
    const auto to_gemm_input = [bf16](float x) {
      return bf16 ? Bfloat16ToFloat(FloatToBfloat16(x)) : x;
    };
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int p = 0; p < k; ++p) {
          sum += static_cast<double>(to_gemm_input(
                     transpose_a ? a[p * lda + i] : a[i * lda + p])) *
                 to_gemm_input(transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
        }
        float& out = c[i * ldc + j];
        out = static_cast<float>(alpha * sum +
                                 (beta == 0.0f ? 0.0f : beta * out));
      }
    }
#endif
    return Status::Ok();
  }

  void DeclareStableInput(const float* data, size_t count) override {
#ifndef PS_KERNELS_NO_ONEDNN
    if (options_.precision == GemmPrecision::kBf16)
      stable_ranges_.emplace_back(reinterpret_cast<uintptr_t>(data),
                                  reinterpret_cast<uintptr_t>(data + count));
#endif
  }
  void ForgetStableInputs() override {
#ifndef PS_KERNELS_NO_ONEDNN
    stable_ranges_.clear();
    live_rounded_inputs_ = 0;
#endif
  }

  Status BiasActivation(float* x, const float* bias, int rows, int cols,
                        bool relu) override {
    AddBiasToRows(x, bias, rows, cols, relu);
    return Status::Ok();
  }

  Status ReluBackward(const float* y, float* dy, size_t count) override {
    ZeroWhereNotPositive(y, dy, count);
    return Status::Ok();
  }

  Status ColumnSums(const float* x, int rows, int cols, float* sums) override {
    SumColumns(x, rows, cols, sums);
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
    const int blocks = LoopBlocks(static_cast<size_t>(batch) * fields * dim);
    if (blocks == 1) {
      GatherRows(rows, index, batch, fields, dim, out, out_cols);
      return Status::Ok();
    }
    ForBlocks(blocks, [&](int block) {
      const int first = static_cast<int>(int64_t{batch} * block / blocks);
      const int end = static_cast<int>(int64_t{batch} * (block + 1) / blocks);
      GatherRows(rows, index + static_cast<size_t>(first) * fields, end - first,
                 fields, dim, out + static_cast<size_t>(first) * out_cols,
                 out_cols);
    });
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
    return ScatterAdd(in, in_cols, field_stride, index, batch, fields, dim,
                      row_grads);
  }

  Status ScatterAdd(const float* in, int in_cols, int field_stride,
                    const int32_t* index, int batch, int fields, int dim,
                    float* row_grads) override {
    const int parts = LoopBlocks(static_cast<size_t>(batch) * fields * dim);
    if (parts == 1) {
      ScatterAddRows(in, in_cols, field_stride, index, batch, fields, dim,
                     row_grads);
    } else {
      ForBlocks(parts, [&](int part) {
        ScatterAddOwnedRows(in, in_cols, field_stride, index, batch, fields,
                            dim, row_grads, part, parts);
      });
    }
    return Status::Ok();
  }

  Status Add(const float* x, float* y, size_t count) override {
    AddInto(x, y, count);
    return Status::Ok();
  }

  Status Multiply(const float* a, const float* b, float* c, size_t count,
                  bool accumulate) override {
    const float* __restrict left = a;
    const float* __restrict right = b;
    float* __restrict out = c;
    if (accumulate) {
      for (size_t i = 0; i < count; ++i) out[i] += left[i] * right[i];
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = left[i] * right[i];
    }
    return Status::Ok();
  }

  Status AccumulateColumns(const float* src, int rows, int src_cols,
                           int src_offset, float* dst, int dst_cols) override {
    AddColumnsInto(src, rows, src_cols, src_offset, dst, dst_cols);
    return Status::Ok();
  }

  Status DotInteraction(const float* x, int batch, int rows, int dim,
                        bool self_interaction, float* out) override {
    const int width = DotInteractionWidth(rows, self_interaction);
    for (int b = 0; b < batch; ++b) {
      const float* v = x + static_cast<size_t>(b) * rows * dim;
      float* pairs = out + static_cast<size_t>(b) * width;
      int p = 0;
      for (int i = 0; i < rows; ++i) {
        const int last = self_interaction ? i : i - 1;
        for (int j = 0; j <= last; ++j) {
          const float* __restrict left = v + i * dim;
          const float* __restrict right = v + j * dim;
          float dot = 0.0f;
          for (int d = 0; d < dim; ++d) dot += left[d] * right[d];
          pairs[p++] = dot;
        }
      }
    }
    return Status::Ok();
  }

  Status Softmax(const float* x, int rows, int cols, float* y) override {
    for (int r = 0; r < rows; ++r) {
      const float* in = x + static_cast<size_t>(r) * cols;
      float* out = y + static_cast<size_t>(r) * cols;
      float largest = in[0];
      for (int c = 1; c < cols; ++c) largest = std::max(largest, in[c]);
      float sum = 0.0f;
      for (int c = 0; c < cols; ++c) {
        out[c] = std::exp(in[c] - largest);
        sum += out[c];
      }
      for (int c = 0; c < cols; ++c) out[c] /= sum;
    }
    return Status::Ok();
  }

  Status SoftmaxBackward(const float* y, const float* dy, int rows, int cols,
                         float* dx) override {
    for (int r = 0; r < rows; ++r) {
      const size_t row = static_cast<size_t>(r) * cols;
      float dot = 0.0f;
      for (int c = 0; c < cols; ++c) dot += y[row + c] * dy[row + c];
      for (int c = 0; c < cols; ++c)
        dx[row + c] = y[row + c] * (dy[row + c] - dot);
    }
    return Status::Ok();
  }

  Status DotInteractionBackward(const float* x, const float* dout, int batch,
                                int rows, int dim, bool self_interaction,
                                float* dx) override {
    const int width = DotInteractionWidth(rows, self_interaction);
    for (int b = 0; b < batch; ++b) {
      const float* v = x + static_cast<size_t>(b) * rows * dim;
      const float* pairs = dout + static_cast<size_t>(b) * width;
      float* dv = dx + static_cast<size_t>(b) * rows * dim;
      int p = 0;
      for (int i = 0; i < rows; ++i) {
        const int last = self_interaction ? i : i - 1;
        for (int j = 0; j <= last; ++j) {
          const float g = pairs[p++];
          if (i == j) {
            for (int d = 0; d < dim; ++d)
              dv[i * dim + d] += 2 * g * v[i * dim + d];
            continue;
          }
          for (int d = 0; d < dim; ++d) {
            dv[i * dim + d] += g * v[j * dim + d];
            dv[j * dim + d] += g * v[i * dim + d];
          }
        }
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
                             const float* scale, int batch,
                             float* probabilities, float* dlogits,
                             float* loss_sum) override {
    double loss = 0.0;
    for (int b = 0; b < batch; ++b) {
      const float z = logits[b];
      const float p = 1.0f / (1.0f + std::exp(-z));
      const float factor = scale == nullptr ? 1.0f : scale[b];
      probabilities[b] = p;
      dlogits[b] = factor * (p - labels[b]) / static_cast<float>(batch);
      // BCE = max(z, 0) - z * y + log(1 + exp(-|z|)): no overflow.
      loss += factor * (std::max(z, 0.0f) - z * labels[b] +
                        std::log1p(std::exp(-std::fabs(z))));
    }
    *loss_sum = static_cast<float>(loss);
    return Status::Ok();
  }

 private:
  // A memory-bound loop over `work` floats (a gather, a scatter) is cut into
  // one block per GEMM thread when it is large enough to be worth waking
  // them for; else one block.
  static constexpr size_t kLoopWorkPerThread = 1 << 16;
  int LoopBlocks([[maybe_unused]] size_t work) const {
#ifndef PS_KERNELS_NO_ONEDNN
    if (team_ && work >= kLoopWorkPerThread * team_->threads())
      return team_->threads();
#endif
    return 1;
  }

  // Calls run_block(index) for each of `count` blocks: on the GEMM threads
  // if there are any, else here.
  template <typename RunBlock>
  void ForBlocks(int count, const RunBlock& run_block) {
#ifndef PS_KERNELS_NO_ONEDNN
    if (team_ && count > 1) {
      team_->Run(count, [&run_block](int index, int) { run_block(index); });
      return;
    }
#endif
    for (int index = 0; index < count; ++index) run_block(index);
  }

#ifndef PS_KERNELS_NO_ONEDNN
  // Calls run_block(index, thread) for each of `count` blocks: on the team
  // if there is one, else here.
  void RunBlocks(int count, const GemmTeam::ChunkFunction& run_block) {
    if (team_ && count > 1) {
      team_->Run(count, run_block);
    } else {
      for (int index = 0; index < count; ++index) run_block(index, 0);
    }
  }

  int threads() const { return team_ ? team_->threads() : 1; }

  // One oneDNN bfloat16 matmul: a block's shape over the packed copies,
  // with its scratchpad supplied per thread (a library-managed one may not
  // move between threads).
  struct Bf16Matmul {
    dnnl::matmul::primitive_desc description;
    dnnl::matmul matmul;
  };
  // transpose_a, transpose_b, m, n, k, the packed copies' leading
  // dimensions, ldc, alpha, beta. A training run has a handful (a step's
  // GEMMs' blocks, the last and evaluation batches'), so the cache is not
  // bounded.
  using GemmShape =
      std::tuple<bool, bool, int, int, int, int, int, int, float, float>;

  const Bf16Matmul& Bf16MatmulFor(const GemmShape& shape) {
    auto found = bf16_gemms_.find(shape);
    if (found != bf16_gemms_.end()) return found->second;
    const auto& [transpose_a, transpose_b, m, n, k, lda, ldb, ldc, alpha,
                 beta] = shape;
    using dims = dnnl::memory::dims;
    using type = dnnl::memory::data_type;
    const dnnl::memory::desc a_desc(dims{m, k}, type::bf16,
                                    transpose_a ? dims{1, lda} : dims{lda, 1});
    const dnnl::memory::desc b_desc(dims{k, n}, type::bf16,
                                    transpose_b ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c_desc(dims{m, n}, type::f32, dims{ldc, 1});
    dnnl::primitive_attr attributes;
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attributes.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops accumulate;
      accumulate.append_sum(beta);
      attributes.set_post_ops(accumulate);
    }
    const dnnl::matmul::primitive_desc description(
        dnnl::matmul::desc(a_desc, b_desc, c_desc), attributes, *engine_);
    return bf16_gemms_
        .emplace(shape, Bf16Matmul{description, dnnl::matmul(description)})
        .first->second;
  }

  // C = alpha * op(A) * op(B) + beta * C with both operands rounded to
  // bfloat16 and FP32 accumulation: one oneDNN matmul per block of `split`,
  // each made once per shape and kept. The operand the split cuts (A by
  // rows, B by columns) is rounded block by block, each block's slice packed
  // dense on its own (oneDNN's fast bfloat16 kernels refuse a strided
  // slice of a larger matrix); the other is rounded whole and shared. An
  // operand within a stable range (DeclareStableInput) is rounded into its
  // kept copy once and read from it after, where the copy has the packed
  // layout: always for the shared operand, for the cut one when the cut
  // runs along its stored rows.
  Status Bf16Gemm(const GemmSplit& split, bool transpose_a, bool transpose_b,
                  int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
    const int team_threads = threads();
    try {
      // Grown only: a step's GEMMs alternate between shapes, and growing
      // a vector again zero-fills the regrown part each time.
      const size_t a_size = static_cast<size_t>(m) * k;
      const size_t b_size = static_cast<size_t>(k) * n;
      if (a_bf16_.size() < a_size) a_bf16_.resize(a_size);
      if (b_bf16_.size() < b_size) b_bf16_.resize(b_size);
      // The shared operand, as stored (op(A) is m x k, stored k rows of m
      // when transposed; op(B) likewise), its rounding shared in bands.
      const bool shared_is_b = split.by_rows;
      const float* shared = shared_is_b ? b : a;
      const int shared_rows =
          shared_is_b ? (transpose_b ? n : k) : (transpose_a ? k : m);
      const int shared_cols =
          shared_is_b ? (transpose_b ? k : n) : (transpose_a ? m : k);
      const int shared_ld = shared_is_b ? ldb : lda;
      RoundedInput* shared_kept =
          FindOrAddKeptCopy(shared, shared_rows, shared_cols, shared_ld);
      uint16_t* shared_bf16 = shared_kept != nullptr
                                  ? shared_kept->packed.data()
                                  : (shared_is_b ? b_bf16_ : a_bf16_).data();
      if (shared_kept == nullptr || !shared_kept->rounded) {
        const int bands = split.count > 1 ? team_threads : 1;
        const auto round_band = [&](int band, int) {
          RoundRowsToBfloat16(
              shared, static_cast<int>(int64_t{shared_rows} * band / bands),
              static_cast<int>(int64_t{shared_rows} * (band + 1) / bands),
              shared_cols, shared_ld, shared_bf16);
        };
        if (bands > 1) {
          RunBlocks(bands, round_band);
        } else {
          round_band(0, 0);
        }
        if (shared_kept != nullptr) shared_kept->rounded = true;
      }
      // The cut operand's blocks, packed one after another, are the stored
      // matrix packed dense when the cut runs along its stored rows (or
      // there is one block): only then can a kept copy stand for them.
      const bool cut_is_b = !split.by_rows;
      const bool cut_along_stored_rows =
          split.count == 1 || (cut_is_b ? transpose_b : !transpose_a);
      RoundedInput* cut_kept =
          !cut_along_stored_rows ? nullptr
          : cut_is_b             ? FindOrAddKeptCopy(b, transpose_b ? n : k,
                                         transpose_b ? k : n, ldb)
                                 : FindOrAddKeptCopy(a, transpose_a ? k : m,
                                         transpose_a ? m : k, lda);
      uint16_t* cut_bf16 = cut_kept != nullptr
                               ? cut_kept->packed.data()
                               : (cut_is_b ? b_bf16_ : a_bf16_).data();
      const bool round_cut = cut_kept == nullptr || !cut_kept->rounded;
      if (!engine_) engine_.emplace(dnnl::engine::kind::cpu, 0);
      while (static_cast<int>(streams_.size()) < team_threads) {
        streams_.emplace_back(*engine_);
      }
      scratchpads_.resize(static_cast<size_t>(team_threads));
      // A block's packed leading dimensions: its own slice's for the cut
      // operand, the whole's for the shared one.
      const auto packed_lds = [&](const GemmBlock& block) {
        const int packed_lda = transpose_a ? block.m : k;
        const int packed_ldb = transpose_b ? k : block.n;
        return std::pair<int, int>(packed_lda, packed_ldb);
      };
      // The blocks' primitives (all but the last block share a shape), made
      // here, before the team reads the cache.
      const Bf16Matmul* matmuls[2] = {nullptr, nullptr};
      size_t scratchpad_bytes = 0;
      for (int which = 0; which < 2; ++which) {
        const GemmBlock block =
            GemmBlockOf(split, which == 0 ? 0 : split.count - 1, transpose_a,
                        transpose_b, m, n, lda, ldb, ldc);
        const auto [packed_lda, packed_ldb] = packed_lds(block);
        matmuls[which] = &Bf16MatmulFor(
            GemmShape{transpose_a, transpose_b, block.m, block.n, k, packed_lda,
                      packed_ldb, ldc, alpha, beta});
        scratchpad_bytes =
            std::max(scratchpad_bytes,
                     matmuls[which]->description.scratchpad_desc().get_size());
      }
      for (std::vector<char>& scratchpad : scratchpads_) {
        if (scratchpad.size() < scratchpad_bytes) {
          scratchpad.resize(scratchpad_bytes);
        }
      }
      // A block that throws (a dnnl::error, std::bad_alloc) ends the team's
      // job, and Run() rethrows it here, to the catches below.
      RunBlocks(split.count, [&](int index, int thread) {
        const GemmBlock block = GemmBlockOf(split, index, transpose_a,
                                            transpose_b, m, n, lda, ldb, ldc);
        const Bf16Matmul& gemm =
            *matmuls[index + 1 < split.count || split.count == 1 ? 0 : 1];
        // The cut operand's slice (where GemmBlockOf() says it starts in
        // the FP32 operand), packed into the block's own region.
        const size_t first = static_cast<size_t>(index) * split.size;
        uint16_t* a_block = shared_bf16;
        uint16_t* b_block = shared_bf16;
        if (split.by_rows) {
          a_block = cut_bf16 + first * k;
          if (round_cut) {
            RoundRowsToBfloat16(a + block.a_offset, 0,
                                transpose_a ? k : block.m,
                                transpose_a ? block.m : k, lda, a_block);
          }
        } else {
          b_block = cut_bf16 + first * k;
          if (round_cut) {
            RoundRowsToBfloat16(b + block.b_offset, 0,
                                transpose_b ? block.n : k,
                                transpose_b ? k : block.n, ldb, b_block);
          }
        }
        dnnl::memory a_memory(gemm.description.src_desc(), *engine_, a_block);
        dnnl::memory b_memory(gemm.description.weights_desc(), *engine_,
                              b_block);
        dnnl::memory c_memory(gemm.description.dst_desc(), *engine_,
                              c + block.c_offset);
        dnnl::memory scratchpad_memory(
            gemm.description.scratchpad_desc(), *engine_,
            scratchpads_[static_cast<size_t>(thread)].data());
        dnnl::stream& stream = streams_[static_cast<size_t>(thread)];
        gemm.matmul.execute(stream, {{DNNL_ARG_SRC, a_memory},
                                     {DNNL_ARG_WEIGHTS, b_memory},
                                     {DNNL_ARG_DST, c_memory},
                                     { DNNL_ARG_SCRATCHPAD,
                                       scratchpad_memory }});
        stream.wait();
      });
      if (cut_kept != nullptr) cut_kept->rounded = true;
    } catch (const dnnl::error& error) {
      return Status(
          StatusCode::kInvalidArgument,
          std::string("oneDNN's bfloat16 matmul failed: ") + error.what());
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory,
                    "cannot allocate the bfloat16 copies of a GEMM's inputs");
    }
    return Status::Ok();
  }

  // A stable input's rounded copy (DeclareStableInput()): the stored
  // matrix at `data` (rows x cols, `ld` apart) packed dense.
  struct RoundedInput {
    const float* data = nullptr;
    int rows = 0, cols = 0, ld = 0;
    bool rounded = false;
    std::vector<uint16_t> packed;
  };

  // The kept copy of the stored matrix at `data` if it lies within a
  // declared stable range, made (not yet rounded) the first time the
  // matrix is asked for; null outside every stable range. Throws
  // std::bad_alloc, leaving no copy made.
  RoundedInput* FindOrAddKeptCopy(const float* data, int rows, int cols,
                                  int ld) {
    if (stable_ranges_.empty()) return nullptr;
    for (size_t i = 0; i < live_rounded_inputs_; ++i) {
      RoundedInput& kept = rounded_inputs_[i];
      if (kept.data == data && kept.rows == rows && kept.cols == cols &&
          kept.ld == ld) {
        return &kept;
      }
    }
    // Addresses as integers: the ranges are separate allocations.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
    const uintptr_t end = reinterpret_cast<uintptr_t>(
        data + static_cast<size_t>(rows - 1) * ld + cols);
    const bool stable = std::any_of(
        stable_ranges_.begin(), stable_ranges_.end(), [&](const auto& range) {
          return range.first <= begin && end <= range.second;
        });
    if (!stable) return nullptr;
    // The copies' buffers outlive ForgetStableInputs(): the next step keeps
    // the same matrices and reuses them without allocating.
    if (live_rounded_inputs_ == rounded_inputs_.size())
      rounded_inputs_.emplace_back();
    RoundedInput& kept = rounded_inputs_[live_rounded_inputs_];
    const size_t size = static_cast<size_t>(rows) * cols;
    if (kept.packed.size() < size) kept.packed.resize(size);
    kept.data = data;
    kept.rows = rows;
    kept.cols = cols;
    kept.ld = ld;
    kept.rounded = false;
    ++live_rounded_inputs_;
    return &kept;
  }

  // Each declared range's first and end addresses.
  std::vector<std::pair<uintptr_t, uintptr_t>> stable_ranges_;
  // A deque: a copy's address holds while later ones are added.
  std::deque<RoundedInput> rounded_inputs_;
  size_t live_rounded_inputs_ = 0;
  std::optional<dnnl::engine> engine_;
  // Per team thread (the caller first): a stream and a scratchpad.
  std::vector<dnnl::stream> streams_;
  std::vector<std::vector<char>> scratchpads_;
  std::map<GemmShape, Bf16Matmul> bf16_gemms_;
  std::vector<uint16_t> a_bf16_, b_bf16_;
  // The GEMM threads beside the caller (options_.threads > 1), else null.
  std::unique_ptr<GemmTeam> team_;
#endif
  const CpuOptions options_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend() {
  return std::make_unique<CpuBackend>(CpuOptions());
}

Status NewCpuBackend(const CpuOptions& options,
                     std::unique_ptr<Backend>* backend) {
  if (options.threads < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "the CPU backend needs at least one thread");
  }
  if (options.precision == GemmPrecision::kTf32) {
    return Status(StatusCode::kInvalidArgument,
                  "TF32 is a CUDA tensor-core format; the CPU backend does "
                  "FP32 or bfloat16");
  }
  if (options.precision == GemmPrecision::kBf16 && !CpuHasBf16Gemm()) {
    return Status(StatusCode::kUnavailable,
                  "bfloat16 GEMMs need a CPU with AVX512_BF16, which this one "
                  "lacks (they would be slower than FP32 here)");
  }
  try {
    *backend = std::make_unique<CpuBackend>(options);
  } catch (const std::system_error& error) {
    return Status(
        StatusCode::kOutOfMemory,
        std::string("cannot start the GEMM threads: ") + error.what());
  }
  return Status::Ok();
}

bool CpuHasBf16Gemm() {
#ifndef PS_KERNELS_NO_ONEDNN
  // What oneDNN will use, which DNNL_MAX_CPU_ISA may cap below the CPU's.
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
#else
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#endif
}

}  // namespace ps::kernels
