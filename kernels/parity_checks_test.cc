// The parity harness must see a wrong gradient: a CPU backend with a
// planted bug (gradients zeroed, doubled, a row dropped, a GEMM reading its
// input transposed) against the plain CPU backend fails the model-level
// training-step checks, not only the kernel checks.

#include "kernels/parity_checks.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace ps::kernels {
namespace {

enum class Bug {
  kEmbeddingGradientsZeroed,
  kEmbeddingGradientsDoubled,
  kOneGradientRowDropped,
  kGemmReadsATransposed,
};

// The CPU backend with `bug` planted; every other call is forwarded.
class BuggyBackend : public Backend {
 public:
  explicit BuggyBackend(Bug bug) : bug_(bug), cpu_(NewCpuBackend()) {}

  const char* name() const override { return "buggy cpu"; }
  Status Allocate(size_t bytes, void** pointer) override {
    return cpu_->Allocate(bytes, pointer);
  }
  void Free(void* pointer) override { cpu_->Free(pointer); }
  Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    return cpu_->CopyToDevice(device, host, bytes);
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    return cpu_->CopyToHost(host, device, bytes);
  }
  Status Fill(float* x, size_t count, float value) override {
    return cpu_->Fill(x, count, value);
  }
  Status Synchronize() override { return cpu_->Synchronize(); }
  Status Gemm(bool transpose_a, bool transpose_b, int m, int n, int k,
              float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) override {
    // Read A's m * k floats as if stored the other way round (only where A
    // is packed tightly, so that no read leaves it).
    if (bug_ == Bug::kGemmReadsATransposed && m > 1 && k > 1 &&
        lda == (transpose_a ? m : k)) {
      transpose_a = !transpose_a;
      lda = transpose_a ? m : k;
    }
    return cpu_->Gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc);
  }
  Status BiasActivation(float* x, const float* bias, int rows, int cols,
                        bool relu) override {
    return cpu_->BiasActivation(x, bias, rows, cols, relu);
  }
  Status ReluBackward(const float* y, float* dy, size_t count) override {
    return cpu_->ReluBackward(y, dy, count);
  }
  Status ColumnSums(const float* x, int rows, int cols, float* sums) override {
    return cpu_->ColumnSums(x, rows, cols, sums);
  }
  Status CopyColumns(const float* src, int rows, int src_cols, float* dst,
                     int dst_cols, int dst_offset) override {
    return cpu_->CopyColumns(src, rows, src_cols, dst, dst_cols, dst_offset);
  }
  Status GatherConcat(const float* rows, const int32_t* index, int batch,
                      int fields, int dim, float* out, int out_cols) override {
    return cpu_->GatherConcat(rows, index, batch, fields, dim, out, out_cols);
  }
  Status GatherSum(const float* rows, const int32_t* index, int batch,
                   int fields, float* out) override {
    return cpu_->GatherSum(rows, index, batch, fields, out);
  }
  Status ScatterReduce(const float* in, int in_cols, int field_stride,
                       const int32_t* index, int batch, int fields, int dim,
                       int num_rows, float* row_grads) override {
    KERNELS_RETURN_IF_ERROR(cpu_->ScatterReduce(in, in_cols, field_stride,
                                                index, batch, fields, dim,
                                                num_rows, row_grads));
    // The embeddings' gradients (rows of dim > 1); the CPU backend's
    // memory is the host's.
    if (dim <= 1 || num_rows == 0) return Status();
    const size_t floats = static_cast<size_t>(num_rows) * dim;
    switch (bug_) {
      case Bug::kEmbeddingGradientsZeroed:
        std::memset(row_grads, 0, floats * sizeof(float));
        break;
      case Bug::kEmbeddingGradientsDoubled:
        for (size_t i = 0; i < floats; ++i) row_grads[i] *= 2;
        break;
      case Bug::kOneGradientRowDropped:
        std::memset(row_grads + (num_rows - 1) * static_cast<size_t>(dim), 0,
                    dim * sizeof(float));
        break;
      default:
        break;
    }
    return Status();
  }
  Status FmForward(const float* x, int x_cols, int batch, int fields, int dim,
                   float* logits) override {
    return cpu_->FmForward(x, x_cols, batch, fields, dim, logits);
  }
  Status FmBackward(const float* x, const float* dlogits, int x_cols, int batch,
                    int fields, int dim, float* dx) override {
    return cpu_->FmBackward(x, dlogits, x_cols, batch, fields, dim, dx);
  }
  Status SigmoidCrossEntropy(const float* logits, const float* labels,
                             int batch, float* probabilities, float* dlogits,
                             float* loss_sum) override {
    return cpu_->SigmoidCrossEntropy(logits, labels, batch, probabilities,
                                     dlogits, loss_sum);
  }

 private:
  const Bug bug_;
  std::unique_ptr<Backend> cpu_;
};

// The training-step checks of the models with embeddings, at the batch
// sizes where an embedding gradient is 3e-4 (61) and 3e-5 (1000).
std::vector<ParityResult> DeepModelSteps(const std::vector<ParityResult>& all) {
  std::vector<ParityResult> steps;
  for (const ParityResult& result : all) {
    for (const char* name :
         {"train_step_wide_deep_b61", "train_step_wide_deep_b1000",
          "train_step_deepfm_b61", "train_step_deepfm_b1000",
          "staged_steps_wide_deep_b61", "staged_steps_wide_deep_b1000",
          "staged_steps_deepfm_b61", "staged_steps_deepfm_b1000"}) {
      if (result.name == name) steps.push_back(result);
    }
  }
  return steps;
}

class PlantedBugTest : public ::testing::TestWithParam<Bug> {};

TEST_P(PlantedBugTest, FailsTheTrainingStepChecks) {
  auto cpu = NewCpuBackend();
  BuggyBackend buggy(GetParam());
  const std::vector<ParityResult> steps =
      DeepModelSteps(RunParityChecks(*cpu, buggy));
  ASSERT_EQ(steps.size(), 8u);
  for (const ParityResult& step : steps) {
    EXPECT_FALSE(step.passed())
        << step.name << " passed with a planted bug: error " << step.max_error
        << " <= tolerance " << step.tolerance;
  }
}

std::string BugName(const ::testing::TestParamInfo<Bug>& info) {
  static const char* const kNames[] = {
      "EmbeddingGradientsZeroed", "EmbeddingGradientsDoubled",
      "OneGradientRowDropped", "GemmReadsATransposed"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedBugTest,
                         ::testing::Values(Bug::kEmbeddingGradientsZeroed,
                                           Bug::kEmbeddingGradientsDoubled,
                                           Bug::kOneGradientRowDropped,
                                           Bug::kGemmReadsATransposed),
                         BugName);

TEST(ParityChecksTest, TheHarnessPassesTheUnchangedCpuBackend) {
  auto a = NewCpuBackend();
  auto b = NewCpuBackend();
  for (const ParityResult& result : RunParityChecks(*a, *b))
    EXPECT_TRUE(result.passed()) << result.name << " " << result.max_error;
}

}  // namespace
}  // namespace ps::kernels
