// The CPU backend against naive references written out here, on awkward
// sizes (not multiples of 8, empty batches, duplicate keys).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace ps::kernels {
namespace {

std::vector<float> Random(size_t count, std::mt19937* rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(*rng);
  return values;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
  std::mt19937 rng_{1234};
};

TEST_F(CpuBackendTest, GemmMatchesNaiveProductForEveryTranspose) {
  const int m = 7, n = 5, k = 13;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * k, &rng_), b = Random(k * n, &rng_);
      std::vector<float> c = Random(m * n, &rng_), expected = c;
      const int lda = ta ? m : k, ldb = tb ? k : n;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          float sum = 0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[p * lda + i] : a[i * lda + p];
            const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
            sum += av * bv;
          }
          expected[i * n + j] = 0.5f * sum + 2.0f * expected[i * n + j];
        }
      }
      ASSERT_TRUE(backend_
                      ->Gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(),
                             ldb, 2.0f, c.data(), n)
                      .ok());
      for (int i = 0; i < m * n; ++i)
        ASSERT_NEAR(c[i], expected[i], 1e-4) << ta << tb;
    }
  }
}

// C = 0.5 * op(A) op(B) + 2 * C in double, with each input passed through
// `round` first.
std::vector<float> ReferenceGemm(bool ta, bool tb, int m, int n, int k,
                                 const std::vector<float>& a,
                                 const std::vector<float>& b,
                                 std::vector<float> c, float (*round)(float)) {
  const int lda = ta ? m : k, ldb = tb ? k : n;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        sum +=
            static_cast<double>(round(ta ? a[p * lda + i] : a[i * lda + p])) *
            round(tb ? b[j * ldb + p] : b[p * ldb + j]);
      }
      c[i * n + j] = static_cast<float>(0.5 * sum + 2.0 * c[i * n + j]);
    }
  }
  return c;
}

float Exact(float x) { return x; }

// Rounds to the nearest bfloat16, ties to even (finite inputs).
float ToBfloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

TEST(CpuBackendOptionsTest, Bf16GemmRoundsItsInputsAndAccumulatesInFp32) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  CpuOptions options;
  options.precision = GemmPrecision::kBf16;
  std::unique_ptr<Backend> backend;
  ASSERT_TRUE(NewCpuBackend(options, &backend).ok());
  std::mt19937 rng(99);
  const int m = 37, n = 19, k = 45;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = Random(m * k, &rng), b = Random(k * n, &rng),
                               c0 = Random(m * n, &rng);
      const std::vector<float> rounded =
          ReferenceGemm(ta, tb, m, n, k, a, b, c0, ToBfloat16);
      const std::vector<float> exact =
          ReferenceGemm(ta, tb, m, n, k, a, b, c0, Exact);
      std::vector<float> c = c0;
      // Twice: the second call reuses the matmul made by the first.
      for (int call = 0; call < 2; ++call) {
        c = c0;
        ASSERT_TRUE(backend
                        ->Gemm(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k,
                               b.data(), tb ? k : n, 2.0f, c.data(), n)
                        .ok());
      }
      double farthest_from_exact = 0;
      for (int i = 0; i < m * n; ++i) {
        ASSERT_NEAR(c[i], rounded[i], 1e-4) << ta << tb << " at " << i;
        farthest_from_exact =
            std::max(farthest_from_exact, std::fabs(double{c[i]} - exact[i]));
      }
      // The rounding shows: FP32 inputs would be within ~1e-6.
      EXPECT_GT(farthest_from_exact, 1e-3) << ta << tb;
    }
  }
}

TEST(CpuBackendOptionsTest, Bf16LeavesThinGemmsInFp32) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  CpuOptions options;
  options.precision = GemmPrecision::kBf16;
  std::unique_ptr<Backend> backend;
  ASSERT_TRUE(NewCpuBackend(options, &backend).ok());
  std::mt19937 rng(7);
  const int m = 64, n = 1, k = 40;  // a logit layer
  const std::vector<float> a = Random(m * k, &rng), b = Random(k * n, &rng),
                           c0 = Random(m * n, &rng);
  const std::vector<float> exact =
      ReferenceGemm(false, false, m, n, k, a, b, c0, Exact);
  std::vector<float> c = c0;
  ASSERT_TRUE(backend
                  ->Gemm(false, false, m, n, k, 0.5f, a.data(), k, b.data(), n,
                         2.0f, c.data(), n)
                  .ok());
  for (int i = 0; i < m; ++i) ASSERT_NEAR(c[i], exact[i], 1e-5) << i;
}

TEST(CpuBackendOptionsTest, TwoThreadsComputeTheSameProduct) {
  CpuOptions options;
  options.threads = 2;
  std::unique_ptr<Backend> backend;
  ASSERT_TRUE(NewCpuBackend(options, &backend).ok());
  std::mt19937 rng(5);
  const int m = 300, n = 70, k = 90;
  const std::vector<float> a = Random(m * k, &rng), b = Random(k * n, &rng),
                           c0 = Random(m * n, &rng);
  const std::vector<float> exact =
      ReferenceGemm(false, true, m, n, k, a, b, c0, Exact);
  std::vector<float> c = c0;
  ASSERT_TRUE(backend
                  ->Gemm(false, true, m, n, k, 0.5f, a.data(), k, b.data(), k,
                         2.0f, c.data(), n)
                  .ok());
  for (int i = 0; i < m * n; ++i) ASSERT_NEAR(c[i], exact[i], 1e-4) << i;
}

TEST(CpuBackendOptionsTest, RejectsWhatTheCpuCannotDo) {
  std::unique_ptr<Backend> backend;
  CpuOptions no_threads;
  no_threads.threads = 0;
  EXPECT_EQ(NewCpuBackend(no_threads, &backend).code(),
            StatusCode::kInvalidArgument);
  CpuOptions tf32;
  tf32.precision = GemmPrecision::kTf32;
  EXPECT_EQ(NewCpuBackend(tf32, &backend).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend, nullptr) << "no backend from a rejected option";
  CpuOptions bf16;
  bf16.precision = GemmPrecision::kBf16;
  const Status created = NewCpuBackend(bf16, &backend);
  EXPECT_EQ(created.ok(), CpuHasBf16Gemm()) << created.message();
  if (!created.ok()) {
    EXPECT_EQ(created.code(), StatusCode::kUnavailable);
  }
}

TEST_F(CpuBackendTest, GemmWithEmptyInnerDimensionScalesC) {
  std::vector<float> c = {1, 2, 3};
  ASSERT_TRUE(backend_
                  ->Gemm(false, false, 3, 1, 0, 1.0f, nullptr, 0, nullptr, 1,
                         0.5f, c.data(), 1)
                  .ok());
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f, 1.5f}));
}

TEST_F(CpuBackendTest, GatherConcatAndScatterReduceAreAdjoint) {
  const int batch = 5, fields = 3, dim = 3, rows = 4,
            out_cols = fields * dim + 2;
  const std::vector<int32_t> index = {0, 1, 2, 3, 3, 3, 0, 0,
                                      1, 2, 2, 2, 1, 0, 3};
  std::vector<float> table = Random(rows * dim, &rng_);
  std::vector<float> out(batch * out_cols, -7.0f);
  ASSERT_TRUE(backend_
                  ->GatherConcat(table.data(), index.data(), batch, fields, dim,
                                 out.data(), out_cols)
                  .ok());
  for (int b = 0; b < batch; ++b) {
    for (int f = 0; f < fields; ++f) {
      for (int d = 0; d < dim; ++d) {
        ASSERT_EQ(out[b * out_cols + f * dim + d],
                  table[index[b * fields + f] * dim + d]);
      }
    }
    EXPECT_EQ(out[b * out_cols + fields * dim],
              -7.0f);  // other columns untouched
  }
  // Duplicate keys (3 appears three times in example 1) accumulate.
  std::vector<float> upstream = Random(batch * out_cols, &rng_);
  std::vector<float> grads(rows * dim, 99.0f);
  ASSERT_TRUE(backend_
                  ->ScatterReduce(upstream.data(), out_cols, dim, index.data(),
                                  batch, fields, dim, rows, grads.data())
                  .ok());
  std::vector<float> expected(rows * dim, 0.0f);
  for (int b = 0; b < batch; ++b) {
    for (int f = 0; f < fields; ++f) {
      for (int d = 0; d < dim; ++d) {
        expected[index[b * fields + f] * dim + d] +=
            upstream[b * out_cols + f * dim + d];
      }
    }
  }
  for (int i = 0; i < rows * dim; ++i) ASSERT_NEAR(grads[i], expected[i], 1e-5);
}

TEST_F(CpuBackendTest, ScatterReduceBroadcastsWithZeroStride) {
  const std::vector<int32_t> index = {0, 1, 1, 1};  // two examples, two fields
  const std::vector<float> dlogits = {0.25f, -1.0f};
  std::vector<float> grads(2);
  ASSERT_TRUE(backend_
                  ->ScatterReduce(dlogits.data(), 1, 0, index.data(), 2, 2, 1,
                                  2, grads.data())
                  .ok());
  EXPECT_FLOAT_EQ(grads[0], 0.25f);
  EXPECT_FLOAT_EQ(grads[1], 0.25f - 2.0f);
}

TEST_F(CpuBackendTest, EmptyBatchIsANoOp) {
  std::vector<float> grads(6, 5.0f);
  ASSERT_TRUE(
      backend_->ScatterReduce(nullptr, 3, 3, nullptr, 0, 2, 3, 2, grads.data())
          .ok());
  EXPECT_EQ(grads, std::vector<float>(6, 0.0f));
  float loss = -1.0f;
  ASSERT_TRUE(
      backend_
          ->SigmoidCrossEntropy(nullptr, nullptr, 0, nullptr, nullptr, &loss)
          .ok());
  EXPECT_EQ(loss, 0.0f);
}

TEST_F(CpuBackendTest, FmForwardEqualsSumOfPairwiseDotProducts) {
  const int batch = 3, fields = 5, dim = 7;
  std::vector<float> x = Random(batch * fields * dim, &rng_);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(
      backend_
          ->FmForward(x.data(), fields * dim, batch, fields, dim, logits.data())
          .ok());
  for (int b = 0; b < batch; ++b) {
    double pairwise = 0;
    for (int i = 0; i < fields; ++i) {
      for (int j = i + 1; j < fields; ++j) {
        for (int d = 0; d < dim; ++d) {
          pairwise += x[b * fields * dim + i * dim + d] *
                      x[b * fields * dim + j * dim + d];
        }
      }
    }
    EXPECT_NEAR(logits[b], b + 1.0 + pairwise, 1e-4);
  }
}

TEST_F(CpuBackendTest, SigmoidCrossEntropyIsStableForLargeLogits) {
  const std::vector<float> logits = {0.0f, 100.0f, -100.0f, 2.0f};
  const std::vector<float> labels = {1.0f, 1.0f, 1.0f, 0.0f};
  std::vector<float> probabilities(4), dlogits(4);
  float loss = 0;
  ASSERT_TRUE(backend_
                  ->SigmoidCrossEntropy(logits.data(), labels.data(), 4,
                                        probabilities.data(), dlogits.data(),
                                        &loss)
                  .ok());
  // log 2 + ~0 + 100 + log(1 + e^2)
  EXPECT_NEAR(loss, std::log(2.0) + 100.0 + std::log1p(std::exp(2.0)), 1e-3);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_FLOAT_EQ(dlogits[0], (0.5f - 1.0f) / 4);
  EXPECT_NEAR(probabilities[3], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST_F(CpuBackendTest, BiasReluColumnSumsAndCopyColumns) {
  std::vector<float> x = {-1, 2, 3, -4};
  const std::vector<float> bias = {0.5f, 1.0f};
  ASSERT_TRUE(backend_->BiasActivation(x.data(), bias.data(), 2, 2, true).ok());
  EXPECT_EQ(x, (std::vector<float>{0.0f, 3.0f, 3.5f, 0.0f}));
  std::vector<float> dy = {1, 1, 1, 1};
  ASSERT_TRUE(backend_->ReluBackward(x.data(), dy.data(), 4).ok());
  EXPECT_EQ(dy, (std::vector<float>{0, 1, 1, 0}));
  std::vector<float> sums(2);
  ASSERT_TRUE(backend_->ColumnSums(x.data(), 2, 2, sums.data()).ok());
  EXPECT_EQ(sums, (std::vector<float>{3.5f, 3.0f}));
  std::vector<float> dst(2 * 3, 0.0f);
  ASSERT_TRUE(backend_->CopyColumns(x.data(), 2, 2, dst.data(), 3, 1).ok());
  EXPECT_EQ(dst, (std::vector<float>{0, 0, 3, 0, 3.5f, 0}));
}

}  // namespace
}  // namespace ps::kernels
