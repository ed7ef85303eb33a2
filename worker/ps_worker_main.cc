// ps_worker: trains a CTR model on click logs against a cluster of
// ps_server shards. See README.md and --help.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/heap_policy.h"
#include "base/lock_mode.h"
#include "base/status_macros.h"
#include "client/ps_client.h"
#include "cluster/etcd_job_flags.h"
#include "cluster/shard_directory.h"
#include "glog/logging.h"
#include "kernels/backend.h"
#include "kernels/ctr_model.h"
#include "ops/periodic_checkpointer.h"
#include "ops/periodic_exporter.h"
#include "worker/trainer.h"
#include "worker/trainer_flags.h"

namespace {

// Exits: 64 for a bad flag or input layout; for a run that failed, 69 for a
// shard unreachable past --retry_for_s, else 70 (base/exit_codes.h).
constexpr char kProgram[] = "ps_worker";

// SIGTERM and SIGINT, which StopOnSignals() waits for.
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

// Blocks the stop signals in this thread and every thread it starts from
// now on (gRPC's, the GEMM team's): first thing in main, so that none of them
// takes a signal's default action. One that comes before StopOnSignals()
// waits for it.
void BlockStopSignals() {
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

// The trainer a stop signal stops, once there is one.
std::atomic<ps::worker::Trainer*> stoppable{nullptr};
// --drain_seconds, read once the flags are parsed.
std::atomic<int64_t> drain_millis{10000};

// Waits for SIGTERM or SIGINT (blocked everywhere else): before there is a
// trainer, exits 75 at once (nothing was pushed); then asks it to stop and
// gives the drain --drain_seconds before exiting anyway, 0 if the trainer
// had finished its input and 70 otherwise (a step may be on some shards
// only); a second signal exits the same way at once. REQUIRES:
// BlockStopSignals() came first.
void StopOnSignals() {
  const sigset_t signals = StopSignals();
  std::thread([signals] {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) return;
    const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    ps::worker::Trainer* trainer = stoppable.load();
    if (trainer == nullptr) {
      std::fprintf(stderr, "ps_worker: %s before training started\n", name);
      std::fflush(stderr);
      std::_Exit(ps::kExitDrained);
    }
    const absl::Duration drain = absl::Milliseconds(drain_millis.load());
    LOG(WARNING) << name << ": stopping after the step being pushed (within "
                 << absl::FormatDuration(drain) << ")";
    trainer->RequestStop();
    auto give_up = [](const char* why) {
      ps::worker::Trainer* trainer = stoppable.load();
      if (trainer == nullptr) return;  // main is returning already
      const bool finished = trainer->finished();
      LOG(ERROR) << why << ": exiting now"
                 << (finished ? ""
                              : "; the step being pushed may be on some "
                                "shards only");
      std::fflush(stderr);
      std::_Exit(finished ? ps::kExitDone : ps::kExitFailed);
    };
    std::thread([drain, give_up] {
      absl::SleepFor(drain);
      give_up("the drain took longer than --drain_seconds");
    }).detach();
    if (sigwait(&signals, &signal) == 0) give_up("a second signal");
  }).detach();
}

// Under --etcd: the job's etcd, which the client looks the coordinator
// up in, and this worker's key there.
struct EtcdPresence {
  std::unique_ptr<ps::cluster::CoordinationStore> etcd;
  std::unique_ptr<ps::cluster::LeasedKey> worker_key;
};

// Finds the shards and the coordinator of the job in etcd and registers
// this worker there. INVALID_ARGUMENT when the worker token would travel in
// plaintext to a shard found there.
absl::StatusOr<EtcdPresence> JoinJobInEtcd(
    const ps::worker::WorkerFlags& flags,
    const ps::worker::TrainerOptions& options,
    ps::client::ClientOptions* client_options) {
  ASSIGN_OR_RETURN(
      client_options->servers,
      ps::cluster::FindJobShards(flags.etcd, options.start_timeout));
  // The worker token must not leave this host in plaintext to them either.
  RETURN_IF_ERROR(ps::worker::CheckWorkerTokenStaysPrivate(*client_options));
  EtcdPresence presence;
  ASSIGN_OR_RETURN(presence.etcd, ps::cluster::ConnectToJobEtcd(flags.etcd));
  const std::string job = flags.etcd.job;
  if (client_options->coordinator.empty()) {  // no --coordinator
    ASSIGN_OR_RETURN(client_options->coordinator,
                     ps::cluster::FindCoordinator(*presence.etcd, job,
                                                  options.start_timeout));
    client_options->find_coordinator = [etcd = presence.etcd.get(), job] {
      return ps::cluster::FindCoordinator(*etcd, job, absl::Seconds(1));
    };
  }
  // Shards that join the job later: found when the slot map first names
  // them, and held to the same rule for the worker token.
  client_options->find_shards =
      [etcd = presence.etcd.get(), job,
       options =
           *client_options]() -> absl::StatusOr<std::vector<std::string>> {
    ps::client::ClientOptions found = options;
    ASSIGN_OR_RETURN(found.servers,
                     ps::cluster::FindShards(*etcd, job, absl::Seconds(10)));
    RETURN_IF_ERROR(ps::worker::CheckWorkerTokenStaysPrivate(found));
    return found.servers;
  };
  // A coordinator that takes over waits for every registered worker.
  ASSIGN_OR_RETURN(
      presence.worker_key,
      ps::cluster::RegisterWorker(presence.etcd.get(), job,
                                  static_cast<uint32_t>(flags.worker_index),
                                  options.lease));
  return presence;
}

// How worker 0 reaches the cluster for its cuts (checkpoints, exports)
// into `dir`: the client's shards, coordinator and TLS, the admin token.
ps::CheckpointOptions CutOptions(const ps::worker::WorkerFlags& flags,
                                 const ps::client::ClientOptions& client,
                                 const std::string& dir) {
  ps::CheckpointOptions cluster;
  cluster.servers = client.servers;
  cluster.coordinator = client.coordinator;
  cluster.find_coordinator = client.find_coordinator;
  cluster.find_shards = client.find_shards;
  cluster.dir = dir;
  cluster.tls = client.tls;
  cluster.token = flags.admin_token;
  return cluster;
}

// Periodic checkpoints for worker 0 with --checkpoint_every_steps, or none.
absl::StatusOr<std::unique_ptr<ps::ops::PeriodicCheckpointer>> MakeCheckpointer(
    const ps::worker::WorkerFlags& flags,
    const ps::worker::TrainerOptions& options,
    const ps::client::ClientOptions& client) {
  if (options.checkpoint_every_steps == 0) return nullptr;
  RETURN_IF_ERROR(ps::worker::CheckAdminTokenStaysPrivate(flags, client));
  return std::make_unique<ps::ops::PeriodicCheckpointer>(
      CutOptions(flags, client, flags.checkpoint_dir),
      flags.checkpoints_to_keep);
}

// Worker 0's periodic exports with --export_every_s, or none.
absl::StatusOr<std::unique_ptr<ps::ops::PeriodicExporter>> MakeExporter(
    const ps::worker::WorkerFlags& flags,
    const ps::worker::TrainerOptions& options,
    const ps::client::ClientOptions& client) {
  if (flags.export_every <= absl::ZeroDuration()) return nullptr;
  RETURN_IF_ERROR(ps::worker::CheckAdminTokenStaysPrivate(flags, client));
  ps::ops::PeriodicExportOptions exports;
  exports.export_options.cluster = CutOptions(flags, client, flags.export_dir);
  exports.export_options.model = options.model.name();
  exports.export_options.fp16 = flags.export_fp16;
  if (flags.etcd.enabled()) exports.export_options.job = flags.etcd.job;
  exports.every = flags.export_every;
  exports.base_every = flags.base_export_every;
  exports.bases_to_keep = flags.exports_to_keep;
  return std::make_unique<ps::ops::PeriodicExporter>(exports);
}

// Logs the run's outcome and writes --metrics_out; the exit code.
int Finish(const ps::worker::TrainingSummary& summary,
           const ps::worker::TrainerOptions& options,
           const ps::worker::WorkerFlags& flags) {
  const std::string quality =
      summary.drained ? std::string("stopped early: no final evaluation")
      : options.test_files.empty()
          ? std::string("no test set (--test)")
          : absl::StrFormat("test AUC %.4f, logloss %.4f on %d examples",
                            summary.test_auc, summary.test_logloss,
                            summary.test_examples);
  LOG(INFO) << absl::StrFormat(
      "done: %d examples in %.1f s (%.0f ex/s); %s; max staleness seen %d; "
      "bad lines %d",
      summary.examples, summary.train_seconds, summary.examples_per_sec,
      quality, summary.max_staleness_seen, summary.bad_lines);
  if (!flags.metrics_out.empty()) {
    std::ofstream out(flags.metrics_out);
    out << ps::worker::SummaryToJson(summary);
    if (!out) {
      return ps::FailWith(
          kProgram, absl::InternalError("cannot write " + flags.metrics_out));
    }
  }
  return summary.drained ? ps::kExitDrained : ps::kExitDone;
}

// A client of the replicas --read_replicas names, which evaluation reads
// from (null without the flag).
absl::StatusOr<std::unique_ptr<ps::client::PsClient>> ConnectEvaluationClient(
    const std::optional<ps::client::ClientOptions>& options) {
  if (!options.has_value()) return nullptr;
  return ps::client::PsClient::Connect(*options);
}

// Stops the periodic exports and, once training ended (not drained),
// exports the model as training left it, for serving.
void ExportLast(ps::ops::PeriodicExporter& exporter,
                const absl::StatusOr<ps::worker::TrainingSummary>& summary) {
  exporter.Stop();
  if (!summary.ok() || summary->drained) return;
  absl::StatusOr<ps::ExportManifest> last = exporter.ExportNow();
  if (!last.ok()) LOG(WARNING) << "the last export failed: " << last.status();
}

// Parses the command line and sets up logging; the stop signals are
// blocked first, in every thread started later.
void InitProcess(int argc, char** argv) {
  ps::KeepFreedHeapForReuse();
  absl::SetProgramUsageMessage(
      "Trains a CTR model (lr, wide_deep, deepfm) on click logs (Criteo's "
      "layout, or --format/--columns/...) against ps_server "
      "shards.\n\nExample:\n  ps_worker "
      "--servers=127.0.0.1:50051,127.0.0.1:50052 --worker_index=0 "
      "--num_workers=2 "
      "--train='data/train-*.tsv.gz' --test=data/test.tsv "
      "--metrics_out=metrics.json");
  BlockStopSignals();
  ps::SetVersionFlag("ps_worker",
                     {"worker/trainer_flags.cc", "worker/input/layout_flags.cc",
                      "net/client_tls_flags.cc", "cluster/etcd_job_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with deadlock detection on, which records every
  // lock acquisition in a graph; the tests keep it, the binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  InitProcess(argc, argv);
  absl::StatusOr<std::optional<std::string>> printed =
      ps::worker::PrintedModelSpecFromFlags();
  if (!printed.ok()) return ps::FailUsage(kProgram, printed.status().message());
  if (printed->has_value()) {
    std::fputs((*printed)->c_str(), stdout);
    return ps::kExitDone;
  }
  absl::StatusOr<ps::worker::WorkerFlags> flags =
      ps::worker::WorkerFlagsFromFlags();
  if (!flags.ok()) return ps::FailUsage(kProgram, flags.status().message());
  drain_millis = absl::ToInt64Milliseconds(flags->drain);
  StopOnSignals();

  absl::StatusOr<ps::worker::TrainerOptions> options =
      ps::worker::TrainerOptionsFromFlags();
  if (!options.ok()) return ps::FailUsage(kProgram, options.status().message());
  auto backend = ps::worker::BackendFromFlags(*options);
  if (!backend.ok()) return ps::FailUsage(kProgram, backend.status().message());
  absl::StatusOr<ps::client::ClientOptions> client_options =
      ps::worker::ClientOptionsFromFlags();
  if (!client_options.ok())
    return ps::FailUsage(kProgram, client_options.status().message());
  // Under --etcd: outlives the client, which looks the coordinator up.
  EtcdPresence etcd;
  if (flags->etcd.enabled()) {
    absl::StatusOr<EtcdPresence> joined =
        JoinJobInEtcd(*flags, *options, &*client_options);
    if (absl::IsInvalidArgument(joined.status()))
      return ps::FailUsage(kProgram, joined.status().message());
    if (!joined.ok()) return ps::FailWith(kProgram, joined.status());
    etcd = *std::move(joined);
  }
  auto checkpointer = MakeCheckpointer(*flags, *options, *client_options);
  if (!checkpointer.ok())
    return ps::FailUsage(kProgram, checkpointer.status().message());
  options->checkpoints = checkpointer->get();
  std::unique_ptr<ps::worker::TrainingMetrics> metrics;
  if (!flags->metrics_listen.empty()) {
    auto started = ps::worker::TrainingMetrics::Start(flags->metrics_listen,
                                                      flags->worker_index);
    if (!started.ok()) return ps::FailWith(kProgram, started.status());
    metrics = std::move(started).value();
    options->metrics = metrics.get();
    LOG(INFO) << "metrics on " << metrics->address();
  }
  auto exporter = MakeExporter(*flags, *options, *client_options);
  if (!exporter.ok())
    return ps::FailUsage(kProgram, exporter.status().message());
  auto client = ps::client::PsClient::Connect(*client_options);
  if (!client.ok()) return ps::FailWith(kProgram, client.status());
  absl::StatusOr<std::optional<ps::client::ClientOptions>> evaluation_options =
      ps::worker::EvaluationClientOptionsFromFlags(*client_options);
  if (!evaluation_options.ok())
    return ps::FailUsage(kProgram, evaluation_options.status().message());
  absl::StatusOr<std::unique_ptr<ps::client::PsClient>> evaluation_client =
      ConnectEvaluationClient(*evaluation_options);
  if (!evaluation_client.ok())
    return ps::FailWith(kProgram, evaluation_client.status());
  options->evaluation_client = evaluation_client->get();

  ps::worker::Trainer trainer(*options, flags->worker_index, client->get(),
                              backend->get());
  stoppable = &trainer;
  auto summary = trainer.Run();
  if (*exporter != nullptr) ExportLast(**exporter, summary);
  // The signal thread must not reach a trainer that is going away.
  const int code = summary.ok() ? Finish(*summary, *options, *flags)
                                : ps::FailWith(kProgram, summary.status());
  stoppable = nullptr;
  return code;
}
