// File: kernels/parity_checks.h
//
// Runs every Backend kernel, a whole CtrModel training step for each model,
// and five steps in a row through the double-buffered upload of the next
// step's inputs with a Predict() between two of them, on two backends with
// the same random inputs of awkward sizes (not multiples of 32, empty
// batches, duplicate keys), and reports the largest difference against a
// stated tolerance. Used by the CUDA parity test (CPU
// as the reference) and by kernels/gpu_check.sh, which builds it with plain
// nvcc on the GPU machine; so it needs no test framework.

#ifndef PS_KERNELS_PARITY_CHECKS_H_
#define PS_KERNELS_PARITY_CHECKS_H_

#include <string>
#include <vector>

#include "kernels/backend.h"

namespace ps::kernels {

struct ParityResult {
  std::string name;
  // Largest relative error over the output tensors: ||candidate -
  // reference|| / ||reference|| (||candidate|| for an all-zero reference).
  double max_error = 0;
  double tolerance = 0;
  // Empty unless a kernel call itself failed.
  std::string failure;
  bool passed() const { return failure.empty() && max_error <= tolerance; }
};

// Runs every check. `gemm_tolerance` bounds GEMM-heavy outputs (looser for
// TF32); the other kernels use a fixed tolerance for float accumulation in a
// different order.
std::vector<ParityResult> RunParityChecks(Backend& reference,
                                          Backend& candidate,
                                          double gemm_tolerance = 1e-4);

}  // namespace ps::kernels

#endif  // PS_KERNELS_PARITY_CHECKS_H_
