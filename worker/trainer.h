// File: worker/trainer.h
//
// Trainer runs one worker's training loop:
//
//   reader thread:   click-log lines -> parsed batches (ClickLogReader, or
//                    FollowReader for a followed directory)
//   prefetch thread: batch -> unique keys -> wait for the staleness bound
//                    (StalenessGate) -> pull the rows and dense parameters
//                    from the shards (Prefetch)
//   this thread:     forward/backward on the backend (kernels/), progress
//                    lines and evaluations (ComputeSteps, ProgressReporter)
//   push thread:     push gradients (at most max_pushes_in_flight steps
//                    queued), then advance this worker's clock (PushSteps)
//   heartbeat thread: renews this worker's lease at the coordinator
//                    (Heartbeat)
//   checkpointer:    takes periodic checkpoints (worker 0, if asked)
//
// The cluster is a TrainingClient: PsClient over gRPC, or tests' in-memory
// FakeTrainingClient.
//
// Prefetching counts against the bound: the rows for step t are pulled only
// once every live worker's clock is >= t - staleness, and the staleness each
// pull actually saw (t - the cluster's minimum clock) is recorded. Under
// read-my-writes (the default) a step also trains on rows that hold every
// earlier push of this worker. At --staleness=0 that means pulling step t's
// rows once the push of step t-1 is acknowledged, so pull, compute and push
// run one after another. With staleness allowed, step t's rows are pulled
// while step t-1 computes (once step t-2's push is acknowledged), and step
// t-1's push, which cannot have reached them, is replayed onto them here
// (own_updates.h), so the pull and the push leave the critical path. Without
// read-my-writes, pulling overlaps computing and pushing overlaps both, and
// a step may train on rows that lack this worker's own last updates.
//
// The model is a spec (model/), run by a model::ModelGraph on the backend.
// Tables (on the servers; names start with the spec's name, so different
// models can share a cluster): <model>.<table> per table of the spec (the
// built-ins': <model>.embedding, <model>.wide), and one
// <model>.dense.<tensor> per dense tensor, split into chunks of
// dense_chunk_floats spread over the shards by routing.
//
// Not thread-safe: Run() once. `client` and `backend` must outlive it.

#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/training_client.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "model/batch_inputs.h"
#include "model/model_graph.h"
#include "model/model_plan.h"
#include "ops/checkpoint_taker.h"
#include "proto/model_spec.pb.h"
#include "proto/ps.pb.h"
#include "worker/input/clicklog_reader.h"
#include "worker/input/example_source.h"
#include "worker/input/follow_reader.h"
#include "worker/lr_schedule.h"
#include "worker/own_updates.h"
#include "worker/progress_reporter.h"
#include "worker/step_clock.h"
#include "worker/training_metrics.h"
#include "worker/training_summary.h"

namespace ps::worker {

struct TrainerOptions {
  // Training data, this worker's share, batch size, epochs, bad-line limit,
  // layout (also the test data's) and shuffling.
  ReaderOptions train;
  // Test data (comma-separated paths or globs); empty: no evaluation.
  std::string test_files;
  // The model, as a spec of train.layout's columns (model/builtin_specs.h
  // makes the built-ins; each table's optimizer and initializer are in it).
  // train.layout's crosses are the spec's (LayoutForPlan(); Run() checks).
  model::ModelSpec model;
  // lr, wide_deep and deepfm: the card their tables had before specs
  // (kind, embedding_dim, hidden; the trainer fills in the rest), which
  // they keep so that checkpoints and exports of either age load. Unset:
  // the card carries the spec.
  std::optional<ModelCard> legacy_card;
  // The sparse tables (embedding and wide) store a key only at its
  // admit_after-th push (TableSpec.admit_after). Default: 1 (every key).
  uint32_t admit_after = 1;
  // The sparse tables' rows expire after this many seconds without an
  // update (0: never), only those pushed fewer than evict_below_count times
  // if that is set (TableSpec.row_ttl_s, evict_below_count). Defaults: 0.
  uint32_t row_ttl_s = 0;
  uint32_t evict_below_count = 0;
  // Floats per row of the dense tables. Default: 4096.
  int dense_chunk_floats = 4096;
  // Mixed into every table's initializer seed (TableSpec.initializer.seed):
  // another value draws other initial parameters. 0 keeps the seeds of
  // every release (1 + sparse table, 100 + dense tensor). Default: 0.
  uint64_t init_seed = 0;
  // Bounded staleness: a worker may start step t when every live worker's
  // clock is >= t - staleness. Negative: asynchronous (never waits).
  // Default: 0 (bulk synchronous).
  int staleness = 0;
  // Read-my-writes: the rows for step t are pulled only once this worker's
  // own pushes of every earlier step are acknowledged, whatever the bound
  // lets other workers lag, so a step never trains on rows older than this
  // worker's own updates. Default: true.
  bool read_my_writes = true;
  // Under read_my_writes with staleness != 0: pull step t's rows while step
  // t-1 computes and replay this worker's own step t-1 push, not yet
  // applied, onto the rows both steps touch (own_updates.h), instead of
  // pulling only once that push is acknowledged. A lone worker trains on
  // the same bits either way, faster. With others, the early pull misses
  // their pushes of the step before, which waiting would have seen: 2 + 2
  // workers lost 0.002-0.003 AUC for a few percent of speed (BENCHMARKS.md,
  // "Staleness"). Only where the replay is exact: FP32 on the wire,
  // admit_after 1, no row expiry (row_ttl_s 0), no delay compensation;
  // elsewhere the worker waits. With others live, the staleness recorded
  // counts the replayed push as 1 (an upper bound). Default: kAlone.
  enum class OwnPushOverlay {
    kAlone,   // when num_workers is 1
    kAlways,  // whatever num_workers is
    kNever,
  };
  OwnPushOverlay overlay_own_pushes = OwnPushOverlay::kAlone;
  // Staleness-aware learning rates (Zhang et al., IJCAI 2016): a step whose
  // pull saw staleness k > 1 (its step minus the slowest live worker's
  // clock) pushes with its learning rates divided by k. Default: false.
  bool staleness_aware_lr = false;
  // Delay compensation of the dense gradients (DC-ASGD, Zheng et al., ICML
  // 2017), with this lambda (0: none): before pushing, the dense parameters
  // are pulled again and each gradient g becomes g + lambda * g * g / rms(g)
  // * (w_now - w_pulled), a first-order correction for the updates other
  // workers made since the step's pull. Default: 0.
  float delay_compensation = 0.0f;
  // Every table's learning rate times this schedule's factor at each step.
  LearningRateSchedule lr_schedule;
  // Where to record what Prometheus scrapes; null: nowhere. Not owned.
  TrainingMetrics* metrics = nullptr;
  // Where evaluations pull the model from (ps_worker --read_replicas: the
  // shards' replicas, which see the primaries' pushes up to their lag);
  // null: the training client. Not owned.
  client::TrainingClient* evaluation_client = nullptr;
  // This worker's lease at the coordinator, renewed by a heartbeat every
  // third of it whatever training is doing (a long evaluation, a pull that
  // retries). Default: 5 s.
  absl::Duration lease = absl::Seconds(5);
  // Under bounded staleness, the first step waits until this many workers
  // are live at the coordinator, or until start_timeout has passed (then it
  // goes on with those there). Defaults: 1, 5 minutes.
  int num_workers = 1;
  absl::Duration start_timeout = absl::Minutes(5);
  // Steps whose pushes may be queued or in flight (without read-my-writes;
  // with it, one). Default: 2.
  int max_pushes_in_flight = 2;
  // Evaluate on the test data every this many of this worker's examples
  // (0: only at the end), on at most eval_lines lines (0: all).
  int64_t eval_every = 0;
  int64_t eval_lines = 0;
  // Before the final evaluation, wait (up to this long) until no other
  // worker is live, so the evaluated model is the finished one.
  absl::Duration final_wait_limit = absl::Minutes(30);
  // Progress line period. Default: 2 s.
  absl::Duration progress_every = absl::Seconds(2);
  // Per-interval metrics, one JSON object per line; empty: none.
  std::string interval_metrics_out;
  // Testing aid: sleep this long in every step (a slow worker on purpose).
  absl::Duration slow_step = absl::ZeroDuration();
  // Resuming from a checkpoint: this worker's clock and the examples it had
  // trained on there (its input goes on after them). Defaults: 0, 0.
  int64_t resume_clock = 0;
  int64_t resume_examples = 0;
  // Following a directory instead of train.files (ps_worker --follow):
  // FollowReader's dir, last file and poll interval, read with train's
  // share, batch size, layout and bad-line limit. Empty dir: train.files.
  std::string follow_dir;
  std::string follow_until;
  absl::Duration follow_poll = absl::Seconds(1);
  // Resuming from a checkpoint while following: the position there.
  FollowPosition resume_position;
  // Take this process's incarnation from the coordinator (its first
  // report), which makes it larger than every earlier process's of this
  // worker index whatever this host's clock says. Default: false (the
  // client's own; ps_worker: true).
  bool assign_incarnation = false;
  // With assign_incarnation and no checkpoint to resume from: go on from
  // the clock and input position the coordinator holds for the last process
  // of this worker index, unless that one finished (a restart after a crash
  // or a drain). False starts from the beginning of the input. Default:
  // false (ps_worker: true unless --restart_from_start).
  bool resume_from_coordinator = false;
  // Periodic checkpoints, asked of `checkpoints` (not owned; outlives
  // Run()) every this many steps by the worker that sets them (worker 0).
  // Defaults: 0 and null, none.
  int64_t checkpoint_every_steps = 0;
  ops::CheckpointTaker* checkpoints = nullptr;
};

class Trainer {
 public:
  Trainer(const TrainerOptions& options, uint32_t worker_index,
          client::TrainingClient* client, kernels::Backend* backend);

  // Declares the tables, trains, evaluates. Errors: the reader's (bad lines,
  // missing files), the client's (after retries), the backend's.
  absl::StatusOr<TrainingSummary> Run();

  // Asks Run() to stop early (SIGTERM), from any thread: it reads no more,
  // lets the steps already computed finish pushing (so every step is whole
  // on every shard) and the others go, tells the coordinator it leaves (not
  // finished: a restart goes on from its clock), and returns without the
  // final evaluation, the summary saying `drained`.
  void RequestStop();

  // Whether Run() has told the coordinator this worker finished its input
  // (a stop from then on leaves nothing untrained).
  bool finished() const { return finished_.load(); }

 private:
  struct Prepared;
  struct PushJob;
  struct Pipeline;

  // The stages of Run(), in order.
  // INVALID_ARGUMENT unless the spec plans over the layout's columns and
  // the layout's crosses are the spec's.
  absl::Status CheckLayout() const;
  // state_floats_, from the optimizers.
  absl::Status ComputeStateFloats();
  // Makes the first report (which may assign an incarnation and a clock to
  // go on from) and sets the clock to the coordinator's answer, `*view`;
  // the training input, past what a resumed worker trained on (a
  // checkpoint's position is skipped to before the report, the
  // coordinator's after it).
  absl::StatusOr<std::unique_ptr<ExampleSource>> JoinCluster(
      ClockResponse* view);
  // The training input (train.files or the followed directory), past
  // `examples` or, following, `position`; RequestStop() cancels it.
  absl::StatusOr<std::unique_ptr<ExampleSource>> OpenInput(
      int64_t examples, const FollowPosition& position);
  // The prefetch thread: parse, wait for the staleness bound, pull.
  void Prefetch(ExampleSource& reader, int64_t first_step, Pipeline& pipeline);
  // The push thread: hold at a cut, push, advance the clock, ask for the
  // periodic checkpoints.
  void PushSteps(Pipeline& pipeline);
  // This thread: compute each pulled step, queue its push, replay it onto
  // the next step's rows, evaluate and report progress.
  absl::Status ComputeSteps(Pipeline& pipeline, ProgressReporter& progress,
                            TrainingSummary* summary);
  // The push of `prepared`'s step from its `outputs` (both moved from).
  PushJob MakePushJob(Prepared& prepared, model::GraphOutputs& outputs) const;
  // With eval_every: each task's test figures when `examples` reached
  // `*next_eval` (which then moves on); empty when no evaluation is due.
  absl::StatusOr<std::vector<TaskMetrics>> EvaluateIfDue(int64_t examples,
                                                         int64_t* next_eval);
  ProgressContext Progress(const Pipeline& pipeline,
                           const TrainingSummary& summary,
                           std::vector<TaskMetrics> test) const;
  // The pipeline's statistics into `summary`.
  void Summarize(const Pipeline& pipeline, const ExampleSource& reader,
                 int64_t first_step, absl::Duration trained,
                 TrainingSummary* summary) const;
  // After RequestStop(): tells the coordinator this worker leaves (not
  // finished) and abandons a checkpoint waiting for its cut.
  TrainingSummary LeaveDrained(TrainingSummary summary, int64_t first_step,
                               int64_t first_examples);
  // At the input's end: reports this worker finished, waits for the others
  // (final_wait_limit), then evaluates the finished model.
  absl::StatusOr<TrainingSummary> LeaveFinished(TrainingSummary summary);
  // options_.checkpoints when this worker takes periodic checkpoints.
  ops::CheckpointTaker* periodic_checkpoints() const {
    return options_.checkpoint_every_steps > 0 ? options_.checkpoints : nullptr;
  }

  // The sparse tables as the servers keep them (ModelPlan::stored_tables()),
  // then the dense tensors.
  int sparse_table_count() const {
    return static_cast<int>(plan_->stored_tables().size());
  }
  int table_dim(int table) const { return plan_->stored_tables()[table].dim; }
  // The server table that holds the spec's table `table`.
  const std::string& ServerTableOf(int table) const {
    return sparse_tables_[plan_->StoredTableOf(table)];
  }
  // How the servers start and train stored table `table`: its first
  // table's initializer and optimizer, then each table stored with it as
  // later columns.
  InitializerSpec StoredInitializer(int table) const;
  OptimizerSpec StoredOptimizer(int table) const;
  // A batch of this model's inputs, to be prepared.
  Prepared NewPrepared() const;
  // What the model's tables hold (declared with each of them).
  ModelCard Card() const;
  // A table's initializer seed: `table_seed` mixed with options_.init_seed.
  uint64_t InitializerSeed(uint64_t table_seed) const;
  absl::Status DeclareTables();
  // Pulls every row and dense parameter `prepared` needs, and its shared
  // rows with their optimizer state (if FindRowsSharedWithPrevious() found
  // any); pools
  // the multi-valued fields' rows unless `pool` is false (a replay changes
  // the fetched rows first).
  absl::Status PullParameters(Prepared* prepared, bool pool = true,
                              client::TrainingClient* from = nullptr);
  // Table t in pull order: the spec's sparse tables, then the dense
  // tensors.
  const std::string& TableInPullOrder(size_t t) const;
  // Whether this run replays its own pushes (overlay_own_pushes and the
  // conditions under which the replay is exact).
  bool ReplaysOwnPushes() const;
  // The rows `prepared` shares with the step before it, whose keys per
  // sparse table were `previous_keys`.
  void FindRowsSharedWithPrevious(
      const std::vector<std::vector<uint64_t>>& previous_keys,
      Prepared* prepared) const;
  // Replays `job`, the push of the step before `prepared`, onto its shared
  // rows.
  absl::Status ReplayPreviousPush(const PushJob& job, Prepared* prepared);
  absl::Status PushGradients(const PushJob& job);
  // Delay compensation (TrainerOptions::delay_compensation) of `job`'s
  // dense gradients against the dense parameters as they are now.
  absl::Status CompensateDelay(PushJob* job);
  // Records a stage's time in options_.metrics, if any.
  void Observe(Stage stage, absl::Duration time);
  // Each task's AUC and log loss on the test files' first `max_lines` lines
  // (0: all of them); `*examples`: the lines scored.
  absl::StatusOr<std::vector<TaskMetrics>> Evaluate(int64_t max_lines,
                                                    int64_t* examples);
  // Sets `request`'s clock, examples and input position, taken together.
  void SetProgress(ClockRequest* request);
  // Reports this worker's clock, retrying for `retry_for` (negative: the
  // client's default); `leaving`: the worker stops before its end. A report
  // made while the worker is idle (Idle()) says so, and no push starts
  // before its answer is recorded (HoldAt()).
  absl::Status ReportClock(bool finished, ClockResponse* response,
                           absl::Duration retry_for = -absl::InfiniteDuration(),
                           bool leaving = false);
  // The first report: with assign_incarnation, asks for an incarnation, and
  // with resume_from_coordinator for the last incarnation's clock and
  // examples (returned in `*resumed_examples`, 0 when there is nothing to go
  // on from) and input position.
  absl::Status FirstReport(ClockResponse* response, int64_t* resumed_examples,
                           FollowPosition* resumed_position);
  // Whether the input waits for what has not arrived and every step begun
  // is acknowledged: nothing is, or can be, pushed before more input.
  bool Idle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(idle_mu_);
  // The newest answer's hold_at (ClockResponse), which the push thread
  // reads before each push; records the answer to the `sequence`-th report.
  int64_t HoldAt();
  void RecordAnswerLocked(uint64_t sequence, const ClockRequest& request,
                          const absl::StatusOr<ClockResponse>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(idle_mu_);
  // Under bounded staleness, waits until options_.num_workers workers are
  // live or options_.start_timeout has passed.
  // `count_finished`: finished workers count as started (a resume).
  absl::Status WaitForWorkers(ClockResponse* view, bool count_finished);
  // Before pushing `step`: while a checkpoint's cut (`*hold_at`, updated
  // from each answer) holds it back, reports (so the coordinator sees this
  // worker there) and waits; adds the time to `*held`.
  absl::Status WaitOutCut(int64_t step, int64_t* hold_at, absl::Duration* held);
  // Skips the `examples` a resumed worker trained on before.
  absl::Status SkipTrainedExamples(ClickLogReader& reader, int64_t examples);
  // Once `step` (of `examples` from `file`, empty if not following) is
  // pushed: the clock, the examples and the position, together.
  void AdvanceClock(int64_t step, const std::string& file, int64_t examples);
  // Following: scores each file's examples as the steps compute them
  // (before their pushes), and closes a file's progressive validation into
  // `summary` at its last step.
  void ValidateProgressively(const std::string& file,
                             absl::Span<const float> probabilities,
                             const model::BatchInputs& prepared,
                             TrainingSummary* summary);
  void FinishValidation(TrainingSummary* summary);

  const TrainerOptions options_;
  const uint32_t worker_index_;
  client::TrainingClient* const client_;
  kernels::Backend* const backend_;
  // The spec planned over the layout's columns (Run() returns its error);
  // the graph that runs it, when it planned.
  const absl::StatusOr<model::ModelPlan> plan_;
  std::unique_ptr<model::ModelGraph> graph_;
  std::vector<kernels::DenseTensorSpec> tensors_;
  // <model>.<table> per sparse table, <model>.dense.<tensor> per tensor.
  std::vector<std::string> sparse_tables_, dense_tables_;
  // Floats of optimizer state per row of each table, in pull order.
  std::vector<int> state_floats_;

  // Steps of this worker whose pushes were acknowledged (set by the push
  // thread, waited on by the prefetcher), and the examples they held.
  StepClock clock_;
  std::atomic<int64_t> examples_{0};
  // Following: where examples_ ends in the directory (changed with it and
  // the clock, so that a report carries the three together).
  absl::Mutex position_mu_;
  FollowPosition position_ ABSL_GUARDED_BY(position_mu_);
  // The training input while Run() reads it, for RequestStop() to cancel.
  absl::Mutex source_mu_;
  ExampleSource* source_ ABSL_GUARDED_BY(source_mu_) = nullptr;
  // The compute thread's: the file being validated progressively.
  std::string validation_file_;
  TaskScores validation_scores_{{}};
  // The plan's tasks' names, in order.
  std::vector<std::string> task_names_;
  // Idle reports: the step the prefetcher reads input for, and the hold the
  // newest answer (by the order reports were sent) gave. An idle report
  // holds idle_mu_ until its answer is recorded, and the push thread takes
  // it to read the hold before each push, so that no push starts between
  // an idle report and its answer.
  std::atomic<int64_t> reading_step_{-1};
  absl::Mutex idle_mu_;
  uint64_t reports_sent_ ABSL_GUARDED_BY(idle_mu_) = 0;
  uint64_t newest_answered_ ABSL_GUARDED_BY(idle_mu_) = 0;
  int64_t hold_at_ ABSL_GUARDED_BY(idle_mu_) = 0;
  // RequestStop() was called; Run() reported the worker finished.
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINER_H_
