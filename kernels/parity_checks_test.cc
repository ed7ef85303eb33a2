// The parity harness must see a wrong gradient: a CPU backend with a
// planted bug (gradients zeroed, doubled, a row dropped, a GEMM reading its
// input transposed) against the plain CPU backend fails the model-level
// training-step checks, not only the kernel checks.

#include "kernels/parity_checks.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/forwarding_backend.h"

namespace ps::kernels {
namespace {

enum class Bug {
  kEmbeddingGradientsZeroed,
  kEmbeddingGradientsDoubled,
  kOneGradientRowDropped,
  kGemmReadsATransposed,
};

// The CPU backend with `bug` planted; every other call is forwarded.
class BuggyBackend : public ForwardingBackend {
 public:
  explicit BuggyBackend(Bug bug)
      : BuggyBackend(bug, std::shared_ptr<Backend>(NewCpuBackend())) {}

  const char* name() const override { return "buggy cpu"; }
  // CtrModel's uploads go through copies, as to a GPU.
  bool ComputesOnHostMemory() const override { return false; }
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

 private:
  BuggyBackend(Bug bug, std::shared_ptr<Backend> cpu)
      : ForwardingBackend(cpu.get()), bug_(bug), cpu_(std::move(cpu)) {}

  const Bug bug_;
  std::shared_ptr<Backend> cpu_;
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
