// ps_serve: serves exported models (ps_admin export) over gRPC with no shard
// running: Predict scores click-log lines, Lookup reads rows, each answer
// naming the export it used. It follows --model_dir and swaps each newer
// export in whole (server/model_directory.h). See README.md and --help.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/flag_alias.h"
#include "base/lock_mode.h"
#include "base/status_macros.h"
#include "base/usable_cores.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "net/grpc_server_metrics.h"
#include "net/metrics_endpoint.h"
#include "net/server_tls_flags.h"
#include "net/tls_credentials.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "rocksdb/cache.h"
#include "server/model_directory.h"
#include "server/serving_service.h"

ABSL_FLAG(std::string, model_dir, "",
          "The directory exports arrive in (ps_admin export "
          "--dir=MODEL_DIR/NAME): the complete one written last (by the time "
          "its manifest records, whatever its job and cut) is served, and "
          "each one written after it swapped in whole. Required.");
ABSL_FLAG(std::string, listen, "127.0.0.1:50061",
          "host:port to serve on. Port 0 picks a free port and prints it as "
          "'ps_serve listening on HOST:PORT'. Binds loopback unless told "
          "otherwise (e.g. 0.0.0.0:50061).");
ABSL_FLAG(std::string, health_listen, "",
          "Also serve gRPC's standard health service alone, in plaintext, on "
          "this host:port (for Kubernetes' gRPC probe when --listen speaks "
          "TLS). SERVING once a model is loaded. Empty: none.");
ABSL_FLAG(int32_t, poll_ms, 1000,
          "How often to look for a newer export in --model_dir.");
ABSL_FLAG(int32_t, scorers, 0,
          "Requests scored at once (each scorer holds the export's readers "
          "and a CPU backend); 0: one per core.");
ABSL_FLAG(int64_t, rocksdb_block_cache_mb, 256,
          "RocksDB's block cache of the exports' parts, in MiB (an LRU cache "
          "shared by every scorer and every export loaded): rows read "
          "recently are served from memory. 0: none beyond the readers' "
          "own.");
ABSL_FLAG(int64_t, block_cache_mb, 256,
          "Deprecated: use --rocksdb_block_cache_mb.");
ABSL_FLAG(int64_t, cache_mb, 256, "Deprecated: use --rocksdb_block_cache_mb.");
ABSL_FLAG(int64_t, max_lines_per_request, 65536,
          "The most lines one Predict may score.");
ABSL_FLAG(int64_t, max_keys_per_request, 1 << 20,
          "The most keys one Lookup may ask for.");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics): requests "
          "and their latency by method and code, the model's cut and its "
          "age. Port 0 picks a free one (logged). Empty: none.");
ABSL_FLAG(int64_t, max_memory_mb, 1024,
          "An export's embedding and wide tables are read into memory when "
          "they load, over a delta's whole chain, if their rows fit in this "
          "many MiB (21-43 bytes of index per row more; once for all "
          "--scorers; two exports during a swap): a lookup is then a hash "
          "probe, not a seek in each export of the chain. 0: never.");
ABSL_FLAG(bool, huge_pages, true,
          "Keep the tables read into memory (--max_memory_mb) on transparent "
          "huge pages (madvise), where random lookups miss the TLB less; "
          "false: the heap's memory, not advised (4 KiB pages unless THP is "
          "`always`), for a kernel whose huge-page compaction stalls page "
          "faults.");
ABSL_FLAG(int32_t, max_message_mb, 64,
          "The largest request ps_serve reads and answer it writes, in MiB "
          "(at most 2047); a Lookup whose answer would be larger is refused "
          "(RESOURCE_EXHAUSTED).");
ABSL_FLAG(int32_t, max_message_bytes, 64 << 20,
          "Deprecated: use --max_message_mb (this one in bytes).");

namespace {

// --max_message_mb, or its old form --max_message_bytes, in bytes.
absl::StatusOr<int> MaxMessageBytesFromFlags() {
  const absl::CommandLineFlag& bytes =
      absl::GetFlagReflectionHandle(FLAGS_max_message_bytes);
  const absl::CommandLineFlag& megabytes =
      absl::GetFlagReflectionHandle(FLAGS_max_message_mb);
  if (bytes.CurrentValue() != bytes.DefaultValue()) {
    std::fprintf(stderr,
                 "--max_message_bytes is deprecated: use --max_message_mb\n");
    if (megabytes.CurrentValue() != megabytes.DefaultValue()) {
      return absl::InvalidArgumentError(
          "give --max_message_mb or its old form --max_message_bytes, not "
          "both");
    }
    if (absl::GetFlag(FLAGS_max_message_bytes) <= 0)
      return absl::InvalidArgumentError("--max_message_bytes must be > 0");
    return absl::GetFlag(FLAGS_max_message_bytes);
  }
  const int32_t mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 1 || mb > 2047)
    return absl::InvalidArgumentError("--max_message_mb must be in [1, 2047]");
  return mb << 20;
}

// Exits: 64 for a bad flag or an export that cannot be served, 70 for a
// server that cannot start (base/exit_codes.h).
constexpr char kProgram[] = "ps_serve";

// What the Prometheus endpoint shows.
struct ServeMetrics {
  std::shared_ptr<prometheus::Registry> registry =
      std::make_shared<prometheus::Registry>();
  // Calls of the Serving service's methods, as ps_server counts its own.
  const std::vector<std::string> methods = {"Predict", "Lookup"};
  ps::GrpcServerMetrics calls{
      registry.get(),
      {},
      {"/ps.Serving/" + methods[0], "/ps.Serving/" + methods[1]}};
  prometheus::Gauge* cut = nullptr;
  prometheus::Gauge* age = nullptr;
  prometheus::Gauge* deltas = nullptr;
  prometheus::Counter* swaps = nullptr;
  prometheus::Gauge* cache_bytes = nullptr;

  ServeMetrics() {
    cut = &prometheus::BuildGauge()
               .Name("ps_serve_model_cut")
               .Help(
                   "The training clock the served export was cut at (the "
                   "model's version; 0 before one is loaded).")
               .Register(*registry)
               .Add({});
    age = &prometheus::BuildGauge()
               .Name("ps_serve_model_age_seconds")
               .Help(
                   "Seconds since the served export was written: how far "
                   "serving is behind training (0 before one is loaded).")
               .Register(*registry)
               .Add({});
    deltas = &prometheus::BuildGauge()
                  .Name("ps_serve_model_deltas")
                  .Help(
                      "The deltas the served export is read over, after its "
                      "base (0: a full export).")
                  .Register(*registry)
                  .Add({});
    cache_bytes =
        &prometheus::BuildGauge()
             .Name("ps_serve_cache_bytes")
             .Help("Bytes the block cache (--rocksdb_block_cache_mb) holds.")
             .Register(*registry)
             .Add({});
    swaps = &prometheus::BuildCounter()
                 .Name("ps_serve_model_swaps_total")
                 .Help("Exports swapped in.")
                 .Register(*registry)
                 .Add({});
  }

  // The served model's cut and deltas.
  void ShowModel(const ps::server::ServingModel& model) const {
    cut->Set(static_cast<double>(model.cut()));
    deltas->Set(static_cast<double>(model.delta_index()));
  }

  void Observe(absl::string_view method, grpc::StatusCode code,
               absl::Duration time) {
    const auto known = std::find(methods.begin(), methods.end(), method);
    if (known != methods.end()) {
      calls.Observe(static_cast<int>(known - methods.begin()), code, time);
    }
  }
};

// What the flags ask for, checked: INVALID_ARGUMENT names the bad one.
struct ServeOptions {
  std::string listen;
  std::string health_listen;
  std::string metrics_listen;
  ps::TlsFiles tls;
  int max_message_bytes = 0;
  ps::server::ModelDirectoryOptions directory;
  ps::server::ServingServiceOptions service;
};

absl::StatusOr<ServeOptions> ServeOptionsFromFlags() {
  ServeOptions options;
  options.directory.dir = absl::GetFlag(FLAGS_model_dir);
  if (options.directory.dir.empty()) {
    return absl::InvalidArgumentError("--model_dir is required");
  }
  if (absl::GetFlag(FLAGS_poll_ms) <= 0 || absl::GetFlag(FLAGS_scorers) < 0 ||
      absl::GetFlag(FLAGS_max_lines_per_request) <= 0 ||
      absl::GetFlag(FLAGS_max_keys_per_request) <= 0) {
    return absl::InvalidArgumentError(
        "--poll_ms, --max_lines_per_request and --max_keys_per_request must "
        "be > 0, --scorers >= 0");
  }
  options.listen = absl::GetFlag(FLAGS_listen);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  const ps::ServerTlsFlags tls_flags = ps::ServerTlsFromFlags();
  options.tls = tls_flags.files;
  RETURN_IF_ERROR(ps::CheckListenSecurity(
      options.listen, options.tls, tls_flags.allow_insecure_remote,
      tls_flags.allow_unauthenticated_clients, "read every weight"));
  ASSIGN_OR_RETURN(options.max_message_bytes, MaxMessageBytesFromFlags());
  ASSIGN_OR_RETURN(const int64_t block_cache_mb,
                   ps::FlagOrAlias(FLAGS_rocksdb_block_cache_mb,
                                   FLAGS_block_cache_mb, FLAGS_cache_mb));
  if (block_cache_mb < 0 || block_cache_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        "--rocksdb_block_cache_mb must be in [0, 2^30]");
  }
  const int64_t max_memory_mb = absl::GetFlag(FLAGS_max_memory_mb);
  if (max_memory_mb < 0 || max_memory_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max_memory_mb must be in [0, 2^30]");
  }
  options.directory.poll = absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms));
  options.directory.model_options.max_memory_bytes =
      static_cast<size_t>(max_memory_mb) << 20;
  options.directory.model_options.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  if (block_cache_mb > 0) {
    options.directory.model_options.block_cache =
        rocksdb::NewLRUCache(static_cast<size_t>(block_cache_mb) << 20);
  }
  options.directory.scorers = absl::GetFlag(FLAGS_scorers);
  if (options.directory.scorers == 0) {
    options.directory.scorers = ps::UsableCores();
  }
  options.service.max_lines_per_request =
      absl::GetFlag(FLAGS_max_lines_per_request);
  options.service.max_keys_per_request =
      absl::GetFlag(FLAGS_max_keys_per_request);
  options.service.max_answer_bytes = options.max_message_bytes;
  return options;
}

// The gRPC server of `service` on options.listen and, with
// options.health_listen, a plaintext one holding only the health service.
struct Servers {
  int port = 0;
  std::unique_ptr<grpc::Server> serving;
  std::unique_ptr<grpc::Server> health;

  // The overall status (service "", the readiness probe's): SERVING while
  // a model is loaded; NOT_SERVING before one, and once shutting down.
  void SetHealth(bool serving_now) {
    for (grpc::Server* each : {serving.get(), health.get()}) {
      if (each != nullptr) {
        each->GetHealthCheckService()->SetServingStatus("", serving_now);
      }
    }
  }

  // "liveness" (the liveness probe's) SERVING from the start, model or
  // not: a process waiting for its first export is alive. Set once; only
  // the shutdown of the health service changes it.
  void SetAlive() {
    for (grpc::Server* each : {serving.get(), health.get()}) {
      if (each != nullptr) {
        each->GetHealthCheckService()->SetServingStatus("liveness", true);
      }
    }
  }
};

// FAILED_PRECONDITION for an address it cannot listen on (a port in use).
absl::StatusOr<Servers> StartServers(
    const ServeOptions& options,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    ps::server::ServingService* service) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Servers servers;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &servers.port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(service);
  servers.serving = builder.BuildAndStart();
  if (servers.serving == nullptr || servers.port == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  if (options.health_listen.empty()) return servers;
  grpc::ServerBuilder health;
  int health_port = 0;
  health.AddListeningPort(options.health_listen,
                          grpc::InsecureServerCredentials(), &health_port);
  health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  servers.health = health.BuildAndStart();
  if (servers.health == nullptr || health_port == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", options.health_listen));
  }
  return servers;
}

// Until SIGTERM or SIGINT, keeps the health and the model's age current
// (every second); then stops the servers.
void ServeUntilSignal(const sigset_t& shutdown_signals,
                      const ps::server::ModelDirectory& models,
                      const ServeMetrics& metrics,
                      const std::shared_ptr<rocksdb::Cache>& block_cache,
                      Servers& servers) {
  const timespec second = {1, 0};
  while (sigtimedwait(&shutdown_signals, nullptr, &second) < 0) {
    const auto model = models.current();
    servers.SetHealth(model != nullptr);
    if (model != nullptr) {
      metrics.age->Set(
          absl::ToDoubleSeconds(absl::Now() - model->created_at()));
    }
    if (block_cache != nullptr) {
      metrics.cache_bytes->Set(static_cast<double>(block_cache->GetUsage()));
    }
  }
  LOG(INFO) << "shutting down";
  servers.SetHealth(false);
  servers.serving->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  if (servers.health != nullptr) servers.health->Shutdown();
}

// Parses the command line and sets up logging; returns the shutdown
// signals, blocked here and in every thread started later, for sigwait().
sigset_t InitProcess(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves exported models over gRPC (ps.Serving: Predict, Lookup), "
      "following a directory of exports.\n\nExample:\n  ps_serve "
      "--model_dir=/exports --listen=127.0.0.1:50061");
  ps::SetVersionFlag("ps_serve", {});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  return shutdown_signals;
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  const sigset_t shutdown_signals = InitProcess(argc, argv);
  absl::StatusOr<ServeOptions> options = ServeOptionsFromFlags();
  if (!options.ok()) {
    return ps::FailUsage(kProgram, options.status().message());
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ps::ServerCredentials(options->tls);
  if (!credentials.ok()) {
    return ps::FailUsage(kProgram, credentials.status().ToString());
  }
  ServeMetrics metrics;
  std::unique_ptr<ps::MetricsEndpoint> endpoint;
  if (!options->metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<ps::MetricsEndpoint>> started =
        ps::MetricsEndpoint::Start(options->metrics_listen);
    // An address that is not one: 64; a port in use: 70 (as ps_server).
    if (!started.ok()) {
      if (absl::IsInvalidArgument(started.status())) {
        return ps::FailUsage(kProgram, started.status().ToString());
      }
      ps::FailWith(kProgram, started.status());
      return ps::kExitFailed;
    }
    endpoint = *std::move(started);
    endpoint->Register(metrics.registry);
    LOG(INFO) << "metrics on http://" << endpoint->address() << "/metrics";
  }
  options->directory.on_swap = [&](const ps::server::ServingModel& model) {
    metrics.ShowModel(model);
    metrics.swaps->Increment();
  };
  absl::StatusOr<std::unique_ptr<ps::server::ModelDirectory>> models =
      ps::server::ModelDirectory::Start(options->directory);
  if (!models.ok()) return ps::FailUsage(kProgram, models.status().ToString());
  options->service.observe =
      [&metrics](absl::string_view method, grpc::StatusCode code,
                 absl::Duration time) { metrics.Observe(method, code, time); };
  ps::server::ServingService service(options->service, models->get());
  absl::StatusOr<Servers> servers =
      StartServers(*options, *credentials, &service);
  // A port in use: 70; 69 means a shard that did not answer.
  if (!servers.ok()) {
    ps::FailWith(kProgram, servers.status());
    return ps::kExitFailed;
  }
  servers->SetAlive();
  servers->SetHealth((*models)->current() != nullptr);
  if ((*models)->current() != nullptr) metrics.ShowModel(*(*models)->current());
  const std::string& listen = options->listen;
  std::printf("ps_serve listening on %s:%d\n",
              listen.substr(0, listen.rfind(':')).c_str(), servers->port);
  std::fflush(stdout);
  ServeUntilSignal(shutdown_signals, **models, metrics,
                   options->directory.model_options.block_cache, *servers);
  // The watcher stops before the servers and metrics it reports to go.
  models->reset();
  return 0;
}
