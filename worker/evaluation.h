// File: worker/evaluation.h
//
// Exact evaluation metrics for click prediction. Pure functions.

#ifndef PS_WORKER_EVALUATION_H_
#define PS_WORKER_EVALUATION_H_

#include <vector>

namespace ps::worker {

// Exact ROC AUC of `scores` against 0/1 `labels`: the probability that a
// random positive scores above a random negative, ties counting half.
// Returns 0.5 when either class is absent. O(n log n).
double ExactAuc(const std::vector<float>& scores,
                const std::vector<float>& labels);

// Mean binary cross-entropy of click probabilities (clamped to [1e-7,
// 1 - 1e-7]). Returns 0 for no examples.
double MeanLogLoss(const std::vector<float>& probabilities,
                   const std::vector<float>& labels);

}  // namespace ps::worker

#endif  // PS_WORKER_EVALUATION_H_
