#include "worker/own_updates.h"

#include <cstring>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/optimizer.h"
#include "base/status_macros.h"

namespace ps::worker {

client::TrainingClient::TableRows SharedRows::Pull(const std::string& table) {
  client::TrainingClient::TableRows pull;
  pull.table = table;
  pull.keys = keys;
  pull.dim = dim;
  pull.rows = rows_with_state.data();
  pull.optimizer = &optimizer;
  pull.state_floats = state_floats;
  return pull;
}

void FindSharedRows(absl::Span<const uint64_t> previous,
                    absl::Span<const uint64_t> next, int dim, int state_floats,
                    SharedRows* shared) {
  shared->next_positions.clear();
  shared->previous_positions.clear();
  shared->keys.clear();
  shared->other_keys.clear();
  shared->other_positions.clear();
  shared->dim = dim;
  shared->state_floats = state_floats;
  absl::flat_hash_map<uint64_t, uint32_t> previous_position;
  previous_position.reserve(previous.size());
  for (size_t i = 0; i < previous.size(); ++i)
    previous_position.try_emplace(previous[i], static_cast<uint32_t>(i));
  for (size_t i = 0; i < next.size(); ++i) {
    auto found = previous_position.find(next[i]);
    if (found == previous_position.end()) {
      shared->other_keys.push_back(next[i]);
      shared->other_positions.push_back(static_cast<uint32_t>(i));
      continue;
    }
    shared->next_positions.push_back(static_cast<uint32_t>(i));
    shared->previous_positions.push_back(found->second);
    shared->keys.push_back(next[i]);
  }
  shared->rows_with_state.resize(shared->keys.size() *
                                 static_cast<size_t>(dim + state_floats));
}

absl::Status ReplayOwnPush(SharedRows& shared,
                           absl::Span<const float> previous_gradients,
                           float learning_rate_scale, absl::Span<float> rows) {
  if (shared.keys.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(shared.optimizer.spec));
  const size_t dim = static_cast<size_t>(shared.dim);
  const size_t row_floats = dim + static_cast<size_t>(shared.state_floats);
  if (optimizer->StateFloats(shared.dim) != shared.state_floats ||
      shared.rows_with_state.size() != shared.keys.size() * row_floats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replaying a push: the optimizer keeps ",
        optimizer->StateFloats(shared.dim), " floats of state per row, the ",
        shared.keys.size(), " pulled rows have ", shared.rows_with_state.size(),
        " floats"));
  }
  // The shard's arithmetic: the push's scale times the table's multiplier,
  // then the optimizer's rate times that.
  const float scale =
      learning_rate_scale * shared.optimizer.learning_rate_multiplier;
  for (size_t i = 0; i < shared.keys.size(); ++i) {
    const size_t previous = shared.previous_positions[i];
    const size_t next = shared.next_positions[i];
    if ((previous + 1) * dim > previous_gradients.size() ||
        (next + 1) * dim > rows.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replaying a push: row ", previous, " of ",
          previous_gradients.size() / dim, " gradients or row ", next, " of ",
          rows.size() / dim, " rows is out of range"));
    }
    float* weights = &shared.rows_with_state[i * row_floats];
    // A row that leaves the finite numbers makes the shard refuse the whole
    // push, which fails the step that pushed it; nothing to do here.
    optimizer->Apply(&previous_gradients[previous * dim], shared.dim, scale,
                     weights, weights + dim);
    std::memcpy(&rows[next * dim], weights, dim * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker
