#include "embedding/push_ledger.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::embedding {
namespace {

template <typename T>
void AppendValue(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads values off the front of a serialized ledger.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Read(T* value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }
  size_t left() const { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

}  // namespace

PushLedger::PushLedger(size_t max_workers, size_t window)
    : max_workers_(std::max<size_t>(1, max_workers)),
      window_(std::max<size_t>(1, window)) {}

PushLedger::Worker* PushLedger::FindOrAdd(uint32_t worker_id,
                                          uint64_t incarnation) {
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) {
    Worker& worker = it->second;
    if (incarnation < worker.incarnation) return nullptr;
    if (incarnation > worker.incarnation) {
      worker = Worker();
      worker.incarnation = incarnation;
    }
    return &worker;
  }
  if (workers_.size() >= max_workers_) {
    // Forget the worker heard from longest ago that has nothing in flight.
    auto oldest = workers_.end();
    for (auto candidate = workers_.begin(); candidate != workers_.end();
         ++candidate) {
      const auto& recent = candidate->second.recent;
      // A refused push is no call in flight: its worker may be forgotten.
      const bool busy = std::any_of(recent.begin(), recent.end(), [](auto& e) {
        return e.second.state == State::kInProgress ||
               e.second.state == State::kWritten;
      });
      if (!busy && (oldest == workers_.end() ||
                    candidate->second.last_used < oldest->second.last_used)) {
        oldest = candidate;
      }
    }
    if (oldest != workers_.end()) workers_.erase(oldest);
  }
  Worker& worker = workers_[worker_id];
  worker.incarnation = incarnation;
  return &worker;
}

void PushLedger::Trim(Worker& worker) {
  for (auto it = worker.recent.find(worker.applied_through + 1);
       it != worker.recent.end() && it->first == worker.applied_through + 1 &&
       it->second.state == State::kDone;
       ++it) {
    ++worker.applied_through;
  }
  // A refused attempt holds the window back, so that its retry, however
  // late, is applied rather than refused; up to a bound, past which the
  // oldest entries go whatever they are (a retry of those is ABORTED).
  while (worker.recent.size() > window_) {
    auto oldest = worker.recent.begin();
    const bool over_bound =
        worker.recent.size() > kMaxRememberedFactor * window_ &&
        oldest->second.state == State::kRefused;
    if (oldest->second.state != State::kDone && !over_bound) break;
    worker.forgotten_below = std::max(worker.forgotten_below, oldest->first);
    worker.recent.erase(oldest);
  }
}

void PushLedger::AddApplied(Worker& worker, uint64_t sequence,
                            uint32_t rows_updated) {
  if (sequence <= worker.applied_through) return;
  auto [it, inserted] =
      worker.recent.try_emplace(sequence, Entry{State::kDone, rows_updated});
  if (!inserted && it->second.state != State::kDone) {
    it->second = Entry{State::kDone, rows_updated};
  }
}

absl::StatusOr<PushLedger::Claim> PushLedger::Begin(const PushOrigin& origin) {
  if (origin.sequence == 0) {
    return absl::InvalidArgumentError(
        "a push with an incarnation needs a sequence number of 1 or more");
  }
  absl::MutexLock lock(&mu_);
  while (true) {
    Worker* worker = FindOrAdd(origin.worker, origin.incarnation);
    if (worker == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", origin.worker, " incarnation ", origin.incarnation,
          " was superseded by incarnation ",
          workers_.at(origin.worker).incarnation,
          " (another process took this worker index); its push is refused"));
    }
    worker->last_used = ++uses_;
    auto it = worker->recent.find(origin.sequence);
    if (it == worker->recent.end()) {
      if (origin.sequence <= worker->applied_through) return Claim{true, 0};
      if (origin.sequence <= worker->forgotten_below) {
        return absl::AbortedError(absl::StrCat(
            "push ", origin.sequence, " of worker ", origin.worker,
            " is older than the ", window_,
            " pushes the shard remembers, and was not applied since the "
            "last one it knows of: it cannot tell whether it was applied"));
      }
      worker->recent.emplace(origin.sequence, Entry{State::kInProgress, 0});
      return Claim{false, 0};
    }
    if (it->second.state == State::kDone) {
      return Claim{true, it->second.rows_updated};
    }
    if (it->second.state == State::kRefused) {  // its retry: apply it now
      it->second.state = State::kInProgress;
      return Claim{false, 0};
    }
    // The same push is being applied by another call (a retry that arrived
    // while the first attempt was still running): wait for its outcome.
    finished_.Wait(&mu_);
  }
}

void PushLedger::NoteRefused(const PushOrigin& origin) {
  if (origin.sequence == 0) return;
  absl::MutexLock lock(&mu_);
  Worker* worker = FindOrAdd(origin.worker, origin.incarnation);
  if (worker == nullptr || origin.sequence <= worker->applied_through ||
      origin.sequence <= worker->forgotten_below) {
    return;
  }
  worker->last_used = ++uses_;
  worker->recent.try_emplace(origin.sequence, Entry{State::kRefused, 0});
  Trim(*worker);
}

absl::StatusOr<std::optional<uint32_t>> PushLedger::Applied(
    const PushOrigin& origin) {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto found = workers_.find(origin.worker);
    if (found == workers_.end()) return std::nullopt;
    const Worker& worker = found->second;
    if (origin.incarnation < worker.incarnation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", origin.worker, " incarnation ", origin.incarnation,
          " was superseded by incarnation ", worker.incarnation));
    }
    if (origin.incarnation != worker.incarnation) return std::nullopt;
    auto it = worker.recent.find(origin.sequence);
    if (it == worker.recent.end()) {
      if (origin.sequence <= worker.applied_through) return 0;
      if (origin.sequence <= worker.forgotten_below) {
        return absl::AbortedError(absl::StrCat(
            "push ", origin.sequence, " of worker ", origin.worker,
            " is older than the pushes the shard remembers: it cannot tell "
            "whether it was applied"));
      }
      return std::nullopt;
    }
    if (it->second.state == State::kDone) return it->second.rows_updated;
    if (it->second.state == State::kRefused) return std::nullopt;
    finished_.Wait(&mu_);
  }
}

void PushLedger::MarkWritten(const PushOrigin& origin, uint32_t rows_updated) {
  absl::MutexLock lock(&mu_);
  auto worker = workers_.find(origin.worker);
  if (worker == workers_.end() ||
      worker->second.incarnation != origin.incarnation) {
    return;
  }
  auto it = worker->second.recent.find(origin.sequence);
  if (it != worker->second.recent.end()) {
    it->second = Entry{State::kWritten, rows_updated};
  }
}

void PushLedger::Finish(const PushOrigin& origin, bool applied,
                        uint32_t rows_updated) {
  absl::MutexLock lock(&mu_);
  finished_.SignalAll();
  auto found = workers_.find(origin.worker);
  if (found == workers_.end() ||
      found->second.incarnation != origin.incarnation) {
    return;  // superseded meanwhile
  }
  Worker& worker = found->second;
  auto it = worker.recent.find(origin.sequence);
  if (it == worker.recent.end()) return;
  if (applied) {
    it->second = Entry{State::kDone, rows_updated};
  } else if (it->second.state == State::kWritten) {
    it->second.state = State::kDone;
  } else {
    it->second.state = State::kRefused;
  }
  Trim(worker);
}

std::string PushLedger::Serialize() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  AppendValue(static_cast<uint32_t>(workers_.size()), &out);
  // By worker id, so that the same ledger always gives the same bytes.
  std::vector<uint32_t> ids;
  ids.reserve(workers_.size());
  for (const auto& [id, worker] : workers_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const uint32_t id : ids) {
    const Worker& worker = workers_.at(id);
    AppendValue(id, &out);
    AppendValue(worker.incarnation, &out);
    AppendValue(worker.applied_through, &out);
    AppendValue(worker.forgotten_below, &out);
    const size_t count_at = out.size();
    uint32_t count = 0;
    AppendValue(count, &out);
    for (const auto& [sequence, entry] : worker.recent) {
      if (entry.state == State::kInProgress || entry.state == State::kRefused)
        continue;
      AppendValue(sequence, &out);
      AppendValue(entry.rows_updated, &out);
      ++count;
    }
    std::memcpy(&out[count_at], &count, sizeof(count));
  }
  return out;
}

absl::Status PushLedger::Merge(absl::string_view serialized) {
  Reader reader(serialized);
  auto corrupt = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("push ledger: ", why));
  };
  uint32_t workers = 0;
  if (!reader.Read(&workers)) return corrupt("no worker count");
  absl::MutexLock lock(&mu_);
  for (uint32_t w = 0; w < workers; ++w) {
    uint32_t id = 0, count = 0;
    uint64_t incarnation = 0, applied_through = 0, forgotten_below = 0;
    if (!reader.Read(&id) || !reader.Read(&incarnation) ||
        !reader.Read(&applied_through) || !reader.Read(&forgotten_below) ||
        !reader.Read(&count)) {
      return corrupt("a worker's entry is cut short");
    }
    if (reader.left() < uint64_t{count} * 12) {
      return corrupt("a worker's sequences are cut short");
    }
    Worker* worker = FindOrAdd(id, incarnation);
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t sequence = 0;
      uint32_t rows = 0;
      reader.Read(&sequence);
      reader.Read(&rows);
      if (worker != nullptr) AddApplied(*worker, sequence, rows);
    }
    if (worker == nullptr) continue;
    worker->applied_through =
        std::max(worker->applied_through, applied_through);
    worker->forgotten_below =
        std::max(worker->forgotten_below, forgotten_below);
    Trim(*worker);
  }
  if (reader.left() != 0) return corrupt("bytes after the last worker");
  return absl::OkStatus();
}

void PushLedger::MergeApplied(const PushOrigin& origin, uint32_t rows_updated) {
  absl::MutexLock lock(&mu_);
  Worker* worker = FindOrAdd(origin.worker, origin.incarnation);
  if (worker == nullptr) return;
  AddApplied(*worker, origin.sequence, rows_updated);
  Trim(*worker);
}

size_t PushLedger::workers() const {
  absl::MutexLock lock(&mu_);
  return workers_.size();
}

}  // namespace ps::embedding
