// The CPU backend against naive references written out here, on awkward
// sizes (not multiples of 8, empty batches, duplicate keys).

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/gemm_team.h"

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

// One GEMM's operands, stored with padded rows (the padding NaN, so that a
// read past a row's end shows), and its expected results.
struct GemmCase {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> a, b, c;

  GemmCase(bool ta, bool tb, int m, int n, int k, int padding, float alpha,
           float beta, std::mt19937* rng)
      : ta(ta), tb(tb), m(m), n(n), k(k), alpha(alpha), beta(beta) {
    const float nan = std::nanf("");
    lda = (ta ? m : k) + padding;
    ldb = (tb ? k : n) + padding;
    ldc = n + padding;
    a = Pad(Random((ta ? k : m) * (ta ? m : k), rng), ta ? m : k, lda, nan);
    b = Pad(Random((tb ? n : k) * (tb ? k : n), rng), tb ? k : n, ldb, nan);
    // C's padding must survive; with beta 0, C itself must not be read.
    c = Pad(beta == 0.0f ? std::vector<float>(m * n, nan) : Random(m * n, rng),
            n, ldc, -5.0f);
  }

  static std::vector<float> Pad(const std::vector<float>& packed, int cols,
                                int stride, float fill) {
    const int rows = static_cast<int>(packed.size()) / cols;
    std::vector<float> padded(static_cast<size_t>(rows) * stride, fill);
    for (int r = 0; r < rows; ++r) {
      std::copy(packed.begin() + r * cols, packed.begin() + (r + 1) * cols,
                padded.begin() + r * stride);
    }
    return padded;
  }

  // alpha * op(A) op(B) + beta * C in double, each input through `to_input`.
  std::vector<float> Expected(float (*to_input)(float)) const {
    std::vector<float> expected = c;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int p = 0; p < k; ++p) {
          sum += static_cast<double>(
                     to_input(ta ? a[p * lda + i] : a[i * lda + p])) *
                 to_input(tb ? b[j * ldb + p] : b[p * ldb + j]);
        }
        float& out = expected[i * ldc + j];
        out = static_cast<float>(alpha * sum +
                                 (beta == 0.0f ? 0.0 : double{beta} * out));
      }
    }
    return expected;
  }

  // Runs the GEMM on `backend` into a copy of C.
  std::vector<float> Run(Backend* backend) const {
    std::vector<float> out = c;
    const Status status = backend->Gemm(ta, tb, m, n, k, alpha, a.data(), lda,
                                        b.data(), ldb, beta, out.data(), ldc);
    EXPECT_TRUE(status.ok()) << status.message();
    return out;
  }
};

float Exact(float x) { return x; }

// Rounds to the nearest bfloat16, ties to even (finite inputs).
float ToBfloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

std::unique_ptr<Backend> Bf16Backend() {
  CpuOptions options;
  options.precision = GemmPrecision::kBf16;
  std::unique_ptr<Backend> backend;
  const Status created = NewCpuBackend(options, &backend);
  EXPECT_TRUE(created.ok()) << created.message();
  return backend;
}

TEST_F(CpuBackendTest, SoftmaxIsStableAndItsBackwardIsItsDerivative) {
  // Rows of 3: one with large inputs that exp() alone would overflow.
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 1000.0f, 1000.0f, 999.0f};
  std::vector<float> y(6);
  ASSERT_TRUE(backend_->Softmax(x.data(), 2, 3, y.data()).ok());
  const double sum = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(y[0], std::exp(1.0) / sum, 1e-6);
  EXPECT_NEAR(y[2], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(y[3], 1.0 / (2.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[3] + y[4] + y[5], 1.0, 1e-6);
  // d/dx of sum_c dy[c] * softmax(x)[c], by central differences.
  const std::vector<float> dy = Random(6, &rng_);
  std::vector<float> dx(6);
  ASSERT_TRUE(
      backend_->SoftmaxBackward(y.data(), dy.data(), 2, 3, dx.data()).ok());
  const auto objective = [&](const std::vector<float>& at) {
    std::vector<float> out(6);
    EXPECT_TRUE(backend_->Softmax(at.data(), 2, 3, out.data()).ok());
    double total = 0;
    for (int i = 0; i < 6; ++i) total += dy[i] * out[i];
    return total;
  };
  for (int i = 0; i < 6; ++i) {
    std::vector<float> plus = x, minus = x;
    plus[i] += 1e-2f;
    minus[i] -= 1e-2f;
    EXPECT_NEAR(dx[i], (objective(plus) - objective(minus)) / 2e-2, 2e-3) << i;
  }
}

TEST(CpuBackendOptionsTest, Bf16GemmRoundsItsInputsAndAccumulatesInFp32) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::unique_ptr<Backend> backend = Bf16Backend();
  std::mt19937 rng(99);
  // Every transpose, packed and padded rows, and for one shape several
  // alpha/beta pairs in turn (each needs its own matmul).
  const std::vector<std::pair<float, float>> scalings = {
      {0.5f, 2.0f}, {1.0f, 0.0f}, {1.0f, 2.0f}, {0.5f, 0.0f}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int padding : {0, 3}) {
        for (const auto& [alpha, beta] : scalings) {
          const GemmCase gemm(ta, tb, 37, 19, 45, padding, alpha, beta, &rng);
          const std::vector<float> rounded = gemm.Expected(ToBfloat16);
          const std::vector<float> exact = gemm.Expected(Exact);
          const std::vector<float> c = gemm.Run(backend.get());
          double farthest_from_exact = 0;
          for (size_t i = 0; i < c.size(); ++i) {
            if (i % gemm.ldc >= static_cast<size_t>(gemm.n)) {
              ASSERT_EQ(c[i], -5.0f) << "padding of C written at " << i;
              continue;
            }
            ASSERT_NEAR(c[i], rounded[i], 1e-4)
                << ta << tb << " padding " << padding << " alpha " << alpha
                << " beta " << beta << " at " << i;
            farthest_from_exact = std::max(farthest_from_exact,
                                           std::fabs(double{c[i]} - exact[i]));
          }
          // The rounding shows: FP32 inputs would be within ~1e-6.
          EXPECT_GT(farthest_from_exact, 1e-3) << ta << tb;
        }
      }
    }
  }
}

TEST(CpuBackendOptionsTest, Bf16GemmRoundsEveryInputToNearestEven) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::unique_ptr<Backend> backend = Bf16Backend();
  // op(A) times the identity is op(A) rounded, bit for bit: each output is
  // one rounded input times 1. Rows of 37 (and 17) run the rounding's vector
  // loop (16 floats at a time) and its tail; ties go to the even neighbour.
  const int m = 17, k = 37;  // at least 16 each, or it stays FP32
  std::mt19937 rng(5);
  std::vector<float> a = Random(m * k, &rng, 3.0f);
  const float ulp = std::ldexp(1.0f, -8);  // half a bfloat16 step at 1
  const std::vector<float> ties = {1.0f + ulp,        1.0f + 3 * ulp,
                                   -1.0f - ulp,       -1.0f - 3 * ulp,
                                   1.0f + 1.5f * ulp, 3.0e38f};
  for (size_t i = 0; i < ties.size() * 7; ++i)
    a[(i * 31) % a.size()] = ties[i % ties.size()];
  std::vector<float> identity(k * k, 0.0f);
  for (int i = 0; i < k; ++i) identity[i * k + i] = 1.0f;
  // A larger GEMM first: the smaller ones below reuse (the start of) its
  // bfloat16 copies' buffers.
  const GemmCase larger(false, false, 64, 48, 80, 0, 1.0f, 0.0f, &rng);
  larger.Run(backend.get());
  for (bool transpose_a : {false, true}) {
    std::vector<float> c(m * k, -5.0f);
    ASSERT_TRUE(backend
                    ->Gemm(transpose_a, false, m, k, k, 1.0f, a.data(),
                           transpose_a ? m : k, identity.data(), k, 0.0f,
                           c.data(), k)
                    .ok());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < k; ++j) {
        const float input = transpose_a ? a[j * m + i] : a[i * k + j];
        ASSERT_EQ(c[i * k + j], ToBfloat16(input))
            << "input " << input << " at " << i << "," << j;
      }
    }
  }
  EXPECT_EQ(ToBfloat16(1.0f + ulp), 1.0f);
  EXPECT_EQ(ToBfloat16(1.0f + 3 * ulp), 1.0f + 4 * ulp);
}

TEST(CpuBackendOptionsTest, Bf16LeavesThinGemmsInFp32) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::unique_ptr<Backend> backend = Bf16Backend();
  std::mt19937 rng(7);
  const GemmCase logit(false, false, 64, 1, 40, 0, 0.5f, 2.0f, &rng);
  const std::vector<float> exact = logit.Expected(Exact);
  const std::vector<float> c = logit.Run(backend.get());
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], exact[i], 1e-5) << i;
}

TEST(CpuBackendOptionsTest, Fp32GemmHonoursStridesAndScalings) {
  std::unique_ptr<Backend> backend = NewCpuBackend();
  std::mt19937 rng(11);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const auto& [alpha, beta] :
           std::vector<std::pair<float, float>>{{1.0f, 0.0f}, {0.5f, 2.0f}}) {
        const GemmCase gemm(ta, tb, 29, 17, 33, 3, alpha, beta, &rng);
        const std::vector<float> exact = gemm.Expected(Exact);
        const std::vector<float> c = gemm.Run(backend.get());
        for (size_t i = 0; i < c.size(); ++i) {
          ASSERT_NEAR(c[i], exact[i], 1e-4) << ta << tb << " at " << i;
        }
      }
    }
  }
}

std::unique_ptr<Backend> BackendWith(int threads, GemmPrecision precision) {
  CpuOptions options;
  options.threads = threads;
  options.precision = precision;
  std::unique_ptr<Backend> backend;
  const Status created = NewCpuBackend(options, &backend);
  EXPECT_TRUE(created.ok()) << created.message();
  return backend;
}

// Shapes a team splits (kernels/gemm_team.h): by rows, by columns, neither
// a multiple of 16.
struct SplitShape {
  int m, n, k;
};
constexpr SplitShape kSplitShapes[] = {{333, 70, 200}, {70, 333, 200}};

TEST(CpuBackendOptionsTest, TheTeamShapesAreSplit) {
  for (const SplitShape& shape : kSplitShapes) {
    const GemmSplit split = SplitGemm(shape.m, shape.n, shape.k, 2);
    EXPECT_GT(split.count, 1) << shape.m << "x" << shape.n << "x" << shape.k;
    EXPECT_NE((split.by_rows ? shape.m : shape.n) % split.size, 0)
        << "a shorter last block too";
  }
}

TEST(CpuBackendOptionsTest, TeamGemmsMatchTheProductForEveryTranspose) {
  std::mt19937 rng(5);
  for (int threads : {2, 3}) {
    std::unique_ptr<Backend> backend =
        BackendWith(threads, GemmPrecision::kFp32);
    for (const SplitShape& shape : kSplitShapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (const auto& [alpha, beta] : std::vector<std::pair<float, float>>{
                   {1.0f, 0.0f}, {0.5f, 2.0f}}) {
            const GemmCase gemm(ta, tb, shape.m, shape.n, shape.k, 3, alpha,
                                beta, &rng);
            const std::vector<float> exact = gemm.Expected(Exact);
            const std::vector<float> c = gemm.Run(backend.get());
            for (size_t i = 0; i < c.size(); ++i) {
              ASSERT_NEAR(c[i], exact[i], 1e-4)
                  << threads << " threads, " << shape.m << "x" << shape.n
                  << " ta " << ta << " tb " << tb << " at " << i;
            }
          }
        }
      }
    }
  }
}

// A large gather or scatter is shared by the GEMM threads (by batch rows,
// by runs of destination rows): the same bits as one thread, many keys
// repeated within the batch and across runs of rows, for the usual dim and
// an odd one.
TEST(CpuBackendOptionsTest, TeamGathersAndScattersTheBitsOfOneThread) {
  std::mt19937 rng(11);
  for (const int dim : {16, 3}) {
    const int batch = 4099, fields = 39, rows = 5000;
    const int out_cols = fields * dim + 5;
    std::uniform_int_distribution<int32_t> pick(0, rows - 1);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<int32_t> index(static_cast<size_t>(batch) * fields);
    for (int32_t& row : index) row = pick(rng);
    std::vector<float> table(static_cast<size_t>(rows) * dim);
    for (float& x : table) x = value(rng);
    std::vector<float> upstream(static_cast<size_t>(batch) * out_cols);
    for (float& x : upstream) x = value(rng);
    std::vector<float> base_grads(table.size());
    for (float& x : base_grads) x = value(rng);

    std::vector<std::vector<float>> gathered, scattered, reduced;
    for (const int threads : {1, 2, 3}) {
      std::unique_ptr<Backend> backend =
          BackendWith(threads, GemmPrecision::kFp32);
      std::vector<float> out(upstream.size(), -7.0f);
      ASSERT_TRUE(backend
                      ->GatherConcat(table.data(), index.data(), batch, fields,
                                     dim, out.data(), out_cols)
                      .ok());
      gathered.push_back(out);
      std::vector<float> grads = base_grads;
      ASSERT_TRUE(backend
                      ->ScatterAdd(upstream.data(), out_cols, dim, index.data(),
                                   batch, fields, dim, grads.data())
                      .ok());
      scattered.push_back(grads);
      ASSERT_TRUE(backend
                      ->ScatterReduce(upstream.data(), out_cols, dim,
                                      index.data(), batch, fields, dim, rows,
                                      grads.data())
                      .ok());
      reduced.push_back(grads);
    }
    // One thread's gather is the rows themselves.
    for (int b = 0; b < batch; b += 97) {
      for (int f = 0; f < fields; ++f) {
        for (int d = 0; d < dim; ++d) {
          ASSERT_EQ(
              gathered[0][static_cast<size_t>(b) * out_cols + f * dim + d],
              table[static_cast<size_t>(index[b * fields + f]) * dim + d]);
        }
      }
    }
    EXPECT_NE(scattered[0], base_grads);
    if (dim == 16) {
      // The wide weights' scatter: one upstream value per example broadcast
      // to each field's row (a stride of 0), rows of one float.
      std::vector<float> wide_grads(rows, 0.0f);
      for (const int threads : {1, 2}) {
        std::unique_ptr<Backend> backend =
            BackendWith(threads, GemmPrecision::kFp32);
        std::vector<float> grads(rows, 5.0f);
        ASSERT_TRUE(backend
                        ->ScatterReduce(upstream.data(), out_cols, 0,
                                        index.data(), batch, fields, 1, rows,
                                        grads.data())
                        .ok());
        if (threads == 1) {
          wide_grads = grads;
        } else {
          EXPECT_EQ(grads, wide_grads);
        }
      }
      double total = 0;
      for (float g : wide_grads) total += g;
      double expected = 0;
      for (int b = 0; b < batch; ++b)
        expected +=
            double{upstream[static_cast<size_t>(b) * out_cols]} * fields;
      EXPECT_NEAR(total, expected, 1e-2);
    }
    for (size_t t = 1; t < gathered.size(); ++t) {
      EXPECT_EQ(gathered[t], gathered[0]) << "dim " << dim << ", team " << t;
      EXPECT_EQ(scattered[t], scattered[0]) << "dim " << dim << ", team " << t;
      EXPECT_EQ(reduced[t], reduced[0]) << "dim " << dim << ", team " << t;
    }
  }
}

TEST(CpuBackendOptionsTest, TeamBf16GemmsMatchTheRoundedProduct) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(6);
  std::unique_ptr<Backend> backend = BackendWith(2, GemmPrecision::kBf16);
  for (const SplitShape& shape : kSplitShapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const GemmCase gemm(ta, tb, shape.m, shape.n, shape.k, 3, 0.5f, 2.0f,
                            &rng);
        const std::vector<float> rounded = gemm.Expected(ToBfloat16);
        const std::vector<float> c = gemm.Run(backend.get());
        for (size_t i = 0; i < c.size(); ++i) {
          ASSERT_NEAR(c[i], rounded[i], 1e-4)
              << shape.m << "x" << shape.n << " ta " << ta << " tb " << tb
              << " at " << i;
        }
      }
    }
  }
}

// A training step's three GEMMs of one layer over an activation x (m x k),
// weights w (k x n) and an upstream gradient g (m x n), stored with padded
// rows: y = x w, dw = x^T g, dx = g w^T. Each matrix is read twice, in
// two roles.
struct LayerGemms {
  int m, n, k;
  std::vector<float> x, w, g;
  static constexpr int kPadding = 3;
  LayerGemms(int m, int n, int k, std::mt19937* rng)
      : m(m),
        n(n),
        k(k),
        x(GemmCase::Pad(Random(m * k, rng), k, k + kPadding, 0.0f)),
        w(GemmCase::Pad(Random(k * n, rng), n, n + kPadding, 0.0f)),
        g(GemmCase::Pad(Random(m * n, rng), n, n + kPadding, 0.0f)) {}

  // y, dw and dx, in that order.
  std::vector<std::vector<float>> Run(Backend* backend) const {
    const int ldx = k + kPadding, ldw = n + kPadding, ldg = n + kPadding;
    std::vector<float> y(m * n), dw(k * n), dx(m * k);
    EXPECT_TRUE(backend
                    ->Gemm(false, false, m, n, k, 1.0f, x.data(), ldx, w.data(),
                           ldw, 0.0f, y.data(), n)
                    .ok());
    EXPECT_TRUE(backend
                    ->Gemm(true, false, k, n, m, 1.0f, x.data(), ldx, g.data(),
                           ldg, 0.0f, dw.data(), n)
                    .ok());
    EXPECT_TRUE(backend
                    ->Gemm(false, true, m, k, n, 1.0f, g.data(), ldg, w.data(),
                           ldw, 0.0f, dx.data(), k)
                    .ok());
    return {y, dw, dx};
  }
};

TEST(CpuBackendOptionsTest, StableInputsGiveTheBitsOfInputsRoundedEachTime) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(8);
  // Split by rows and by columns on a team (each operand cut along its
  // stored rows in one GEMM and across them in another), and one block.
  const SplitShape shapes[] = {{333, 70, 200}, {70, 333, 200}, {40, 24, 35}};
  for (int threads : {1, 2}) {
    for (const SplitShape& shape : shapes) {
      const LayerGemms layer(shape.m, shape.n, shape.k, &rng);
      const std::vector<std::vector<float>> rounded_each_time =
          layer.Run(BackendWith(threads, GemmPrecision::kBf16).get());
      std::unique_ptr<Backend> backend =
          BackendWith(threads, GemmPrecision::kBf16);
      for (int step = 0; step < 2; ++step) {
        for (const std::vector<float>* stable : {&layer.x, &layer.w, &layer.g})
          backend->DeclareStableInput(stable->data(), stable->size());
        // The second run of the same promises finds every copy kept.
        for (int run = 0; run < 2; ++run) {
          EXPECT_EQ(layer.Run(backend.get()), rounded_each_time)
              << threads << " threads, " << shape.m << "x" << shape.n << "x"
              << shape.k << ", step " << step << ", run " << run;
        }
        backend->ForgetStableInputs();
      }
    }
  }
}

TEST(CpuBackendOptionsTest, AStableInputIsRoundedOnceUntilForgotten) {
  if (!CpuHasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(9);
  LayerGemms layer(40, 24, 35, &rng);
  std::unique_ptr<Backend> backend = Bf16Backend();
  const std::vector<std::vector<float>> before = layer.Run(backend.get());
  // Exactly the floats x's rows span (its last row's padding left out),
  // and all but the last float of g's: g is not within a stable range.
  const size_t ldx = layer.k + LayerGemms::kPadding;
  const size_t ldg = layer.n + LayerGemms::kPadding;
  backend->DeclareStableInput(layer.x.data(), (layer.m - 1) * ldx + layer.k);
  backend->DeclareStableInput(layer.g.data(),
                              (layer.m - 1) * ldg + layer.n - 1);
  EXPECT_EQ(layer.Run(backend.get()), before);
  // Broken promises, to see which copies are kept: x's is (y and dw stay
  // what they were), g's is not (dw and dx change).
  for (float& value : layer.x) value *= 3.0f;
  std::vector<std::vector<float>> kept = layer.Run(backend.get());
  EXPECT_EQ(kept[0], before[0]);
  EXPECT_EQ(kept[1], before[1]);
  for (float& value : layer.g) value *= 3.0f;
  kept = layer.Run(backend.get());
  EXPECT_EQ(kept[0], before[0]);
  EXPECT_NE(kept[1], before[1]);
  EXPECT_NE(kept[2], before[2]);
  EXPECT_EQ(kept[2], layer.Run(Bf16Backend().get())[2]);
  // Forgotten: every input is read again.
  backend->ForgetStableInputs();
  const std::vector<std::vector<float>> after = layer.Run(backend.get());
  EXPECT_EQ(after, layer.Run(Bf16Backend().get()));
  EXPECT_NE(after[0], before[0]);
  // The next step's promises, over the same memory changed in between,
  // keep copies of what it holds now.
  for (float& value : layer.w) value *= 3.0f;
  for (const std::vector<float>* stable : {&layer.x, &layer.w, &layer.g})
    backend->DeclareStableInput(stable->data(), stable->size());
  EXPECT_EQ(layer.Run(backend.get()), layer.Run(Bf16Backend().get()));
}

TEST(CpuBackendOptionsTest, OneDnnRunsOnTheCallingThreadAlone) {
  std::unique_ptr<Backend> backend = BackendWith(2, GemmPrecision::kFp32);
  std::mt19937 rng(7);
  const GemmCase gemm(false, true, 300, 70, 90, 0, 0.5f, 2.0f, &rng);
  const std::vector<float> exact = gemm.Expected(Exact);
  auto check = [&] {
    omp_set_num_threads(4);
    const std::vector<float> c = gemm.Run(backend.get());
    for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], exact[i], 1e-4);
    // No OpenMP team of its own: it would split each GEMM evenly, and
    // spin, beside the team's threads.
    EXPECT_EQ(omp_get_max_threads(), 1);
  };
  check();
  // A backend may move between threads.
  std::thread(check).join();
  check();
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
  ASSERT_TRUE(backend_
                  ->SigmoidCrossEntropy(nullptr, nullptr, nullptr, 0, nullptr,
                                        nullptr, &loss)
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
                  ->SigmoidCrossEntropy(logits.data(), labels.data(), nullptr,
                                        4, probabilities.data(), dlogits.data(),
                                        &loss)
                  .ok());
  // log 2 + ~0 + 100 + log(1 + e^2)
  EXPECT_NEAR(loss, std::log(2.0) + 100.0 + std::log1p(std::exp(2.0)), 1e-3);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_FLOAT_EQ(dlogits[0], (0.5f - 1.0f) / 4);
  EXPECT_NEAR(probabilities[3], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

// A scale multiplies each example's loss and gradient; 0 leaves it out.
TEST_F(CpuBackendTest, SigmoidCrossEntropyScalesEachExample) {
  const std::vector<float> logits = {0.5f, -1.0f, 3.0f, -2.0f};
  const std::vector<float> labels = {1.0f, 0.0f, 0.0f, 1.0f};
  const std::vector<float> scale = {2.0f, 0.0f, 0.5f, 1.0f};
  std::vector<float> probabilities(4), dlogits(4), scaled_dlogits(4);
  float loss = 0, scaled_loss = 0;
  ASSERT_TRUE(backend_
                  ->SigmoidCrossEntropy(logits.data(), labels.data(), nullptr,
                                        4, probabilities.data(), dlogits.data(),
                                        &loss)
                  .ok());
  ASSERT_TRUE(backend_
                  ->SigmoidCrossEntropy(logits.data(), labels.data(),
                                        scale.data(), 4, probabilities.data(),
                                        scaled_dlogits.data(), &scaled_loss)
                  .ok());
  double expected_loss = 0;
  for (int b = 0; b < 4; ++b) {
    const double p = 1.0 / (1.0 + std::exp(-logits[b]));
    const double cross_entropy =
        -(labels[b] * std::log(p) + (1 - labels[b]) * std::log(1 - p));
    expected_loss += scale[b] * cross_entropy;
    EXPECT_NEAR(scaled_dlogits[b], scale[b] * (p - labels[b]) / 4, 1e-6) << b;
    EXPECT_NEAR(scaled_dlogits[b], scale[b] * dlogits[b], 1e-6) << b;
  }
  EXPECT_NEAR(scaled_loss, expected_loss, 1e-5);
  EXPECT_EQ(scaled_dlogits[1], 0.0f);
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

// The floats' bits, so that NaNs compare equal to themselves and -0.0 to
// itself only.
std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// Random values with a NaN, an infinity and zeros of both signs among them.
std::vector<float> RandomWithSpecials(size_t count, std::mt19937* rng) {
  std::vector<float> values = Random(count, rng);
  const float specials[] = {std::nanf(""), -0.0f, 0.0f,
                            std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < 4 && 7 * i < count; ++i) values[7 * i] = specials[i];
  return values;
}

// Rows longer than a vector (37 and 45 floats), so that the vectorized
// loops' bodies and tails (of 16, then 8, then single floats) all run; the
// references add in the same order, so the results match bit for bit,
// NaNs and signed zeros included.
TEST_F(CpuBackendTest, ElementwiseLoopsMatchScalarLoopsOnLongRows) {
  const int rows = 5;
  for (int cols : {37, 45}) {
    for (bool relu : {false, true}) {
      std::vector<float> x = RandomWithSpecials(rows * cols, &rng_);
      std::vector<float> bias = Random(cols, &rng_);
      // Row 1 starts with -0.0 + 0.0 (0.0) and -0.0 + -0.0 (-0.0, which
      // ReLU keeps as it is).
      x[cols] = x[cols + 1] = -0.0f;
      bias[0] = 0.0f;
      bias[1] = -0.0f;
      std::vector<float> expected = x;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const float sum = expected[r * cols + c] + bias[c];
          expected[r * cols + c] = relu && sum < 0.0f ? 0.0f : sum;
        }
      }
      ASSERT_TRUE(
          backend_->BiasActivation(x.data(), bias.data(), rows, cols, relu)
              .ok());
      ASSERT_EQ(Bits(x), Bits(expected)) << "cols " << cols << " relu " << relu;
    }
    const std::vector<float> y = RandomWithSpecials(rows * cols, &rng_);
    std::vector<float> dy = RandomWithSpecials(rows * cols, &rng_);
    std::vector<float> masked = dy;
    for (size_t i = 0; i < y.size(); ++i) {
      if (!(y[i] > 0.0f)) masked[i] = 0.0f;
    }
    ASSERT_TRUE(backend_->ReluBackward(y.data(), dy.data(), dy.size()).ok());
    EXPECT_EQ(Bits(dy), Bits(masked)) << cols;
    const std::vector<float> z = Random(rows * cols, &rng_);
    std::vector<float> sums(cols, 99.0f), expected_sums(cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) expected_sums[c] += z[r * cols + c];
    }
    ASSERT_TRUE(backend_->ColumnSums(z.data(), rows, cols, sums.data()).ok());
    EXPECT_EQ(Bits(sums), Bits(expected_sums)) << cols;
    std::vector<float> total = Random(rows * cols, &rng_);
    std::vector<float> expected_total = total;
    for (size_t i = 0; i < total.size(); ++i) expected_total[i] += z[i];
    ASSERT_TRUE(backend_->Add(z.data(), total.data(), total.size()).ok());
    EXPECT_EQ(Bits(total), Bits(expected_total)) << cols;
    // Columns 3 .. cols - 2 of z added into rows of cols - 4.
    const int narrow_cols = cols - 4;
    std::vector<float> narrow = Random(rows * narrow_cols, &rng_);
    std::vector<float> expected_narrow = narrow;
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < narrow_cols; ++c)
        expected_narrow[r * narrow_cols + c] += z[r * cols + 3 + c];
    }
    ASSERT_TRUE(backend_
                    ->AccumulateColumns(z.data(), rows, cols, 3, narrow.data(),
                                        narrow_cols)
                    .ok());
    EXPECT_EQ(Bits(narrow), Bits(expected_narrow)) << cols;
  }
}

// Dimension 16 takes a copy of known size, others memcpy: both, with rows
// of the output wider than the fields, and repeated keys.
TEST_F(CpuBackendTest, GatherAndScatterEveryDimension) {
  const int batch = 9, fields = 3, table_rows = 7;
  for (int dim : {16, 19, 1}) {
    const int out_cols = fields * dim + 2;
    std::vector<int32_t> index(batch * fields);
    for (size_t i = 0; i < index.size(); ++i)
      index[i] = static_cast<int32_t>((i * 5) % table_rows);
    // One example repeats a key in every field, another in two.
    index[0] = index[1] = index[2] = 4;
    index[9] = index[11] = 6;
    const std::vector<float> table = Random(table_rows * dim, &rng_);
    std::vector<float> out(batch * out_cols, -7.0f);
    std::vector<float> expected = out;
    for (int b = 0; b < batch; ++b) {
      for (int f = 0; f < fields; ++f) {
        for (int d = 0; d < dim; ++d) {
          expected[b * out_cols + f * dim + d] =
              table[index[b * fields + f] * dim + d];
        }
      }
    }
    ASSERT_TRUE(backend_
                    ->GatherConcat(table.data(), index.data(), batch, fields,
                                   dim, out.data(), out_cols)
                    .ok());
    ASSERT_EQ(out, expected) << "dim " << dim;
    const std::vector<float> upstream = Random(batch * out_cols, &rng_);
    std::vector<float> grads = Random(table_rows * dim, &rng_);
    std::vector<float> expected_grads = grads;
    for (int b = 0; b < batch; ++b) {
      for (int f = 0; f < fields; ++f) {
        for (int d = 0; d < dim; ++d) {
          expected_grads[index[b * fields + f] * dim + d] +=
              upstream[b * out_cols + f * dim + d];
        }
      }
    }
    ASSERT_TRUE(backend_
                    ->ScatterAdd(upstream.data(), out_cols, dim, index.data(),
                                 batch, fields, dim, grads.data())
                    .ok());
    ASSERT_EQ(grads, expected_grads) << "dim " << dim;
  }
}

}  // namespace
}  // namespace ps::kernels
