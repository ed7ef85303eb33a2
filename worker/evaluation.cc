#include "worker/evaluation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ps::worker {

double ExactAuc(const std::vector<float>& scores,
                const std::vector<float>& labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the (tie-averaged, 1-based) ranks of the positives.
  double positive_rank_sum = 0.0;
  double positives = 0.0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (i + 1 + j) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += average_rank;
        positives += 1.0;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0.0 || negatives == 0.0) return 0.5;
  return (positive_rank_sum - positives * (positives + 1.0) / 2.0) /
         (positives * negatives);
}

double MeanLogLoss(const std::vector<float>& probabilities,
                   const std::vector<float>& labels) {
  if (probabilities.empty()) return 0.0;
  double total = 0.0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p =
        std::clamp(static_cast<double>(probabilities[i]), 1e-7, 1.0 - 1e-7);
    total -= labels[i] > 0.5f ? std::log(p) : std::log(1.0 - p);
  }
  return total / probabilities.size();
}

}  // namespace ps::worker
