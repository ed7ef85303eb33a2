// File: worker/fake_training_client.h
//
// FakeTrainingClient is a whole cluster in memory for tests of the trainer
// and its stages: tables that apply pushes with the shards' optimizers
// (base/optimizer.h) to rows that start at their initializer's values, and a
// clock coordinator that records each worker's clock (live until it reports
// finished or leaving; no leases), starts a late joiner at the live minimum
// and lets a worker that left unfinished resume where it stopped, as
// ClockCoordinator does. Tests can hold workers at a cut, make a push or a
// clock report fail, and see every push, pull and report.
//
// Thread-safe.

#ifndef PS_WORKER_FAKE_TRAINING_CLIENT_H_
#define PS_WORKER_FAKE_TRAINING_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/initializer.h"
#include "base/optimizer.h"
#include "client/training_client.h"

namespace ps::worker {

class FakeTrainingClient : public client::TrainingClient {
 public:
  // One push as the cluster saw it.
  struct PushRecord {
    uint32_t worker = 0;
    int64_t clock = 0;
    std::vector<std::string> tables;
  };
  // What a worker last reported.
  struct WorkerState {
    int64_t clock = 0;
    int64_t examples = 0;
    bool finished = false;
    bool leaving = false;
    // The incarnation of the process that reported last.
    uint64_t incarnation = 0;
  };

  uint64_t incarnation() const override { return incarnation_.load(); }
  void set_incarnation(uint64_t incarnation) override {
    incarnation_ = incarnation;
  }
  WireFormat wire_format() const override { return WireFormat::FP32; }

  absl::Status DeclareTable(const TableSpec& spec) override;
  absl::Status Pull(absl::Span<const TableRows> pulls) override;
  absl::Status Push(absl::Span<const TableGradients> pushes, uint32_t worker,
                    int64_t clock) override;
  absl::StatusOr<ClockResponse> Clock(const ClockRequest& request,
                                      absl::Duration retry_for) override;

  // Workers push no step >= `clock` until it is set back to 0 (a cut).
  void set_hold_at(int64_t clock) { hold_at_ = clock; }
  // Called (outside the cluster's lock) with each push's clock before it is
  // applied; an error fails that push (and nothing of it is applied).
  void set_push_hook(std::function<absl::Status(int64_t clock)> hook);
  // Called (outside the lock) with each clock report before it is recorded;
  // an error fails that report.
  void set_clock_hook(std::function<absl::Status(const ClockRequest&)> hook);
  // Pull calls so far.
  int pulls() const { return pulls_.load(); }

  std::vector<PushRecord> pushes() const;
  std::optional<WorkerState> worker(uint32_t index) const;
  // A stored row's weights; nullopt for a row never pushed.
  std::optional<std::vector<float>> Row(const std::string& table,
                                        uint64_t key) const;
  std::vector<std::string> tables() const;
  // The spec `table` was declared with; nullopt for an undeclared table.
  std::optional<TableSpec> table_spec(const std::string& table) const;
  // Every stored row of `table` (weights only), by key.
  std::map<uint64_t, std::vector<float>> Rows(const std::string& table) const;

 private:
  struct Table {
    TableSpec spec;
    std::unique_ptr<Optimizer> optimizer;
    std::unique_ptr<Initializer> initializer;
    int state_floats = 0;
    // Weights, then optimizer state, per pushed key.
    absl::flat_hash_map<uint64_t, std::vector<float>> rows;
  };
  // `key`'s stored row, or its initial one (weights and fresh state).
  std::vector<float> RowOrInitial(const Table& table, uint64_t key) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  ClockResponse ViewLocked(uint32_t worker) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  std::atomic<uint64_t> incarnation_{0};
  std::atomic<int64_t> hold_at_{0};
  std::atomic<int> pulls_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, Table> tables_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<PushRecord> pushes_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnations_given_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<absl::Status(int64_t)> push_hook_ ABSL_GUARDED_BY(mu_);
  std::function<absl::Status(const ClockRequest&)> clock_hook_
      ABSL_GUARDED_BY(mu_);
  // The live workers' minimum clock, `worker` left out; -1 if none.
  int64_t OthersMinimumLocked(uint32_t worker) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
};

}  // namespace ps::worker

#endif  // PS_WORKER_FAKE_TRAINING_CLIENT_H_
