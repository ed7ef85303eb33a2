#include "worker/fake_training_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ps::worker {

absl::Status FakeTrainingClient::DeclareTable(const TableSpec& spec) {
  absl::MutexLock lock(&mu_);
  if (tables_.count(spec.name()) > 0) return absl::OkStatus();
  Table table;
  table.spec = spec;
  ASSIGN_OR_RETURN(table.optimizer, Optimizer::Create(spec.optimizer()));
  table.initializer = std::make_unique<Initializer>(spec.initializer());
  table.state_floats = table.optimizer->StateFloats(spec.dim());
  tables_.emplace(spec.name(), std::move(table));
  return absl::OkStatus();
}

std::vector<float> FakeTrainingClient::RowOrInitial(const Table& table,
                                                    uint64_t key) const {
  if (auto found = table.rows.find(key); found != table.rows.end())
    return found->second;
  const int dim = static_cast<int>(table.spec.dim());
  std::vector<float> row(dim + table.state_floats);
  table.initializer->Fill(key, absl::MakeSpan(row.data(), dim));
  table.optimizer->InitState(dim, row.data() + dim);
  return row;
}

absl::Status FakeTrainingClient::Pull(absl::Span<const TableRows> pulls) {
  ++pulls_;
  absl::ReaderMutexLock lock(&mu_);
  for (const TableRows& pull : pulls) {
    auto found = tables_.find(pull.table);
    if (found == tables_.end())
      return absl::NotFoundError(absl::StrCat("no table ", pull.table));
    const Table& table = found->second;
    if (pull.dim != static_cast<int>(table.spec.dim()))
      return absl::InvalidArgumentError(absl::StrCat(pull.table, ": dim"));
    const bool with_state = pull.optimizer != nullptr;
    if (with_state && pull.state_floats != table.state_floats)
      return absl::InternalError(absl::StrCat(pull.table, ": state size"));
    const size_t floats = pull.dim + (with_state ? table.state_floats : 0);
    for (size_t i = 0; i < pull.keys.size(); ++i) {
      const std::vector<float> row = RowOrInitial(table, pull.keys[i]);
      const size_t at = pull.row_positions.empty() ? i : pull.row_positions[i];
      std::copy(row.begin(), row.begin() + floats, pull.rows + at * floats);
    }
    if (with_state) {
      pull.optimizer->spec = Optimizer::WithDefaults(table.spec.optimizer());
      pull.optimizer->learning_rate_multiplier = 1.0f;
    }
  }
  return absl::OkStatus();
}

absl::Status FakeTrainingClient::Push(absl::Span<const TableGradients> pushes,
                                      uint32_t worker, int64_t clock) {
  std::function<absl::Status(int64_t)> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = push_hook_;
  }
  if (hook != nullptr) RETURN_IF_ERROR(hook(clock));
  absl::MutexLock lock(&mu_);
  PushRecord record;
  record.worker = worker;
  record.clock = clock;
  for (const TableGradients& push : pushes) {
    auto found = tables_.find(push.table);
    if (found == tables_.end())
      return absl::NotFoundError(absl::StrCat("no table ", push.table));
    Table& table = found->second;
    if (push.dim != static_cast<int>(table.spec.dim()) ||
        push.gradients.size() != push.keys.size() * push.dim) {
      return absl::InvalidArgumentError(absl::StrCat(push.table, ": sizes"));
    }
    for (size_t i = 0; i < push.keys.size(); ++i) {
      std::vector<float> row = RowOrInitial(table, push.keys[i]);
      table.optimizer->Apply(&push.gradients[i * push.dim], push.dim,
                             push.learning_rate_scale, row.data(),
                             row.data() + push.dim);
      table.rows[push.keys[i]] = std::move(row);
    }
    record.tables.push_back(push.table);
  }
  pushes_.push_back(std::move(record));
  return absl::OkStatus();
}

ClockResponse FakeTrainingClient::ViewLocked(uint32_t worker) const {
  ClockResponse view;
  const WorkerState& caller = workers_.at(worker);
  int64_t minimum = caller.clock;
  uint32_t live = 0;
  bool any_live = false;
  for (const auto& [index, state] : workers_) {
    if (state.finished || state.leaving) continue;
    minimum = any_live ? std::min(minimum, state.clock) : state.clock;
    any_live = true;
    ++live;
  }
  view.set_min_clock(minimum);
  view.set_live_workers(live);
  view.set_clock(caller.clock);
  view.set_examples(caller.examples);
  view.set_hold_at(hold_at_.load());
  return view;
}

int64_t FakeTrainingClient::OthersMinimumLocked(uint32_t worker) const {
  int64_t minimum = -1;
  for (const auto& [index, state] : workers_) {
    if (index == worker || state.finished || state.leaving) continue;
    if (minimum < 0 || state.clock < minimum) minimum = state.clock;
  }
  return minimum;
}

absl::StatusOr<ClockResponse> FakeTrainingClient::Clock(
    const ClockRequest& request, absl::Duration /*retry_for*/) {
  std::function<absl::Status(const ClockRequest&)> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = clock_hook_;
  }
  if (hook != nullptr) RETURN_IF_ERROR(hook(request));
  absl::MutexLock lock(&mu_);
  const bool known = workers_.count(request.worker()) > 0;
  WorkerState& state = workers_[request.worker()];
  bool resumed = false;
  if (request.assign_incarnation()) {
    // A new process of this worker index.
    if (request.resume() && known && !state.finished) {
      resumed = true;  // goes on from the last process's clock and input
    } else {
      state = WorkerState();
      state.clock = request.clock();
      state.examples = request.examples();
      // A late joiner starts at the live minimum, not holding others back.
      const int64_t others = OthersMinimumLocked(request.worker());
      if (others > state.clock) state.clock = others;
    }
    state.incarnation = ++incarnations_given_;
    state.leaving = false;
  } else {
    state.clock = request.clock();
    state.examples = request.examples();
    state.finished = request.finished();
    state.leaving = request.leaving();
  }
  ClockResponse view = ViewLocked(request.worker());
  if (request.assign_incarnation()) {
    view.set_incarnation(state.incarnation);
    view.set_resumed(resumed && state.examples > 0);
  }
  return view;
}

void FakeTrainingClient::set_clock_hook(
    std::function<absl::Status(const ClockRequest&)> hook) {
  absl::MutexLock lock(&mu_);
  clock_hook_ = std::move(hook);
}

void FakeTrainingClient::set_push_hook(
    std::function<absl::Status(int64_t clock)> hook) {
  absl::MutexLock lock(&mu_);
  push_hook_ = std::move(hook);
}

std::vector<FakeTrainingClient::PushRecord> FakeTrainingClient::pushes() const {
  absl::ReaderMutexLock lock(&mu_);
  return pushes_;
}

std::optional<FakeTrainingClient::WorkerState> FakeTrainingClient::worker(
    uint32_t index) const {
  absl::ReaderMutexLock lock(&mu_);
  auto found = workers_.find(index);
  if (found == workers_.end()) return std::nullopt;
  return found->second;
}

std::optional<std::vector<float>> FakeTrainingClient::Row(
    const std::string& table, uint64_t key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto found = tables_.find(table);
  if (found == tables_.end()) return std::nullopt;
  auto row = found->second.rows.find(key);
  if (row == found->second.rows.end()) return std::nullopt;
  const int dim = static_cast<int>(found->second.spec.dim());
  return std::vector<float>(row->second.begin(), row->second.begin() + dim);
}

std::vector<std::string> FakeTrainingClient::tables() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, table] : tables_) names.push_back(name);
  return names;
}

std::optional<TableSpec> FakeTrainingClient::table_spec(
    const std::string& table) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return std::nullopt;
  return it->second.spec;
}

std::map<uint64_t, std::vector<float>> FakeTrainingClient::Rows(
    const std::string& table) const {
  absl::ReaderMutexLock lock(&mu_);
  std::map<uint64_t, std::vector<float>> rows;
  auto found = tables_.find(table);
  if (found == tables_.end()) return rows;
  const int dim = static_cast<int>(found->second.spec.dim());
  for (const auto& [key, row] : found->second.rows)
    rows[key] = std::vector<float>(row.begin(), row.begin() + dim);
  return rows;
}

}  // namespace ps::worker
