// ps_serve: serves exported models (ps_admin export) over gRPC with no shard
// running: Predict scores click-log lines, Lookup reads rows, each answer
// naming the export it used. It follows --model_dir and swaps each newer
// export in whole (server/model_directory.h). See README.md and --help.

#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

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
#include "base/usable_cores.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "net/metrics_endpoint.h"
#include "net/server_tls_flags.h"
#include "net/tls_credentials.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
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
ABSL_FLAG(int64_t, block_cache_mb, 256,
          "The block cache of the exports' parts (RocksDB's LRU cache, shared "
          "by every scorer and every export loaded): rows read recently are "
          "served from memory. 0: none beyond the readers' own.");
ABSL_FLAG(int64_t, cache_mb, 256, "Deprecated: use --block_cache_mb.");
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
          "many MiB (about 24 bytes of index per row more; once for all "
          "--scorers; two exports during a swap): a lookup is then a hash "
          "probe, not a seek in each export of the chain. 0: never.");
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

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "ps_serve: %s\n", message.c_str());
  return code;
}

// What the Prometheus endpoint shows.
struct ServeMetrics {
  std::shared_ptr<prometheus::Registry> registry =
      std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* latency = nullptr;
  prometheus::Gauge* cut = nullptr;
  prometheus::Gauge* age = nullptr;
  prometheus::Gauge* deltas = nullptr;
  prometheus::Counter* swaps = nullptr;
  prometheus::Gauge* cache_bytes = nullptr;

  ServeMetrics() {
    requests = &prometheus::BuildCounter()
                    .Name("ps_serve_requests_total")
                    .Help("Calls answered, by method and gRPC code.")
                    .Register(*registry);
    latency = &prometheus::BuildHistogram()
                   .Name("ps_serve_request_seconds")
                   .Help("Time to answer a call, by method.")
                   .Register(*registry);
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
    cache_bytes = &prometheus::BuildGauge()
                       .Name("ps_serve_cache_bytes")
                       .Help("Bytes the block cache (--block_cache_mb) holds.")
                       .Register(*registry)
                       .Add({});
    swaps = &prometheus::BuildCounter()
                 .Name("ps_serve_model_swaps_total")
                 .Help("Exports swapped in.")
                 .Register(*registry)
                 .Add({});
  }

  void Observe(absl::string_view method, grpc::StatusCode code,
               absl::Duration time) {
    requests
        ->Add({{"method", std::string(method)},
               {"code", absl::StrCat(static_cast<int>(code))}})
        .Increment();
    prometheus::Histogram::BucketBoundaries buckets;
    for (double bound = 1e-4; bound < 10; bound *= 2) buckets.push_back(bound);
    latency->Add({{"method", std::string(method)}}, buckets)
        .Observe(absl::ToDoubleSeconds(time));
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves exported models over gRPC (ps.Serving: Predict, Lookup), "
      "following a directory of exports.\n\nExample:\n  ps_serve "
      "--model_dir=/exports --listen=127.0.0.1:50061");
  ps::SetVersionFlag("ps_serve", {});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // SIGTERM and SIGINT are waited for below, in this thread alone.
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);

  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (model_dir.empty()) return Fail(ps::kExitUsage, "--model_dir is required");
  if (absl::GetFlag(FLAGS_poll_ms) <= 0 || absl::GetFlag(FLAGS_scorers) < 0 ||
      absl::GetFlag(FLAGS_max_lines_per_request) <= 0 ||
      absl::GetFlag(FLAGS_max_keys_per_request) <= 0) {
    return Fail(ps::kExitUsage,
                "--poll_ms, --max_lines_per_request and "
                "--max_keys_per_request must be > 0, --scorers >= 0");
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const ps::ServerTlsFlags tls_flags = ps::ServerTlsFromFlags();
  const ps::TlsFiles& tls = tls_flags.files;
  if (absl::Status secure = ps::CheckListenSecurity(
          listen, tls, tls_flags.allow_insecure_remote,
          tls_flags.allow_unauthenticated_clients, "read every weight");
      !secure.ok()) {
    return Fail(ps::kExitUsage, std::string(secure.message()));
  }
  absl::StatusOr<int> max_message_bytes = MaxMessageBytesFromFlags();
  if (!max_message_bytes.ok()) {
    return Fail(ps::kExitUsage,
                std::string(max_message_bytes.status().message()));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ps::ServerCredentials(tls);
  if (!credentials.ok()) {
    return Fail(ps::kExitUsage, credentials.status().ToString());
  }

  ServeMetrics metrics;
  std::unique_ptr<ps::MetricsEndpoint> endpoint;
  if (const std::string at = absl::GetFlag(FLAGS_metrics_listen); !at.empty()) {
    absl::StatusOr<std::unique_ptr<ps::MetricsEndpoint>> started =
        ps::MetricsEndpoint::Start(at);
    // An address that is not one: 64; a port in use: 70 (as ps_server).
    if (!started.ok()) {
      return Fail(absl::IsInvalidArgument(started.status()) ? ps::kExitUsage
                                                            : ps::kExitFailed,
                  started.status().ToString());
    }
    endpoint = *std::move(started);
    endpoint->Register(metrics.registry);
    LOG(INFO) << "metrics on http://" << endpoint->address() << "/metrics";
  }

  ps::server::ModelDirectoryOptions directory_options;
  directory_options.dir = model_dir;
  directory_options.poll = absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms));
  absl::StatusOr<int64_t> block_cache_mb =
      ps::FlagOrAlias(FLAGS_block_cache_mb, FLAGS_cache_mb);
  if (!block_cache_mb.ok()) {
    return Fail(ps::kExitUsage, std::string(block_cache_mb.status().message()));
  }
  if (*block_cache_mb < 0 || *block_cache_mb > (int64_t{1} << 30)) {
    return Fail(ps::kExitUsage, "--block_cache_mb must be in [0, 2^30]");
  }
  if (absl::GetFlag(FLAGS_max_memory_mb) < 0 ||
      absl::GetFlag(FLAGS_max_memory_mb) > (int64_t{1} << 30)) {
    return Fail(ps::kExitUsage, "--max_memory_mb must be in [0, 2^30]");
  }
  directory_options.model_options.max_memory_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_memory_mb)) << 20;
  if (*block_cache_mb > 0) {
    directory_options.model_options.block_cache =
        rocksdb::NewLRUCache(static_cast<size_t>(*block_cache_mb) << 20);
  }
  directory_options.scorers = absl::GetFlag(FLAGS_scorers);
  if (directory_options.scorers == 0) {
    directory_options.scorers = ps::UsableCores();
  }
  directory_options.on_swap = [&](const ps::server::ServingModel& model) {
    metrics.cut->Set(static_cast<double>(model.cut()));
    metrics.deltas->Set(static_cast<double>(model.delta_index()));
    metrics.swaps->Increment();
  };
  absl::StatusOr<std::unique_ptr<ps::server::ModelDirectory>> models =
      ps::server::ModelDirectory::Start(directory_options);
  if (!models.ok()) return Fail(ps::kExitUsage, models.status().ToString());

  ps::server::ServingServiceOptions service_options;
  service_options.max_lines_per_request =
      absl::GetFlag(FLAGS_max_lines_per_request);
  service_options.max_keys_per_request =
      absl::GetFlag(FLAGS_max_keys_per_request);
  service_options.max_answer_bytes = *max_message_bytes;
  service_options.observe =
      [&metrics](absl::string_view method, grpc::StatusCode code,
                 absl::Duration time) { metrics.Observe(method, code, time); };
  ps::server::ServingService service(service_options, models->get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, *credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(*max_message_bytes);
  builder.SetMaxSendMessageSize(*max_message_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    // A port in use: 70; 69 means a shard that did not answer.
    return Fail(ps::kExitFailed, absl::StrCat("cannot listen on ", listen));
  }
  std::unique_ptr<grpc::Server> health_server;
  if (const std::string at = absl::GetFlag(FLAGS_health_listen); !at.empty()) {
    grpc::ServerBuilder health;
    int health_port = 0;
    health.AddListeningPort(at, grpc::InsecureServerCredentials(),
                            &health_port);
    health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_server = health.BuildAndStart();
    if (health_server == nullptr || health_port == 0) {
      return Fail(ps::kExitFailed, absl::StrCat("cannot listen on ", at));
    }
  }
  // SERVING while a model is loaded (looked at again every second below);
  // NOT_SERVING before one, and once shutting down.
  auto set_health = [&](bool serving) {
    for (grpc::Server* each : {server.get(), health_server.get()}) {
      if (each != nullptr)
        each->GetHealthCheckService()->SetServingStatus(serving);
    }
  };
  set_health((*models)->current() != nullptr);
  if ((*models)->current() != nullptr) {
    metrics.cut->Set(static_cast<double>((*models)->current()->cut()));
    metrics.deltas->Set(
        static_cast<double>((*models)->current()->delta_index()));
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("ps_serve listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  // Until SIGTERM or SIGINT, keeping the model's age current.
  const timespec second = {1, 0};
  while (sigtimedwait(&shutdown_signals, nullptr, &second) < 0) {
    const auto model = (*models)->current();
    set_health(model != nullptr);
    if (model != nullptr) {
      metrics.age->Set(
          absl::ToDoubleSeconds(absl::Now() - model->created_at()));
    }
    if (directory_options.model_options.block_cache != nullptr) {
      metrics.cache_bytes->Set(static_cast<double>(
          directory_options.model_options.block_cache->GetUsage()));
    }
  }
  LOG(INFO) << "shutting down";
  set_health(false);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  if (health_server != nullptr) health_server->Shutdown();
  // The watcher stops before the servers and metrics it reports to go.
  models->reset();
  return 0;
}
