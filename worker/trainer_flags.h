// File: worker/trainer_flags.h
//
// ps_worker's flags, defined in trainer_flags.cc (linked only into
// ps_worker), turned into the options of its parts. Each function checks the
// flags it reads; a bad one is INVALID_ARGUMENT with the line ps_worker
// prints before it exits 64. Call them after absl::ParseCommandLine().

#ifndef PS_WORKER_TRAINER_FLAGS_H_
#define PS_WORKER_TRAINER_FLAGS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "cluster/etcd_job_flags.h"
#include "kernels/backend.h"
#include "worker/trainer.h"

namespace ps::worker {

// What ps_worker's main itself does with the flags, beside training.
struct WorkerFlags {
  uint32_t worker_index = 0;
  // After SIGTERM or SIGINT, how long the drain may take (--drain_seconds).
  absl::Duration drain;
  // --metrics_out and --metrics_listen (empty: none).
  std::string metrics_out;
  std::string metrics_listen;
  // Worker 0's periodic checkpoints: where, how many kept.
  std::string checkpoint_dir;
  int checkpoints_to_keep = 3;
  // Worker 0's periodic exports (ops/periodic_exporter.h): how often (zero:
  // none), where, a base after how many deltas, bases kept, the format.
  absl::Duration export_every = absl::ZeroDuration();
  std::string export_dir;
  int base_export_every = 12;
  int exports_to_keep = 2;
  bool export_fp16 = false;
  // The shards' admin token, read from --token_file (empty: none).
  std::string admin_token;
  // --etcd and --job: where the shards are found, when not --servers.
  cluster::EtcdJob etcd;
};

absl::StatusOr<WorkerFlags> WorkerFlagsFromFlags();

// Input, model, tables, consistency, pacing, --resume_from and periodic
// checkpoints (worker 0 only; others log that they take none).
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags();

// Built-in model `name` (model/builtin_specs.h) for `layout`, with
// --embedding_dim, --hidden and the optimizers.
absl::StatusOr<model::ModelSpec> BuiltinSpecFromFlags(
    const std::string& name, const model::InputLayout& layout);

// With --print_model_spec=NAME: that built-in's spec as text, for the
// layout flags (with a comment line saying which); else nullopt.
absl::StatusOr<std::optional<std::string>> PrintedModelSpecFromFlags();

// The backend --device, --gpu, --tf32, --bf16 and --cpu_threads ask for
// `options`' model: CUDA when asked for or (auto) usable, else the CPU; each
// choice logged.
absl::StatusOr<std::unique_ptr<kernels::Backend>> BackendFromFlags(
    const TrainerOptions& options);

// --cpu_threads=auto: all `cores` for a model whose dense layers do at least
// the bound's multiply-adds per example (kFp32GemmBoundMultiplyAdds for FP32
// GEMMs, kGemmBoundMultiplyAdds for bfloat16 inputs), whose GEMMs then take
// most of a step; else 1, leaving the other cores to the worker's pipeline
// and to shards on the same machine. On 2 cores beside one shard, a second
// GEMM thread made dcn_v2 (695k) 1.3x faster in FP32 and 1.1x with
// bfloat16; in FP32 it made wide_deep and deepfm (143k) about 1.05x faster
// and dlrm (129k) 1.1x, with bfloat16 wide_deep gained nothing and dlrm
// lost up to 12%.
inline constexpr int64_t kGemmBoundMultiplyAdds = 500'000;
inline constexpr int64_t kFp32GemmBoundMultiplyAdds = 100'000;
int AutoCpuThreads(int64_t dense_multiply_adds_per_example, int cores,
                   bool bf16);

// The CPU backend's GEMM threads for `options`' model: --cpu_threads, a
// number or auto (AutoCpuThreads over this process's cores).
absl::StatusOr<int> CpuThreadsFromFlags(const TrainerOptions& options);

// The shards, the coordinator, timeouts, retries, TLS, the wire format and
// the worker token (which must not travel in plaintext off this host).
absl::StatusOr<client::ClientOptions> ClientOptionsFromFlags();

// --read_replicas: `training`'s options with the replicas as the shards
// (INVALID_ARGUMENT unless one per shard), or nullopt without the flag.
absl::StatusOr<std::optional<client::ClientOptions>>
EvaluationClientOptionsFromFlags(const client::ClientOptions& training);

// INVALID_ARGUMENT when `client.worker_token` would travel in plaintext to
// a shard off this host (net/tls_credentials.h); ClientOptionsFromFlags()
// checks it against --servers, ps_worker again against shards found in etcd.
absl::Status CheckWorkerTokenStaysPrivate(const client::ClientOptions& client);

// INVALID_ARGUMENT when `flags.admin_token` would travel in plaintext to a
// shard off this host (net/tls_credentials.h).
absl::Status CheckAdminTokenStaysPrivate(const WorkerFlags& flags,
                                         const client::ClientOptions& client);

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINER_FLAGS_H_
