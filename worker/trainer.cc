#include "worker/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "model/batch_inputs.h"
#include "model/builtin_specs.h"
#include "model/dense_chunks.h"
#include "model/kernel_status.h"
#include "worker/bounded_queue.h"
#include "worker/evaluation.h"
#include "worker/heartbeat.h"
#include "worker/progress_reporter.h"
#include "worker/staleness_gate.h"
#include "xxhash.h"

namespace ps::worker {

struct Trainer::Prepared : model::BatchInputs {
  using model::BatchInputs::BatchInputs;
  int64_t step = 0;
  // Following: the file the batch came from, and whether it is its last.
  std::string file;
  bool ends_file = false;
  // The staleness its pull saw: step minus the slowest live worker's clock.
  int64_t staleness = 0;
  // Replaying own pushes: per table (in pull order), the rows this step
  // shares with the one before; empty for the first step.
  std::vector<SharedRows> shared;
};

struct Trainer::PushJob {
  int64_t step = 0;
  int64_t examples = 0;
  std::string file;
  // Per sparse table: the keys, and their gradients.
  std::vector<std::vector<uint64_t>> table_keys;
  std::vector<std::vector<float>> table_grads;
  std::vector<std::vector<float>> dense_grads;
  // Every table's learning rate times this for this push.
  float learning_rate_scale = 1.0f;
  // Under delay compensation: the dense parameters the step computed with.
  std::vector<std::vector<float>> pulled_dense;
};

Trainer::Trainer(const TrainerOptions& options, uint32_t worker_index,
                 client::TrainingClient* client, kernels::Backend* backend)
    : options_(options),
      worker_index_(worker_index),
      client_(client),
      backend_(backend),
      plan_(model::PlanForLayout({options.model, {}}, options.train.layout)) {
  if (!plan_.ok()) return;
  for (const model::PlanTask& task : plan_->tasks())
    task_names_.push_back(task.name);
  validation_scores_ = TaskScores(task_names_);
  graph_ = std::make_unique<model::ModelGraph>(&*plan_, backend_);
  tensors_ = plan_->dense_tensors();
  const std::string& name = options_.model.name();
  for (const model::StoredTable& stored : plan_->stored_tables()) {
    sparse_tables_.push_back(
        absl::StrCat(name, ".", options_.model.table(stored.tables[0]).name()));
  }
  for (const auto& tensor : tensors_) {
    dense_tables_.push_back(absl::StrCat(name, ".dense.", tensor.name));
  }
}

Trainer::Prepared Trainer::NewPrepared() const {
  return Prepared(&*plan_, options_.train.layout);
}

ModelCard Trainer::Card() const {
  ModelCard card;
  const model::InputLayout& layout = options_.train.layout;
  if (options_.legacy_card.has_value()) {
    card = *options_.legacy_card;
    for (int t = 0; t < options_.model.table_size(); ++t) {
      if (options_.model.table(t).name() == "embedding")
        card.set_embedding_table(ServerTableOf(t));
      if (options_.model.table(t).name() == "wide")
        card.set_wide_table(ServerTableOf(t));
    }
  } else {
    card.set_kind(ModelCard::SPEC);
    card.set_model_spec(model::ModelSpecText(options_.model));
    // Per table of the spec, the server table that holds it.
    for (int t = 0; t < options_.model.table_size(); ++t)
      card.add_sparse_tables(ServerTableOf(t));
  }
  card.set_fields(layout.fields());
  card.set_dense_features(layout.dense_features());
  for (const std::string& table : dense_tables_) card.add_dense_tables(table);
  card.set_dense_chunk_floats(options_.dense_chunk_floats);
  card.set_input_layout(model::LayoutText(layout));
  if (layout.has_sequence())
    card.set_max_values_per_field(layout.max_sequence_values);
  return card;
}

uint64_t Trainer::InitializerSeed(uint64_t table_seed) const {
  if (options_.init_seed == 0) return table_seed;
  return XXH3_64bits_withSeed(&table_seed, sizeof(table_seed),
                              options_.init_seed);
}

InitializerSpec Trainer::StoredInitializer(int table) const {
  const model::StoredTable& stored = plan_->stored_tables()[table];
  auto of_table = [&](int t) {
    InitializerSpec initializer;
    if (options_.model.table(t).init_scale() > 0.0f) {
      initializer.set_kind(InitializerSpec::UNIFORM);
      initializer.set_scale(options_.model.table(t).init_scale());
      initializer.set_seed(InitializerSeed(1 + t));
    }
    return initializer;
  };
  InitializerSpec initializer = of_table(stored.tables[0]);
  for (size_t i = 1; i < stored.tables.size(); ++i) {
    LaterColumnsInitializer* later = initializer.add_later_columns();
    later->set_first_column(stored.first_column[i]);
    *later->mutable_initializer() = of_table(stored.tables[i]);
  }
  return initializer;
}

OptimizerSpec Trainer::StoredOptimizer(int table) const {
  const model::StoredTable& stored = plan_->stored_tables()[table];
  OptimizerSpec optimizer = options_.model.table(stored.tables[0]).optimizer();
  for (size_t i = 1; i < stored.tables.size(); ++i) {
    LaterColumnsOptimizer* later = optimizer.add_later_columns();
    later->set_first_column(stored.first_column[i]);
    *later->mutable_optimizer() =
        options_.model.table(stored.tables[i]).optimizer();
  }
  return optimizer;
}

absl::Status Trainer::DeclareTables() {
  const ModelCard card = Card();
  for (int t = 0; t < sparse_table_count(); ++t) {
    TableSpec sparse;
    sparse.set_name(sparse_tables_[t]);
    sparse.set_dim(table_dim(t));
    // Zeros, the default, is no initializer (as every release declared it).
    if (InitializerSpec initializer = StoredInitializer(t);
        initializer.ByteSizeLong() > 0) {
      *sparse.mutable_initializer() = std::move(initializer);
    }
    *sparse.mutable_optimizer() = StoredOptimizer(t);
    *sparse.mutable_model() = card;
    if (options_.admit_after > 1) sparse.set_admit_after(options_.admit_after);
    sparse.set_row_ttl_s(options_.row_ttl_s);
    sparse.set_evict_below_count(options_.evict_below_count);
    if (absl::Status declared = client_->DeclareTable(sparse); !declared.ok()) {
      // A checkpoint of the same model whose wide weight was stored the
      // other way differs only there.
      const bool wide =
          options_.model.table_size() > sparse_table_count() ||
          std::any_of(options_.model.table().begin(),
                      options_.model.table().end(),
                      [](const model::Table& t) { return t.name() == "wide"; });
      if (absl::IsAlreadyExists(declared) && wide) {
        return absl::AlreadyExistsError(absl::StrCat(
            declared.message(),
            " (if the shards' tables come from a run that kept the wide "
            "weight in the embedding row or apart, train with that run's "
            "--wide_in_embedding_row or stored_with)"));
      }
      return declared;
    }
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    TableSpec dense;
    dense.set_name(dense_tables_[t]);
    dense.set_dim(
        model::DenseChunkFloats(tensors_[t], options_.dense_chunk_floats));
    if (tensors_[t].init_scale > 0.0f) {
      dense.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
      dense.mutable_initializer()->set_scale(tensors_[t].init_scale);
      dense.mutable_initializer()->set_seed(InitializerSeed(100 + t));
    }
    *dense.mutable_optimizer() = options_.model.dense_optimizer();
    *dense.mutable_model() = card;
    RETURN_IF_ERROR(client_->DeclareTable(dense));
  }
  return absl::OkStatus();
}

absl::Status Trainer::PullParameters(Prepared* prepared, bool pool,
                                     client::TrainingClient* from) {
  // Prepare() sized the row buffers; the pooled rows follow the pulled ones.
  std::vector<client::TrainingClient::TableRows> pulls;
  // The shared rows with their state travel in the same fan-out, and only
  // the other rows in the plain pulls.
  for (size_t t = 0; t < prepared->shared.size(); ++t) {
    if (prepared->shared[t].keys.empty()) continue;
    pulls.push_back(prepared->shared[t].Pull(TableInPullOrder(t)));
  }
  auto plain = [&](size_t t, absl::Span<const uint64_t> keys, int dim,
                   float* rows) {
    if (keys.empty()) return;
    if (t >= prepared->shared.size()) {
      pulls.push_back({TableInPullOrder(t), keys, dim, rows});
    } else if (!prepared->shared[t].other_keys.empty()) {
      client::TrainingClient::TableRows pull = {
          TableInPullOrder(t), prepared->shared[t].other_keys, dim, rows};
      pull.row_positions = prepared->shared[t].other_positions;
      pulls.push_back(pull);
    }
  };
  size_t table = 0;
  for (; table < static_cast<size_t>(sparse_table_count()); ++table) {
    plain(table, prepared->StoredKeys(table), table_dim(table),
          prepared->StoredRows(table));
  }
  std::vector<std::vector<uint64_t>> chunk_keys(tensors_.size());
  prepared->dense_params.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const int chunk =
        model::DenseChunkFloats(tensors_[t], options_.dense_chunk_floats);
    const int chunks =
        model::DenseChunks(tensors_[t], options_.dense_chunk_floats);
    chunk_keys[t] = model::DenseChunkKeys(chunks);
    prepared->dense_params[t].resize(static_cast<size_t>(chunk) * chunks);
    plain(table++, chunk_keys[t], chunk, prepared->dense_params[t].data());
  }
  RETURN_IF_ERROR((from != nullptr ? from : client_)->Pull(pulls));
  if (pool) prepared->PoolRows();
  return absl::OkStatus();
}

const std::string& Trainer::TableInPullOrder(size_t t) const {
  return t < sparse_tables_.size() ? sparse_tables_[t]
                                   : dense_tables_[t - sparse_tables_.size()];
}

bool Trainer::ReplaysOwnPushes() const {
  const bool wanted =
      options_.overlay_own_pushes == TrainerOptions::OwnPushOverlay::kAlways ||
      (options_.overlay_own_pushes == TrainerOptions::OwnPushOverlay::kAlone &&
       options_.num_workers <= 1);
  // Following a directory: a step's push waits for the next step's pull,
  // which waits for the next file; a file's last step would reach the
  // shards (and every export) only once another file came.
  return options_.read_my_writes && wanted && options_.staleness != 0 &&
         options_.delay_compensation <= 0.0f && options_.admit_after <= 1 &&
         options_.row_ttl_s == 0 && options_.follow_dir.empty() &&
         client_->wire_format() == WireFormat::FP32;
}

void Trainer::FindRowsSharedWithPrevious(
    const std::vector<std::vector<uint64_t>>& previous_keys,
    Prepared* prepared) const {
  prepared->shared.resize(state_floats_.size());
  size_t t = 0;
  for (; t < static_cast<size_t>(sparse_table_count()); ++t) {
    FindSharedRows(previous_keys[t], prepared->StoredKeys(t), table_dim(t),
                   state_floats_[t], &prepared->shared[t]);
  }
  for (size_t d = 0; d < tensors_.size(); ++d, ++t) {
    // Every step pulls every chunk of every dense tensor.
    const std::vector<uint64_t> chunks = model::DenseChunkKeys(
        model::DenseChunks(tensors_[d], options_.dense_chunk_floats));
    FindSharedRows(
        chunks, chunks,
        model::DenseChunkFloats(tensors_[d], options_.dense_chunk_floats),
        state_floats_[t], &prepared->shared[t]);
  }
}

absl::Status Trainer::ReplayPreviousPush(const PushJob& job,
                                         Prepared* prepared) {
  if (prepared->shared.empty()) return absl::OkStatus();
  size_t t = 0;
  for (; t < static_cast<size_t>(sparse_table_count()); ++t) {
    RETURN_IF_ERROR(ReplayOwnPush(
        prepared->shared[t], job.table_grads[t], job.learning_rate_scale,
        absl::MakeSpan(prepared->StoredRows(t),
                       prepared->StoredKeys(t).size() * table_dim(t))));
  }
  for (size_t d = 0; d < tensors_.size(); ++d) {
    RETURN_IF_ERROR(ReplayOwnPush(prepared->shared[t++], job.dense_grads[d],
                                  job.learning_rate_scale,
                                  absl::MakeSpan(prepared->dense_params[d])));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SkipTrainedExamples(ClickLogReader& reader,
                                          int64_t examples) {
  int64_t skipped = 0;
  std::vector<model::Example> batch;
  absl::Time next_progress = absl::Now() + absl::Seconds(5);
  while (skipped < examples) {
    ASSIGN_OR_RETURN(bool more, reader.Next(&batch));
    if (!more) break;
    skipped += static_cast<int64_t>(batch.size());
    if (absl::Now() > next_progress) {
      LOG(INFO) << "[worker " << worker_index_ << "] resuming: skipped "
                << skipped << " of " << examples << " examples trained before";
      next_progress = absl::Now() + absl::Seconds(5);
    }
  }
  if (skipped != examples) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint or coordinator says this worker had trained on ",
        examples, " examples, but its input gives ", skipped,
        " in whole batches: resume with the same --train, --num_workers, "
        "--shuffle_buffer, --shuffle_seed, layout flags, "
        "--batch_size and --epochs as the run that took it"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::PushGradients(const PushJob& job) {
  std::vector<client::TrainingClient::TableGradients> pushes;
  for (size_t t = 0; t < sparse_tables_.size(); ++t) {
    if (job.table_keys[t].empty()) continue;
    pushes.push_back({sparse_tables_[t], job.table_keys[t], job.table_grads[t],
                      table_dim(t), job.learning_rate_scale});
  }
  std::vector<std::vector<uint64_t>> chunk_keys(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    chunk_keys[t] = model::DenseChunkKeys(
        model::DenseChunks(tensors_[t], options_.dense_chunk_floats));
    pushes.push_back(
        {dense_tables_[t], chunk_keys[t], job.dense_grads[t],
         model::DenseChunkFloats(tensors_[t], options_.dense_chunk_floats),
         job.learning_rate_scale});
  }
  return client_->Push(pushes, worker_index_, job.step);
}

void Trainer::Observe(Stage stage, absl::Duration time) {
  if (options_.metrics != nullptr) options_.metrics->ObserveStage(stage, time);
}

absl::Status Trainer::CompensateDelay(PushJob* job) {
  std::vector<std::vector<float>> now(tensors_.size());
  std::vector<std::vector<uint64_t>> chunk_keys(tensors_.size());
  std::vector<client::TrainingClient::TableRows> pulls;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const int chunk =
        model::DenseChunkFloats(tensors_[t], options_.dense_chunk_floats);
    chunk_keys[t] = model::DenseChunkKeys(
        model::DenseChunks(tensors_[t], options_.dense_chunk_floats));
    now[t].resize(job->pulled_dense[t].size());
    pulls.push_back({dense_tables_[t], chunk_keys[t], chunk, now[t].data()});
  }
  RETURN_IF_ERROR(client_->Pull(pulls));
  for (size_t t = 0; t < tensors_.size(); ++t) {
    std::vector<float>& gradient = job->dense_grads[t];
    double squares = 0;
    for (float g : gradient) squares += static_cast<double>(g) * g;
    if (squares == 0) continue;
    const float lambda =
        options_.delay_compensation /
        static_cast<float>(std::sqrt(squares / gradient.size()));
    for (size_t i = 0; i < gradient.size(); ++i) {
      gradient[i] += lambda * gradient[i] * gradient[i] *
                     (now[t][i] - job->pulled_dense[t][i]);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TaskMetrics>> Trainer::Evaluate(int64_t max_lines,
                                                           int64_t* examples) {
  ReaderOptions test;
  test.files = options_.test_files;
  test.layout = options_.train.layout;
  test.batch_size = options_.train.batch_size;
  test.max_bad_lines = options_.train.max_bad_lines;
  ASSIGN_OR_RETURN(std::unique_ptr<ClickLogReader> reader,
                   ClickLogReader::Open(test));
  TaskScores scores(task_names_);
  std::vector<float> batch_probabilities;
  std::vector<model::Example> batch;
  while (max_lines <= 0 || scores.examples() < max_lines) {
    ASSIGN_OR_RETURN(bool more, reader->Next(&batch));
    if (!more) break;
    if (max_lines > 0) {
      const size_t room = static_cast<size_t>(max_lines - scores.examples());
      if (batch.size() > room) batch.resize(room);
    }
    Prepared prepared = NewPrepared();
    prepared.Prepare(batch);
    RETURN_IF_ERROR(
        PullParameters(&prepared, /*pool=*/true, options_.evaluation_client));
    RETURN_IF_ERROR(graph_->Predict(prepared.Inputs(), &batch_probabilities));
    scores.Add(prepared.batch, batch_probabilities, prepared.labels,
               prepared.label_known);
  }
  *examples = scores.examples();
  return scores.Metrics();
}

// What the trainer's threads share while they run.
struct Trainer::Pipeline {
  Pipeline(const StalenessGateOptions& gate_options, const StepClock* clock,
           StalenessGate::Report report, int max_pushes_in_flight)
      : gate(gate_options, clock, std::move(report)),
        ready(1),
        pending_pushes(std::max(1, max_pushes_in_flight)) {}

  // Ends the run with `status` (the first one counts): the threads stop and
  // the queues close.
  void Fail(absl::Status status) {
    {
      absl::MutexLock lock(&status_mu);
      if (first_error.ok()) first_error = std::move(status);
    }
    stopping = true;
    ready.Close();
    pending_pushes.Close();
  }
  absl::Status error() {
    absl::MutexLock lock(&status_mu);
    return first_error;
  }

  // The prefetcher's; the statistics may be read from any thread.
  StalenessGate gate;
  // Pulled steps, waiting to be computed; computed steps, waiting to be
  // pushed.
  BoundedQueue<Prepared> ready;
  BoundedQueue<PushJob> pending_pushes;
  std::atomic<bool> stopping{false};
  absl::Mutex status_mu;
  absl::Status first_error ABSL_GUARDED_BY(status_mu);
  // Time per stage, in microseconds; the replay's is the compute thread's.
  std::atomic<int64_t> pull_micros{0}, compute_micros{0}, push_micros{0};
  int64_t replay_micros = 0;
  std::atomic<int64_t> scaled_pushes{0}, compensated_pushes{0};
  // The pusher's: the time held at cuts, and the cut to hold at, as
  // answered to the last report made after the clock reached the step about
  // to be pushed (0: none). Only such an answer can tell: the coordinator
  // picks a cut past every clock it has recorded, so an answer without one
  // means the cut (if any is begun later) is past that step; an older
  // answer, or another thread's, may predate a cut that is already at it.
  absl::Duration cut_hold;
  int64_t hold_at = 0;
};

absl::Status Trainer::CheckLayout() const {
  RETURN_IF_ERROR(plan_.status());
  model::InputLayout fitted = options_.train.layout;
  fitted.crosses.clear();
  RETURN_IF_ERROR(model::LayoutForPlan(*plan_, &fitted));
  if (fitted.crosses != options_.train.layout.crosses) {
    return absl::InvalidArgumentError(
        "the input layout's crosses are not the model spec's "
        "(model::LayoutForPlan)");
  }
  return absl::OkStatus();
}

absl::Status Trainer::ComputeStateFloats() {
  state_floats_.clear();
  std::vector<std::pair<OptimizerSpec, int>> tables;
  for (int t = 0; t < sparse_table_count(); ++t)
    tables.push_back({StoredOptimizer(t), table_dim(t)});
  for (const auto& tensor : tensors_) {
    tables.push_back(
        {options_.model.dense_optimizer(),
         model::DenseChunkFloats(tensor, options_.dense_chunk_floats)});
  }
  for (const auto& [spec, dim] : tables) {
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                     Optimizer::Create(spec, dim));
    state_floats_.push_back(optimizer->StateFloats(dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExampleSource>> Trainer::OpenInput(
    int64_t examples, const FollowPosition& position) {
  std::unique_ptr<ExampleSource> source;
  if (options_.follow_dir.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<ClickLogReader> reader,
                     ClickLogReader::Open(options_.train));
    RETURN_IF_ERROR(SkipTrainedExamples(*reader, examples));
    source = std::move(reader);
  } else {
    if (examples > 0 && position.file.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this worker's last process trained on ", examples,
          " examples of --train, not of a followed directory: there is no "
          "position in --follow to go on from (--restart_from_start starts "
          "at its first file)"));
    }
    FollowOptions follow;
    follow.dir = options_.follow_dir;
    follow.until = options_.follow_until;
    follow.poll = options_.follow_poll;
    follow.start = position;
    follow.reader = options_.train;
    ASSIGN_OR_RETURN(source, FollowReader::Open(follow));
  }
  absl::MutexLock lock(&source_mu_);
  source_ = source.get();
  if (stop_requested_) source_->Cancel();
  return source;
}

void Trainer::RequestStop() {
  stop_requested_ = true;
  absl::MutexLock lock(&source_mu_);
  if (source_ != nullptr) source_->Cancel();
}

void Trainer::Prefetch(ExampleSource& reader, int64_t first_step,
                       Pipeline& pipeline) {
  const bool replay = ReplaysOwnPushes();
  const auto stopped = [&] {
    return pipeline.stopping.load() || stop_requested_.load();
  };
  std::vector<model::Example> examples;
  // Replaying: the keys of the step before, per sparse table (none before
  // the first).
  std::vector<std::vector<uint64_t>> previous_keys;
  bool have_previous = false;
  for (int64_t step = first_step; !stopped(); ++step) {
    const absl::Time read_start = absl::Now();
    reading_step_ = step;
    absl::StatusOr<bool> more = reader.Next(&examples);
    if (!more.ok()) return pipeline.Fail(more.status());
    if (!*more) break;
    Observe(Stage::kRead, absl::Now() - read_start);
    Prepared prepared = NewPrepared();
    prepared.step = step;
    prepared.file = reader.batch_file();
    prepared.ends_file = reader.batch_ends_file();
    prepared.Prepare(examples);
    const absl::Time wait_start = absl::Now();
    absl::StatusOr<int64_t> staleness =
        pipeline.gate.WaitForStep(step, stopped);
    if (!staleness.ok()) {
      // A stop ends the wait; any other error (a report cut off, say) fails
      // the run, or the worker would count its input done.
      if (stopped()) break;
      return pipeline.Fail(staleness.status());
    }
    Observe(Stage::kWait, absl::Now() - wait_start);
    if (options_.metrics != nullptr)
      options_.metrics->ObserveStaleness(*staleness);
    prepared.staleness = *staleness;
    if (replay) {
      if (have_previous) FindRowsSharedWithPrevious(previous_keys, &prepared);
      previous_keys.resize(sparse_table_count());
      for (int t = 0; t < sparse_table_count(); ++t)
        previous_keys[t] = prepared.StoredKeys(t);
      have_previous = true;
    }
    const absl::Time pull_start = absl::Now();
    absl::Status pulled = PullParameters(&prepared, /*pool=*/!replay);
    if (!pulled.ok()) return pipeline.Fail(pulled);
    pipeline.pull_micros += absl::ToInt64Microseconds(absl::Now() - pull_start);
    Observe(Stage::kPull, absl::Now() - pull_start);
    if (!pipeline.ready.Push(std::move(prepared))) return;
  }
  pipeline.ready.Close();
}

void Trainer::PushSteps(Pipeline& pipeline) {
  ops::CheckpointTaker* const checkpointer = periodic_checkpoints();
  PushJob job;
  while (pipeline.pending_pushes.Pop(&job)) {
    // RequestStop(): a step not begun is dropped, so that every step pushed
    // is whole; the one being pushed finishes.
    if (stop_requested_) continue;
    // The newest answer's hold: an idle report's, when one came in since.
    pipeline.hold_at = HoldAt();
    if (absl::Status waited =
            WaitOutCut(job.step, &pipeline.hold_at, &pipeline.cut_hold);
        !waited.ok())
      return pipeline.Fail(waited);
    if (stop_requested_) continue;
    const absl::Time push_start = absl::Now();
    if (options_.delay_compensation > 0) {
      if (absl::Status compensated = CompensateDelay(&job); !compensated.ok())
        return pipeline.Fail(compensated);
      ++pipeline.compensated_pushes;
    }
    if (job.learning_rate_scale != 1.0f) ++pipeline.scaled_pushes;
    if (absl::Status pushed = PushGradients(job); !pushed.ok())
      return pipeline.Fail(pushed);
    pipeline.push_micros += absl::ToInt64Microseconds(absl::Now() - push_start);
    Observe(Stage::kPush, absl::Now() - push_start);
    AdvanceClock(job.step, job.file, job.examples);
    ClockResponse view;
    if (absl::Status reported = ReportClock(false, &view); !reported.ok())
      return pipeline.Fail(reported);
    if (checkpointer != nullptr &&
        (job.step + 1) % options_.checkpoint_every_steps == 0) {
      checkpointer->Request(job.step + 1);
    }
  }
}

Trainer::PushJob Trainer::MakePushJob(Prepared& prepared,
                                      model::GraphOutputs& outputs) const {
  // Sparse rows get the gradient of the summed loss (each example's full
  // contribution, as per-example FTRL/Adagrad expect); the MLP gets the
  // mean, which Adam is insensitive to.
  const float scale = static_cast<float>(prepared.batch);
  PushJob job;
  job.step = prepared.step;
  job.examples = prepared.batch;
  job.file = prepared.file;
  prepared.FoldPooledGradients(&outputs.table_grads);
  job.table_grads = prepared.StoredGradients(&outputs.table_grads);
  job.table_keys.resize(sparse_table_count());
  for (int t = 0; t < sparse_table_count(); ++t) {
    job.table_keys[t] =
        std::move(prepared.tables[plan_->stored_tables()[t].tables[0]].keys);
    for (float& g : job.table_grads[t]) g *= scale;
  }
  job.dense_grads.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    job.dense_grads[t] = std::move(outputs.dense_grads[t]);
    job.dense_grads[t].resize(prepared.dense_params[t].size(), 0.0f);
  }
  job.learning_rate_scale = options_.lr_schedule.Scale(prepared.step);
  if (options_.staleness_aware_lr && prepared.staleness > 1)
    job.learning_rate_scale /= static_cast<float>(prepared.staleness);
  if (options_.delay_compensation > 0) {
    // The step is done with them (a staged next batch is another's).
    job.pulled_dense = std::move(prepared.dense_params);
  }
  return job;
}

absl::Status Trainer::ComputeSteps(Pipeline& pipeline,
                                   ProgressReporter& progress,
                                   TrainingSummary* summary) {
  const bool replay = ReplaysOwnPushes();
  int64_t next_eval = options_.eval_every;
  model::GraphOutputs outputs;
  Prepared prepared;
  bool have_current = pipeline.ready.Pop(&prepared);
  if (have_current && replay) prepared.PoolRows();
  // RequestStop(): the steps prepared but not computed are dropped.
  while (have_current && !stop_requested_) {
    // If the next batch is already pulled, its inputs go to the device while
    // this step computes (not when replaying: this step's push changes
    // them).
    Prepared next;
    bool have_next = !replay && pipeline.ready.TryPop(&next);
    model::GraphInputs next_inputs;
    if (have_next) next_inputs = next.Inputs();
    const absl::Time compute_start = absl::Now();
    RETURN_IF_ERROR(graph_->TrainStep(prepared.Inputs(), &outputs,
                                      have_next ? &next_inputs : nullptr));
    pipeline.compute_micros +=
        absl::ToInt64Microseconds(absl::Now() - compute_start);
    Observe(Stage::kCompute, absl::Now() - compute_start);
    if (options_.slow_step > absl::ZeroDuration())
      absl::SleepFor(options_.slow_step);
    summary->examples += prepared.batch;
    ++summary->steps;
    if (options_.metrics != nullptr) options_.metrics->AddStep(prepared.batch);
    progress.AddStep(prepared.batch, outputs.loss_sum, outputs.probabilities,
                     prepared.labels, prepared.label_known);
    if (!prepared.file.empty()) {
      ValidateProgressively(prepared.file, outputs.probabilities, prepared,
                            summary);
      if (prepared.ends_file) FinishValidation(summary);
    }
    PushJob job = MakePushJob(prepared, outputs);
    if (replay) {
      // The next step's rows were pulled before this push leaves (it is
      // queued below): replay it onto the rows they share.
      have_next = pipeline.ready.Pop(&next);
      if (have_next) {
        const absl::Time replay_start = absl::Now();
        RETURN_IF_ERROR(ReplayPreviousPush(job, &next));
        next.PoolRows();
        pipeline.replay_micros +=
            absl::ToInt64Microseconds(absl::Now() - replay_start);
        if (!next.shared.empty()) ++summary->replayed_steps;
      }
    }
    if (!pipeline.pending_pushes.Push(std::move(job))) break;
    ASSIGN_OR_RETURN(std::vector<TaskMetrics> test,
                     EvaluateIfDue(summary->examples, &next_eval));
    if (progress.Due(absl::Now()) || !test.empty()) {
      progress.Report(absl::Now(),
                      Progress(pipeline, *summary, std::move(test)));
    }
    if (have_next) {
      prepared = std::move(next);
    } else {
      have_current = !replay && pipeline.ready.Pop(&prepared);
    }
  }
  return absl::OkStatus();
}

ProgressContext Trainer::Progress(const Pipeline& pipeline,
                                  const TrainingSummary& summary,
                                  std::vector<TaskMetrics> test) const {
  ProgressContext context;
  context.examples = summary.examples;
  context.max_staleness = pipeline.gate.max_staleness();
  context.waited_seconds = pipeline.gate.waited_seconds();
  context.test = std::move(test);
  return context;
}

void Trainer::Summarize(const Pipeline& pipeline, const ExampleSource& reader,
                        int64_t first_step, absl::Duration trained,
                        TrainingSummary* summary) const {
  summary->train_seconds = absl::ToDoubleSeconds(trained);
  summary->examples_per_sec = summary->train_seconds > 0
                                  ? summary->examples / summary->train_seconds
                                  : 0;
  summary->bad_lines = reader.bad_lines();
  summary->staleness_histogram = pipeline.gate.histogram();
  summary->max_staleness_seen = pipeline.gate.max_staleness();
  summary->waits = pipeline.gate.waits();
  summary->wait_seconds = pipeline.gate.waited_seconds();
  summary->first_step = first_step;
  summary->pull_seconds = pipeline.pull_micros.load() / 1e6;
  summary->compute_seconds = pipeline.compute_micros.load() / 1e6;
  summary->push_seconds = pipeline.push_micros.load() / 1e6;
  summary->replay_seconds = pipeline.replay_micros / 1e6;
  summary->scaled_pushes = pipeline.scaled_pushes.load();
  summary->compensated_pushes = pipeline.compensated_pushes.load();
  summary->cut_hold_seconds = absl::ToDoubleSeconds(pipeline.cut_hold);
}

TrainingSummary Trainer::LeaveDrained(TrainingSummary summary,
                                      int64_t first_step,
                                      int64_t first_examples) {
  // Leave without finishing: the coordinator keeps this worker's clock and
  // input position for the process that goes on from them.
  summary.drained = true;
  // What counts is what was pushed: a step computed and dropped was not
  // trained on (a restart trains on it).
  summary.steps = clock_.value() - first_step;
  summary.examples = examples_.load() - first_examples;
  // Leave first: a checkpoint waiting for its cut can then finish without
  // this worker, which is stopping below it.
  ClockResponse view;
  if (absl::Status left =
          ReportClock(false, &view, absl::Seconds(5), /*leaving=*/true);
      !left.ok()) {
    LOG(WARNING) << "[worker " << worker_index_
                 << "] could not tell the coordinator it leaves (" << left
                 << "): its lease lapses instead";
  }
  if (ops::CheckpointTaker* checkpointer = periodic_checkpoints())
    checkpointer->Abandon();
  LOG(INFO) << "[worker " << worker_index_ << "] stopped at clock "
            << clock_.value() << " after " << examples_.load()
            << " examples; a restart goes on from there";
  return summary;
}

absl::StatusOr<TrainingSummary> Trainer::LeaveFinished(
    TrainingSummary summary) {
  // Leave the cluster, then evaluate the finished model. A checkpoint in
  // progress waits for the live workers to reach its cut, and this one has
  // no steps left: it finishes once this worker is counted out.
  ClockResponse view;
  RETURN_IF_ERROR(ReportClock(true, &view));
  finished_ = true;
  if (options_.metrics != nullptr) options_.metrics->SetFinished();
  if (ops::CheckpointTaker* checkpointer = periodic_checkpoints()) {
    checkpointer->Stop();
    const ops::CheckpointTaker::Counts counts = checkpointer->counts();
    summary.checkpoints = counts.taken;
    summary.failed_checkpoints = counts.failed;
  }
  const absl::Time wait_limit = absl::Now() + options_.final_wait_limit;
  while (view.live_workers() > 0 && absl::Now() < wait_limit &&
         !stop_requested_) {
    absl::SleepFor(absl::Milliseconds(100));
    RETURN_IF_ERROR(ReportClock(true, &view));
  }
  // Stopped once its training was done: no final evaluation, but nothing is
  // left to train either (the run is done, not drained).
  if (stop_requested_) {
    LOG(INFO) << "[worker " << worker_index_
              << "] stopped after training: no final evaluation";
    return summary;
  }
  if (!options_.test_files.empty()) {
    ASSIGN_OR_RETURN(std::vector<TaskMetrics> tasks,
                     Evaluate(0, &summary.test_examples));
    summary.test_auc = tasks[0].auc;
    summary.test_logloss = tasks[0].logloss;
    if (tasks.size() > 1) {
      for (const TaskMetrics& task : tasks) {
        LOG(INFO) << "[worker " << worker_index_ << "] task " << task.task
                  << ": test AUC " << task.auc << ", logloss " << task.logloss
                  << " on " << task.examples << " labeled examples";
      }
      summary.test_tasks = std::move(tasks);
    }
  }
  return summary;
}

namespace {

ProgressOptions ProgressOptionsFor(uint32_t worker_index,
                                   const TrainerOptions& options,
                                   const std::vector<std::string>& tasks) {
  ProgressOptions progress;
  progress.tasks = tasks;
  progress.worker = worker_index;
  progress.every = options.progress_every;
  progress.interval_metrics_out = options.interval_metrics_out;
  progress.metrics = options.metrics;
  return progress;
}

}  // namespace

absl::StatusOr<TrainingSummary> Trainer::Run() {
  RETURN_IF_ERROR(CheckLayout());
  RETURN_IF_ERROR(DeclareTables());
  RETURN_IF_ERROR(ComputeStateFloats());
  // RequestStop() cancels the input only while Run() holds it (from
  // OpenInput() on; the cleanup runs before the input is destroyed, on
  // every path).
  absl::Cleanup forget_source = [this] {
    absl::MutexLock lock(&source_mu_);
    source_ = nullptr;
  };
  ClockResponse view;
  ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> reader, JoinCluster(&view));
  const int64_t first_step = clock_.value();
  const int64_t first_examples = examples_.load();
  // Going on from a position (a resume): another worker may have finished
  // what was left of its share before this one came.
  RETURN_IF_ERROR(WaitForWorkers(&view, /*count_finished=*/first_examples > 0));

  Heartbeat heartbeat(
      options_.lease / 3,
      [this](absl::Duration retry_for) {
        ClockResponse beat_view;
        return ReportClock(false, &beat_view, retry_for);
      },
      absl::StrCat("[worker ", worker_index_, "]"));
  StalenessGateOptions gate_options;
  gate_options.staleness = options_.staleness;
  gate_options.read_my_writes = options_.read_my_writes;
  gate_options.replays_own_pushes = ReplaysOwnPushes();
  Pipeline pipeline(
      gate_options, &clock_,
      [this]() -> absl::StatusOr<ClockResponse> {
        ClockResponse gate_view;
        RETURN_IF_ERROR(ReportClock(false, &gate_view));
        return gate_view;
      },
      options_.max_pushes_in_flight);
  pipeline.hold_at = view.hold_at();
  {
    absl::MutexLock lock(&idle_mu_);
    hold_at_ = view.hold_at();
  }
  std::thread prefetcher([&] { Prefetch(*reader, first_step, pipeline); });
  std::thread pusher([&] { PushSteps(pipeline); });

  TrainingSummary summary;
  summary.backend = backend_->name();
  const absl::Time start = absl::Now();
  ProgressReporter progress(
      ProgressOptionsFor(worker_index_, options_, task_names_), start);
  if (absl::Status computed = ComputeSteps(pipeline, progress, &summary);
      !computed.ok()) {
    pipeline.Fail(computed);
  }
  pipeline.pending_pushes.Close();
  pusher.join();
  pipeline.ready.Close();
  prefetcher.join();
  heartbeat.Stop();
  RETURN_IF_ERROR(pipeline.error());
  if (progress.HasSteps()) {
    progress.Report(absl::Now(), Progress(pipeline, summary, {}));
  }
  progress.Finish();
  summary.final_train_loss = progress.last_loss();
  // A file not trained on to its end (a stop) is not reported: its restart
  // scores what is left of it.
  validation_file_.clear();
  validation_scores_.Clear();
  if (const auto* follow = dynamic_cast<const FollowReader*>(reader.get()))
    summary.late_files = follow->late_files();
  Summarize(pipeline, *reader, first_step, absl::Now() - start, &summary);
  if (stop_requested_) {
    return LeaveDrained(std::move(summary), first_step, first_examples);
  }
  return LeaveFinished(std::move(summary));
}

}  // namespace ps::worker
