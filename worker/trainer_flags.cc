#include "worker/trainer_flags.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/address_list.h"
#include "base/manifest.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "base/usable_cores.h"
#include "cluster/etcd_job_flags.h"
#include "glog/logging.h"
#include "kernels/cuda_backend.h"
#include "model/batch_inputs.h"
#include "model/builtin_specs.h"
#include "model/dense_chunks.h"
#include "model/model_plan.h"
#include "net/client_tls_flags.h"
#include "net/tls_credentials.h"
#include "worker/input/layout_flags.h"

ABSL_FLAG(std::string, servers, "127.0.0.1:50051",
          "Comma-separated host:port of every shard, in shard-index order.");
ABSL_FLAG(std::string, coordinator, "",
          "host:port of the clock coordinator. Default: the first server, "
          "or under --etcd the shard elected there (followed when another "
          "takes over).");
ABSL_FLAG(int32_t, worker_index, 0,
          "This worker's index, in [0, num_workers).");
ABSL_FLAG(
    int32_t, num_workers, 1,
    "Workers sharing the training data. Worker i reads files i, i + n, ... "
    "when there are at least n files; else the i-th of n byte ranges of each "
    "plain file, or lines i, i + n, ... when some file is gzip'd.");
ABSL_FLAG(std::string, train, "",
          "Training click logs: comma-separated paths or globs; plain or gzip. "
          "Required, unless --follow.");
ABSL_FLAG(std::string, follow, "",
          "Train on the files of this directory, in name order, as they "
          "arrive, instead of --train: a file counts once <name>.done exists "
          "beside it. Every worker reads its share of every file; the worker "
          "waits when there is nothing new, until SIGTERM or "
          "--follow_until. Each file's examples are scored before they are "
          "trained on (progressive validation, logged and in the metrics). "
          "A restart goes on at the file and offset the coordinator (or "
          "--resume_from's checkpoint) recorded.");
ABSL_FLAG(std::string, follow_until, "",
          "With --follow: stop (finished) once this file of the directory "
          "has been trained on, or a later name appears without it. Empty: "
          "follow until SIGTERM.");
ABSL_FLAG(int32_t, follow_poll_ms, 1000,
          "With --follow: how often to look for new files when there is "
          "nothing new.");
ABSL_FLAG(std::string, test, "",
          "Test click logs for AUC and logloss; empty: none.");
ABSL_FLAG(std::string, read_replicas, "",
          "HOST:PORT of a replica of each shard (ps_server --replica_of), in "
          "--servers' order: evaluations pull the model from them, off the "
          "primaries, seeing their pushes up to the replicas' lag. Empty: "
          "evaluations pull from the shards.");
ABSL_FLAG(std::string, model, "wide_deep",
          "A built-in model: lr, wide_deep, deepfm, dcn_v2, dlrm, mmoe (a "
          "task per label; two labels at least) or din (attention over the "
          "first seq column) (docs/models.md). Ignored with --model_spec.");
ABSL_FLAG(std::string, model_spec, "",
          "A model spec file (text proto, docs/models.md) to train instead of "
          "a built-in; --print_model_spec prints one to start from.");
ABSL_FLAG(std::string, print_model_spec, "",
          "Print built-in NAME's spec for the layout flags (--columns, "
          "--crosses, ...) and --embedding_dim, --hidden and the optimizers, "
          "and exit.");
ABSL_FLAG(int32_t, embedding_dim, 16,
          "Embedding dimension of a built-in with embeddings.");
ABSL_FLAG(std::string, hidden, "256,128",
          "Hidden layer widths of a built-in's (top) MLP.");
ABSL_FLAG(bool, wide_in_embedding_row, false,
          "wide_deep and deepfm without --crosses: the shards keep each "
          "key's wide weight in its embedding row (one lookup, push and "
          "write-back per key instead of two; the model spec's "
          "stored_with). Its tables differ from a run without it: resume "
          "a checkpoint with the setting it was taken with. Needs shards, "
          "ps_predict and ps_serve of a build that has this flag.");
ABSL_FLAG(int32_t, batch_size, 4096, "Examples per step.");
ABSL_FLAG(int32_t, epochs, 1, "Passes over the training data.");
ABSL_FLAG(int32_t, shuffle_buffer, 0,
          "Shuffle the training examples through a buffer of this many (drawn "
          "at random, so each epoch's order differs); 0: file order.");
ABSL_FLAG(uint64_t, shuffle_seed, 1,
          "Seed of --shuffle_buffer's draws (mixed with the worker index and "
          "the epoch).");
ABSL_FLAG(
    std::string, embedding_optimizer, "adagrad",
    "Server-side optimizer of a built-in's embeddings: sgd, adagrad, adam "
    "or ftrl (a --model_spec names each table's own).");
ABSL_FLAG(double, learning_rate, 0.05,
          "Learning rate of a built-in's embeddings.");
ABSL_FLAG(double, adagrad_initial_accumulator, 0.1,
          "Adagrad's starting squared-gradient sum (any table on Adagrad), "
          "> 0; smaller takes bigger first steps.");
ABSL_FLAG(double, ftrl_l1, 0.0,
          "FTRL's L1 regularization (any table on FTRL); > 0 makes weights "
          "exactly zero.");
ABSL_FLAG(double, ftrl_l2, 0.0, "FTRL's L2 regularization.");
ABSL_FLAG(uint64_t, init_seed, 0,
          "Mixed into every table's initializer seed: another value draws "
          "other initial parameters (embeddings and dense tensors). Every "
          "worker of a job passes the same value; part of the tables' spec. "
          "0: the default seeds.");
ABSL_FLAG(uint32_t, admit_after, 1,
          "The sparse tables (embeddings, wide weights) store a key only at "
          "its Nth push; until then it trains with its initial value and its "
          "gradients are counted, not applied (1: every key, at its first "
          "push; at most 255). Part of the tables' spec.");
ABSL_FLAG(uint32_t, row_ttl_s, 0,
          "The sparse tables' rows expire when not updated for this many "
          "seconds (0: never); part of the tables' spec.");
ABSL_FLAG(uint32_t, evict_below_count, 0,
          "With --row_ttl_s: only rows pushed fewer than this many times "
          "expire (0: any idle row).");
ABSL_FLAG(std::string, wide_optimizer, "ftrl",
          "Optimizer of a built-in's per-key wide weights.");
ABSL_FLAG(double, wide_learning_rate, 0.05,
          "Learning rate (FTRL alpha) of a built-in's wide weights.");
ABSL_FLAG(std::string, dense_optimizer, "adam",
          "Optimizer of a built-in's MLP and dense weights.");
ABSL_FLAG(double, dense_learning_rate, 0.001,
          "Learning rate of a built-in's MLP and dense weights.");
ABSL_FLAG(
    std::string, staleness, "0",
    "Bounded staleness: a number N (a worker may be at most N steps ahead "
    "of the slowest live worker; 0 is bulk-synchronous) or 'async'.");
ABSL_FLAG(bool, read_my_writes, true,
          "Pull a step's rows only once this worker's own earlier pushes are "
          "acknowledged (other workers may still lag by --staleness): a step "
          "never trains on rows older than this worker's own updates. False "
          "lets a worker's pulls overlap its own pushes too, which costs "
          "accuracy (BENCHMARKS.md).");
ABSL_FLAG(
    std::string, overlay_own_pushes, "alone",
    "alone, always or never. With --read_my_writes and --staleness other "
    "than 0: pull a step's rows while the step before computes and replay "
    "that step's push (not yet applied) onto the rows both touch, with the "
    "rows' pulled optimizer state and the shards' optimizer code, instead of "
    "waiting for the push. 'alone' (with --num_workers=1): the same rows bit "
    "for bit, without the pull and the push on the step's critical path. "
    "With other workers the early pull misses their last pushes, which "
    "costs some accuracy (BENCHMARKS.md); 'always' accepts that. Only with "
    "--wire_format=fp32, --admit_after=1, --row_ttl_s=0, no "
    "--delay_compensation and no --follow (a step's push would wait for "
    "the next file); otherwise the worker waits.");
ABSL_FLAG(bool, staleness_aware_lr, false,
          "Divide a step's learning rates by the staleness its pull saw, "
          "when above 1 (Zhang et al., IJCAI 2016).");
ABSL_FLAG(double, delay_compensation, 0.0,
          "DC-ASGD's lambda for the dense gradients (0: off): each push "
          "pulls the dense parameters again and corrects for the updates "
          "made since its step's pull.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "Learning-rate schedule, every table: constant, or warmup:W "
          "and/or one of exponential:H (halve every H steps), inverse_sqrt, "
          "cosine:T; e.g. warmup:20,cosine:500.");
ABSL_FLAG(
    int32_t, lease_ms, 5000,
    "A worker that stops reporting for this long no longer holds others back.");
ABSL_FLAG(std::string, wire_format, "fp32",
          "How pulled rows and pushed gradients travel: fp32, fp16 (half "
          "the bytes; pushes scaled per request by a power of two) or bf16 "
          "(half the bytes, float's range). The shards store float32 "
          "either way; fp16 and bf16 need shards that know wire formats.");
ABSL_FLAG(std::string, resume_from, "",
          "A checkpoint directory (ps_admin checkpoint, or one of "
          "--checkpoint_dir's): go on from its clocks and this worker's input "
          "position there (the shards restored from it with --restore_from). "
          "Needs the same --train, --num_workers, --batch_size and --epochs.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Worker 0: take a checkpoint of the cluster every this many steps "
          "into --checkpoint_dir/ckpt-<cut>/, named after the clock the "
          "checkpoint holds (0: never).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where --checkpoint_every_steps puts checkpoints (a path on the "
          "shards' file system).");
ABSL_FLAG(int32_t, checkpoints_to_keep, 3,
          "How many of the newest checkpoints to keep in --checkpoint_dir "
          "(0: all).");
ABSL_FLAG(int32_t, export_every_s, 0,
          "Worker 0: every this many seconds, write an export of the model "
          "for serving (ps_serve, ps_predict) into "
          "--export_dir/export-<n>/: a delta of the one before (the rows "
          "changed since), or a full export first, after every "
          "--base_export_every deltas and when the shards cannot write a "
          "delta; and one more when training ends. 0: none.");
ABSL_FLAG(std::string, export_dir, "",
          "Where --export_every_s puts exports (a path on the shards' file "
          "system, which ps_serve --model_dir reads).");
ABSL_FLAG(int32_t, base_export_every, 12,
          "With --export_every_s: a full export after this many deltas of "
          "one (0: only when the shards cannot write a delta).");
ABSL_FLAG(int32_t, exports_to_keep, 2,
          "With --export_every_s: the full exports kept in --export_dir, each "
          "with the deltas over it (0: all).");
ABSL_FLAG(std::string, export_format, "fp32",
          "With --export_every_s: the weights as fp32 or fp16.");
ABSL_FLAG(std::string, worker_token_file, "",
          "The shards' worker token (their --worker_token_file), sent with "
          "clock reports and table declarations.");
ABSL_FLAG(std::string, token_file, "",
          "The shards' admin token (their --admin_token_file), for taking "
          "checkpoints.");
ABSL_FLAG(int32_t, start_timeout_s, 300,
          "Under a bounded --staleness, the first step waits until "
          "--num_workers workers have reported to the coordinator, or this "
          "many seconds (then it starts with those there).");
ABSL_FLAG(int32_t, max_pushes_in_flight, 2,
          "Steps whose pushes may be queued at once.");
ABSL_FLAG(
    std::string, device, "auto",
    "auto, cpu or cuda. auto picks CUDA when a GPU is present, else the CPU.");
ABSL_FLAG(int32_t, gpu, 0, "Which GPU --device=cuda|auto uses.");
ABSL_FLAG(std::string, cpu_threads, "auto",
          "Threads for the model's GEMMs on the CPU, or auto: every core for "
          "a model whose dense layers do at least 100k multiply-adds per "
          "example in FP32 (the built-ins' MLPs: 1.05-1.1x end to end on 2 "
          "cores beside a shard) or 500k with --bf16 (dcn_v2's crosses), else "
          "1 (the worker's own pipeline threads, and shards on the same "
          "machine, need the other cores). A large GEMM is cut into "
          "blocks that the threads take as each is free, so a thread slowed "
          "by other work on its core holds up at most the block it runs. "
          "Workers sharing a "
          "machine: give each its share of the cores.");
ABSL_FLAG(bool, tf32, false,
          "Run the MLP's GEMMs on TF32 tensor cores (CUDA only): faster, about "
          "1e-3 relative error instead of FP32's 1e-6.");
ABSL_FLAG(bool, bf16, false,
          "Round the MLP's GEMM inputs to bfloat16, accumulating in FP32 (the "
          "CPU backend: --device=auto then picks the CPU, --device=cuda is an "
          "error; needs AVX512_BF16, an error without it): about twice the "
          "GEMMs' FP32 speed, at ~4e-3 relative error per input. Parameters, "
          "gradients and everything else stay FP32.");
ABSL_FLAG(std::string, metrics_out, "",
          "Write the final summary as JSON here.");
ABSL_FLAG(
    std::string, interval_metrics_out, "",
    "Write per-interval metrics (JSON lines: examples, loss, AUC, ...) here.");
ABSL_FLAG(int64_t, max_bad_lines, 1000,
          "Malformed lines tolerated (counted, skipped, logged with file:line) "
          "before the worker stops with an error.");
ABSL_FLAG(int64_t, eval_every, 0,
          "Evaluate on --test every this many examples of this worker (0: only "
          "at the end).");
ABSL_FLAG(int64_t, eval_lines, 100000,
          "Lines of --test used by the periodic evaluations (0: all); the "
          "final evaluation uses all.");
ABSL_FLAG(int32_t, progress_every_s, 2, "Seconds between progress lines.");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics): examples, "
          "loss, recent and test AUC, staleness, time per stage of a step. "
          "Port 0 picks a free one (logged). Empty: none.");
ABSL_FLAG(int32_t, rpc_timeout_s, 30, "Deadline of one RPC to a shard.");
ABSL_FLAG(int32_t, retry_for_s, 600,
          "How long a call keeps retrying a shard that is unavailable "
          "(restarting), with jittered backoff; past it the worker exits 69. "
          "The default outlasts a shard that Kubernetes reschedules off a "
          "lost node (300 s until the node is declared gone, the pod's grace "
          "period, scheduling, the push log's replay).");
ABSL_FLAG(int32_t, drain_seconds, 10,
          "On SIGTERM or SIGINT: stop reading, finish the step being pushed "
          "(every step whole on every shard), give the lease back, write "
          "--metrics_out, and exit 75 within this long. Past it, or on a "
          "second signal, exit 70 at once (0 if the input was done): the "
          "step being pushed may then be on some shards only.");
ABSL_FLAG(bool, restart_from_start, false,
          "Start from the beginning of this worker's input even when the "
          "coordinator holds a clock and input position for this "
          "--worker_index (a process that crashed or was stopped before its "
          "end), instead of going on from them.");
ABSL_FLAG(
    uint32_t, max_keys_per_request, 65536,
    "Keys per request; must not exceed the servers' --max_keys_per_request.");
ABSL_FLAG(int32_t, final_wait_s, 1800,
          "At the end, wait up to this long for the other workers to finish "
          "before the final evaluation.");
ABSL_FLAG(int32_t, slow_step_ms, 0,
          "Testing aid: sleep this long in every step.");

namespace ps::worker {
namespace {

absl::Status Usage(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// `spec` for optimizer `name` at `learning_rate`, with the Adagrad and FTRL
// flags where they apply. False for an unknown name or a rate that is not
// positive.
bool ParseOptimizer(const std::string& name, double learning_rate,
                    OptimizerSpec* spec) {
  OptimizerSpec::Kind kind;
  if (!OptimizerKindFromName(name, &kind)) return false;
  spec->set_kind(kind);
  spec->set_learning_rate(static_cast<float>(learning_rate));
  if (spec->kind() == OptimizerSpec::ADAGRAD) {
    spec->set_initial_accumulator(
        static_cast<float>(absl::GetFlag(FLAGS_adagrad_initial_accumulator)));
  }
  if (spec->kind() == OptimizerSpec::FTRL) {
    spec->set_l1(static_cast<float>(absl::GetFlag(FLAGS_ftrl_l1)));
    spec->set_l2(static_cast<float>(absl::GetFlag(FLAGS_ftrl_l2)));
  }
  return learning_rate > 0;
}

// --train, this worker's share, batches, epochs, shuffling, the layout and
// --test.
absl::Status InputFromFlags(TrainerOptions* options) {
  ReaderOptions& train = options->train;
  train.files = absl::GetFlag(FLAGS_train);
  train.worker_index = absl::GetFlag(FLAGS_worker_index);
  train.num_workers = absl::GetFlag(FLAGS_num_workers);
  train.batch_size = absl::GetFlag(FLAGS_batch_size);
  train.epochs = absl::GetFlag(FLAGS_epochs);
  train.max_bad_lines = absl::GetFlag(FLAGS_max_bad_lines);
  train.shuffle_buffer = absl::GetFlag(FLAGS_shuffle_buffer);
  train.shuffle_seed = absl::GetFlag(FLAGS_shuffle_seed);
  if (train.shuffle_buffer < 0) return Usage("--shuffle_buffer must be >= 0");
  absl::StatusOr<model::InputLayout> layout = InputLayoutFromFlags();
  if (!layout.ok()) return Usage(layout.status().message());
  train.layout = *layout;
  options->test_files = absl::GetFlag(FLAGS_test);
  options->follow_dir = absl::GetFlag(FLAGS_follow);
  options->follow_until = absl::GetFlag(FLAGS_follow_until);
  options->follow_poll =
      absl::Milliseconds(absl::GetFlag(FLAGS_follow_poll_ms));
  if (options->follow_dir.empty()) {
    if (train.files.empty()) return Usage("--train (or --follow) is required");
    if (!options->follow_until.empty())
      return Usage("--follow_until needs --follow");
    return absl::OkStatus();
  }
  if (!train.files.empty()) return Usage("give --train or --follow, not both");
  if (train.epochs != 1)
    return Usage("--follow reads each file once: leave --epochs at 1");
  if (absl::GetFlag(FLAGS_follow_poll_ms) <= 0)
    return Usage("--follow_poll_ms must be > 0");
  return absl::OkStatus();
}

// The built-ins' options: --embedding_dim, --hidden, the optimizers, and
// the layout's crosses and pooling.
absl::StatusOr<model::BuiltinOptions> BuiltinOptionsFromFlags(
    const model::InputLayout& layout) {
  model::BuiltinOptions options;
  options.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  if (options.embedding_dim < 1) return Usage("--embedding_dim must be >= 1");
  options.hidden.clear();
  for (absl::string_view width : absl::StrSplit(absl::GetFlag(FLAGS_hidden),
                                                ',', absl::SkipWhitespace())) {
    int value = 0;
    if (!absl::SimpleAtoi(width, &value) || value < 1) {
      return Usage("--hidden must be comma-separated positive widths");
    }
    options.hidden.push_back(value);
  }
  if (!(absl::GetFlag(FLAGS_adagrad_initial_accumulator) > 0))
    return Usage("--adagrad_initial_accumulator must be > 0");
  if (absl::GetFlag(FLAGS_ftrl_l1) < 0 || absl::GetFlag(FLAGS_ftrl_l2) < 0)
    return Usage("--ftrl_l1 and --ftrl_l2 must be >= 0");
  if (!ParseOptimizer(absl::GetFlag(FLAGS_embedding_optimizer),
                      absl::GetFlag(FLAGS_learning_rate),
                      &options.embedding_optimizer) ||
      !ParseOptimizer(absl::GetFlag(FLAGS_wide_optimizer),
                      absl::GetFlag(FLAGS_wide_learning_rate),
                      &options.wide_optimizer) ||
      !ParseOptimizer(absl::GetFlag(FLAGS_dense_optimizer),
                      absl::GetFlag(FLAGS_dense_learning_rate),
                      &options.dense_optimizer)) {
    return Usage(
        "optimizers must be sgd, adagrad, adam or ftrl, with positive rates");
  }
  options.crosses = layout.crosses;
  options.pooling = layout.multi_pooling;
  options.labels = layout.label_names;
  options.wide_in_embedding_row = absl::GetFlag(FLAGS_wide_in_embedding_row);
  return options;
}

// A spec file's text, read and planned over the layout's columns.
absl::StatusOr<model::ModelSpec> ReadModelSpec(
    const std::string& path, const model::InputLayout& layout) {
  std::ifstream file(path);
  if (!file) return Usage("--model_spec: cannot read " + path);
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<model::ParsedModelSpec> parsed =
      model::ParseModelSpec(text.str());
  if (!parsed.ok()) {
    return Usage(
        absl::StrCat("--model_spec=", path, ": ", parsed.status().message()));
  }
  absl::StatusOr<model::ModelPlan> plan = model::PlanForLayout(*parsed, layout);
  if (!plan.ok()) {
    return Usage(
        absl::StrCat("--model_spec=", path, ": ", plan.status().message()));
  }
  return parsed->spec;
}

// --model_spec, or the built-in --model; the layout takes its crosses.
absl::Status ModelFromFlags(TrainerOptions* options) {
  const std::string path = absl::GetFlag(FLAGS_model_spec);
  if (!path.empty()) {
    ASSIGN_OR_RETURN(options->model,
                     ReadModelSpec(path, options->train.layout));
  } else {
    const std::string name = absl::GetFlag(FLAGS_model);
    ASSIGN_OR_RETURN(options->model,
                     BuiltinSpecFromFlags(name, options->train.layout));
    ModelCard card;
    if (name == "lr") card.set_kind(ModelCard::LR);
    if (name == "deepfm") card.set_kind(ModelCard::DEEPFM);
    // A table stored with another has no place on a built-in's card: the
    // card carries the spec.
    const bool stored_with = std::any_of(
        options->model.table().begin(), options->model.table().end(),
        [](const model::Table& table) { return !table.stored_with().empty(); });
    if (absl::GetFlag(FLAGS_wide_in_embedding_row) && !stored_with) {
      LOG(WARNING) << "--wide_in_embedding_row: " << name
                   << " keeps its tables apart (only wide_deep and deepfm "
                      "without --crosses store the wide weight in the "
                      "embedding row)";
    }
    if (!stored_with &&
        (name == "lr" || name == "wide_deep" || name == "deepfm")) {
      card.set_embedding_dim(absl::GetFlag(FLAGS_embedding_dim));
      ASSIGN_OR_RETURN(model::BuiltinOptions builtin,
                       BuiltinOptionsFromFlags(options->train.layout));
      for (int width : builtin.hidden) card.add_hidden(width);
      options->legacy_card = card;
    }
  }
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanForLayout({options->model, {}}, options->train.layout);
  if (!plan.ok()) return Usage(plan.status().message());
  if (absl::Status fitted = model::LayoutForPlan(*plan, &options->train.layout);
      !fitted.ok()) {
    return Usage(fitted.message());
  }
  return absl::OkStatus();
}

// The sparse tables' admission and expiry.
absl::Status TablesFromFlags(TrainerOptions* options) {
  if (absl::GetFlag(FLAGS_admit_after) < 1 ||
      absl::GetFlag(FLAGS_admit_after) > 255) {
    return Usage("--admit_after must be between 1 and 255");
  }
  options->admit_after = absl::GetFlag(FLAGS_admit_after);
  options->init_seed = absl::GetFlag(FLAGS_init_seed);
  if (absl::GetFlag(FLAGS_evict_below_count) > 0 &&
      absl::GetFlag(FLAGS_row_ttl_s) == 0) {
    return Usage("--evict_below_count needs --row_ttl_s");
  }
  options->row_ttl_s = absl::GetFlag(FLAGS_row_ttl_s);
  options->evict_below_count = absl::GetFlag(FLAGS_evict_below_count);
  return absl::OkStatus();
}

// --staleness, read-my-writes and what goes with them, the learning-rate
// schedule.
absl::Status ConsistencyFromFlags(TrainerOptions* options) {
  const std::string staleness = absl::GetFlag(FLAGS_staleness);
  if (staleness == "async") {
    options->staleness = -1;
  } else if (!absl::SimpleAtoi(staleness, &options->staleness) ||
             options->staleness < 0) {
    return Usage("--staleness must be a number >= 0 or 'async', not '" +
                 staleness + "'");
  }
  options->read_my_writes = absl::GetFlag(FLAGS_read_my_writes);
  using Overlay = TrainerOptions::OwnPushOverlay;
  const std::string overlay = absl::GetFlag(FLAGS_overlay_own_pushes);
  if (overlay == "alone") {
    options->overlay_own_pushes = Overlay::kAlone;
  } else if (overlay == "always") {
    options->overlay_own_pushes = Overlay::kAlways;
  } else if (overlay == "never") {
    options->overlay_own_pushes = Overlay::kNever;
  } else {
    return Usage("--overlay_own_pushes must be alone, always or never, not '" +
                 overlay + "'");
  }
  options->staleness_aware_lr = absl::GetFlag(FLAGS_staleness_aware_lr);
  options->delay_compensation =
      static_cast<float>(absl::GetFlag(FLAGS_delay_compensation));
  if (!(options->delay_compensation >= 0))
    return Usage("--delay_compensation must be >= 0");
  absl::StatusOr<LearningRateSchedule> schedule =
      LearningRateSchedule::Parse(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return Usage(schedule.status().message());
  options->lr_schedule = *schedule;
  return absl::OkStatus();
}

// The lease, the start, the pipeline's depth, evaluation, progress and the
// end.
absl::Status PacingFromFlags(TrainerOptions* options) {
  if (absl::GetFlag(FLAGS_lease_ms) < 1)
    return Usage("--lease_ms must be positive");
  options->lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  options->num_workers = absl::GetFlag(FLAGS_num_workers);
  if (absl::GetFlag(FLAGS_start_timeout_s) < 0)
    return Usage("--start_timeout_s must be >= 0");
  options->start_timeout = absl::Seconds(absl::GetFlag(FLAGS_start_timeout_s));
  options->max_pushes_in_flight = absl::GetFlag(FLAGS_max_pushes_in_flight);
  options->eval_every = absl::GetFlag(FLAGS_eval_every);
  options->eval_lines = absl::GetFlag(FLAGS_eval_lines);
  options->progress_every =
      absl::Seconds(absl::GetFlag(FLAGS_progress_every_s));
  options->interval_metrics_out = absl::GetFlag(FLAGS_interval_metrics_out);
  options->final_wait_limit = absl::Seconds(absl::GetFlag(FLAGS_final_wait_s));
  options->slow_step = absl::Milliseconds(absl::GetFlag(FLAGS_slow_step_ms));
  return absl::OkStatus();
}

// --resume_from: this worker's clock and examples in that checkpoint, if it
// has them.
absl::Status ResumeFromFlags(TrainerOptions* options) {
  const std::string dir = absl::GetFlag(FLAGS_resume_from);
  if (dir.empty()) return absl::OkStatus();
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir);
  if (!manifest.ok()) return Usage(manifest.status().ToString());
  const uint32_t worker_index = absl::GetFlag(FLAGS_worker_index);
  for (const auto& worker : manifest->workers()) {
    if (worker.worker() != worker_index) continue;
    options->resume_clock = worker.clock();
    options->resume_examples = worker.examples();
    options->resume_position.file = worker.input_position().file();
    options->resume_position.file_examples =
        worker.input_position().file_examples();
    LOG(INFO) << "resuming from " << dir << " at clock "
              << options->resume_clock << " after " << options->resume_examples
              << " examples";
    return absl::OkStatus();
  }
  LOG(WARNING) << dir << " has no worker " << worker_index
               << ": starting as a new worker at the live minimum";
  return absl::OkStatus();
}

// The shards' addresses and `client`'s TLS files: where a token goes.
std::vector<std::string> TokenDestinations(
    const client::ClientOptions& client) {
  std::vector<std::string> addresses = client.servers;
  if (!client.coordinator.empty()) addresses.push_back(client.coordinator);
  return addresses;
}

}  // namespace

absl::StatusOr<model::ModelSpec> BuiltinSpecFromFlags(
    const std::string& name, const model::InputLayout& layout) {
  ASSIGN_OR_RETURN(model::BuiltinOptions options,
                   BuiltinOptionsFromFlags(layout));
  absl::StatusOr<model::ModelSpec> spec =
      model::BuiltinModelSpec(name, model::ColumnUses(layout), options);
  if (!spec.ok())
    return Usage("--model: " + std::string(spec.status().message()));
  return spec;
}

absl::StatusOr<std::optional<std::string>> PrintedModelSpecFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_print_model_spec);
  if (name.empty()) return std::nullopt;
  absl::StatusOr<model::InputLayout> layout = InputLayoutFromFlags();
  if (!layout.ok()) return Usage(layout.status().message());
  ASSIGN_OR_RETURN(model::ModelSpec spec, BuiltinSpecFromFlags(name, *layout));
  return absl::StrCat(
      "# ", name, " for --columns=", model::ColumnsSpec(*layout),
      "\n# (ps_worker --print_model_spec=", name,
      "); train it with --model_spec=FILE.\n", model::ModelSpecText(spec));
}

absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags() {
  TrainerOptions options;
  RETURN_IF_ERROR(InputFromFlags(&options));
  RETURN_IF_ERROR(ModelFromFlags(&options));
  RETURN_IF_ERROR(TablesFromFlags(&options));
  RETURN_IF_ERROR(ConsistencyFromFlags(&options));
  RETURN_IF_ERROR(PacingFromFlags(&options));
  RETURN_IF_ERROR(ResumeFromFlags(&options));
  options.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  if (options.checkpoint_every_steps < 0)
    return Usage("--checkpoint_every_steps must be >= 0");
  if (options.checkpoint_every_steps > 0 &&
      absl::GetFlag(FLAGS_worker_index) != 0) {
    LOG(INFO) << "--checkpoint_every_steps: worker 0 takes the cluster's "
                 "checkpoints; worker "
              << absl::GetFlag(FLAGS_worker_index) << " takes none";
    options.checkpoint_every_steps = 0;
  }
  if (options.checkpoint_every_steps > 0 &&
      absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return Usage("--checkpoint_every_steps needs --checkpoint_dir");
  }
  options.assign_incarnation = true;
  options.resume_from_coordinator = !absl::GetFlag(FLAGS_restart_from_start);
  return options;
}

int AutoCpuThreads(int64_t dense_multiply_adds_per_example, int cores,
                   bool bf16) {
  const int64_t bound =
      bf16 ? kGemmBoundMultiplyAdds : kFp32GemmBoundMultiplyAdds;
  return dense_multiply_adds_per_example >= bound ? cores : 1;
}

absl::StatusOr<int> CpuThreadsFromFlags(const TrainerOptions& options) {
  const std::string threads = absl::GetFlag(FLAGS_cpu_threads);
  if (threads == "auto") {
    absl::StatusOr<model::ModelPlan> plan =
        model::PlanForLayout({options.model, {}}, options.train.layout);
    if (!plan.ok()) return Usage(plan.status().message());
    const bool bf16 = absl::GetFlag(FLAGS_bf16);
    const int chosen = AutoCpuThreads(plan->DenseMultiplyAddsPerExample(),
                                      ps::UsableCores(), bf16);
    LOG(INFO) << "--cpu_threads=auto: " << chosen << " for "
              << plan->DenseMultiplyAddsPerExample()
              << " dense multiply-adds per example"
              << (bf16 ? " (bfloat16 GEMMs)" : " (FP32 GEMMs)");
    return chosen;
  }
  int count = 0;
  if (!absl::SimpleAtoi(threads, &count) || count < 1) {
    return Usage("--cpu_threads must be auto or a number >= 1, not " + threads);
  }
  return count;
}

absl::StatusOr<std::unique_ptr<kernels::Backend>> BackendFromFlags(
    const TrainerOptions& options) {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return Usage("--device must be auto, cpu or cuda");
  }
  const bool bf16 = absl::GetFlag(FLAGS_bf16);
  if (bf16 && device == "cuda") {
    return Usage("--bf16 is for the CPU backend; on CUDA use --tf32");
  }
  std::unique_ptr<kernels::Backend> backend;
  if (device == "cpu") {
    LOG(INFO) << "device: cpu, as --device=cpu asks";
  } else if (bf16) {
    LOG(INFO) << "device: cpu, as --bf16 asks (a CPU option)";
  } else {
    kernels::CudaOptions cuda_options;
    cuda_options.device = absl::GetFlag(FLAGS_gpu);
    cuda_options.precision = absl::GetFlag(FLAGS_tf32)
                                 ? kernels::GemmPrecision::kTf32
                                 : kernels::GemmPrecision::kFp32;
    const kernels::Status created =
        kernels::NewCudaBackend(cuda_options, &backend);
    if (created.ok()) {
      LOG(INFO) << "device: cuda (GPU " << cuda_options.device << ", "
                << (absl::GetFlag(FLAGS_tf32) ? "TF32" : "FP32") << " GEMMs)";
      return backend;
    }
    if (device == "cuda") return Usage("--device=cuda: " + created.message());
    LOG(INFO) << "device: cpu; no usable GPU: " << created.message();
  }
  kernels::CpuOptions cpu_options;
  ASSIGN_OR_RETURN(cpu_options.threads, CpuThreadsFromFlags(options));
  cpu_options.precision =
      bf16 ? kernels::GemmPrecision::kBf16 : kernels::GemmPrecision::kFp32;
  const kernels::Status created = kernels::NewCpuBackend(cpu_options, &backend);
  if (!created.ok()) return Usage("--bf16: " + created.message());
  LOG(INFO) << "GEMMs: " << cpu_options.threads << " thread(s), "
            << (bf16 ? "bfloat16 inputs" : "FP32");
  return backend;
}

absl::StatusOr<client::ClientOptions> ClientOptionsFromFlags() {
  client::ClientOptions client;
  if (const std::string format = absl::GetFlag(FLAGS_wire_format);
      format == "fp16") {
    client.wire_format = WireFormat::FP16;
  } else if (format == "bf16") {
    client.wire_format = WireFormat::BF16;
  } else if (format != "fp32") {
    return Usage("--wire_format must be fp32, fp16 or bf16, not " + format);
  }
  client.servers = SplitAddressList(absl::GetFlag(FLAGS_servers));
  client.coordinator = absl::GetFlag(FLAGS_coordinator);
  client.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  if (absl::GetFlag(FLAGS_retry_for_s) < 0)
    return Usage("--retry_for_s must be >= 0");
  client.retry_for = absl::Seconds(absl::GetFlag(FLAGS_retry_for_s));
  client.max_keys_per_request = absl::GetFlag(FLAGS_max_keys_per_request);
  client.tls = ClientTlsFilesFromFlags();
  if (const std::string path = absl::GetFlag(FLAGS_worker_token_file);
      !path.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(path);
    if (!read.ok()) return Usage(read.status().ToString());
    client.worker_token = *std::move(read);
    RETURN_IF_ERROR(CheckWorkerTokenStaysPrivate(client));
  }
  return client;
}

absl::StatusOr<std::optional<client::ClientOptions>>
EvaluationClientOptionsFromFlags(const client::ClientOptions& training) {
  const std::string replicas = absl::GetFlag(FLAGS_read_replicas);
  if (replicas.empty()) return std::nullopt;
  client::ClientOptions evaluation = training;
  evaluation.servers = SplitAddressList(replicas);
  if (evaluation.servers.size() != training.servers.size()) {
    return Usage(absl::StrCat("--read_replicas names ",
                              evaluation.servers.size(),
                              " replicas, one per shard of --servers (",
                              training.servers.size(), ")"));
  }
  // The replicas are the shards' places, not a job's to look up.
  evaluation.find_shards = nullptr;
  evaluation.find_coordinator = nullptr;
  return evaluation;
}

namespace {

// --export_every_s and the flags that go with it.
absl::Status ExportsFromFlags(WorkerFlags* flags) {
  const int every_s = absl::GetFlag(FLAGS_export_every_s);
  if (every_s < 0) return Usage("--export_every_s must be >= 0");
  if (absl::GetFlag(FLAGS_base_export_every) < 0)
    return Usage("--base_export_every must be >= 0");
  if (absl::GetFlag(FLAGS_exports_to_keep) < 0)
    return Usage("--exports_to_keep must be >= 0");
  const std::string format = absl::GetFlag(FLAGS_export_format);
  if (format != "fp32" && format != "fp16")
    return Usage("--export_format must be fp32 or fp16, not " + format);
  if (every_s > 0 && absl::GetFlag(FLAGS_export_dir).empty())
    return Usage("--export_every_s needs --export_dir");
  if (every_s > 0 && flags->worker_index != 0) {
    LOG(INFO) << "--export_every_s: worker 0 writes the exports; worker "
              << flags->worker_index << " writes none";
    return absl::OkStatus();
  }
  flags->export_every = absl::Seconds(every_s);
  flags->export_dir = absl::GetFlag(FLAGS_export_dir);
  flags->base_export_every = absl::GetFlag(FLAGS_base_export_every);
  flags->exports_to_keep = absl::GetFlag(FLAGS_exports_to_keep);
  flags->export_fp16 = format == "fp16";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerFlags> WorkerFlagsFromFlags() {
  WorkerFlags flags;
  absl::StatusOr<cluster::EtcdJob> etcd = cluster::EtcdJobFromFlags();
  if (!etcd.ok()) return Usage(etcd.status().message());
  flags.etcd = *std::move(etcd);
  flags.worker_index = absl::GetFlag(FLAGS_worker_index);
  if (absl::GetFlag(FLAGS_drain_seconds) < 0)
    return Usage("--drain_seconds must be >= 0");
  flags.drain = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  flags.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  flags.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  flags.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  flags.checkpoints_to_keep = absl::GetFlag(FLAGS_checkpoints_to_keep);
  RETURN_IF_ERROR(ExportsFromFlags(&flags));
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(path);
    if (!read.ok()) return Usage(read.status().ToString());
    flags.admin_token = *std::move(read);
  }
  return flags;
}

absl::Status CheckWorkerTokenStaysPrivate(const client::ClientOptions& client) {
  absl::Status private_token = CheckTokenStaysPrivate(
      client.worker_token, client.tls, TokenDestinations(client));
  if (!private_token.ok()) return Usage(private_token.ToString());
  return absl::OkStatus();
}

absl::Status CheckAdminTokenStaysPrivate(const WorkerFlags& flags,
                                         const client::ClientOptions& client) {
  absl::Status private_token = CheckTokenStaysPrivate(
      flags.admin_token, client.tls, TokenDestinations(client));
  if (!private_token.ok()) return Usage(private_token.ToString());
  return absl::OkStatus();
}

}  // namespace ps::worker
