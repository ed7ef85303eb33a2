// ps_admin: asks ps_server shards over their admin API.
//
//   ps_admin --servers=127.0.0.1:50051 tables
//   ps_admin --servers=HOST:PORT,HOST:PORT stats
//   ps_admin --servers=... row --table=wide_deep.embedding --key=12345
//   ps_admin --servers=... clocks          (on the coordinator shard)
//   ps_admin --servers=... --token_file=F drain

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/checkpoint_client.h"
#include "base/manifest.h"
#include "base/tls_credentials.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"

ABSL_FLAG(std::string, servers, "127.0.0.1:50051",
          "host:port of the shards to ask, comma-separated; each is asked in "
          "turn.");
ABSL_FLAG(std::string, table, "", "For `row`: the table.");
ABSL_FLAG(uint64_t, key, 0, "For `row`: the key.");
ABSL_FLAG(int32_t, timeout_s, 10, "Deadline of each call.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate that signed the shards' certificates: talk TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for shards that require one (with "
          "--tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name the shards' certificates carry, when it is not the host "
          "in --servers.");
ABSL_FLAG(std::string, dir, "",
          "For `checkpoint`: the directory to write (a path on the shards' "
          "file system); for `checkpoints`: a checkpoint or a directory of "
          "them.");
ABSL_FLAG(std::string, model, "",
          "For `export`: the model (its tables' prefix, e.g. wide_deep); "
          "default: the only one.");
ABSL_FLAG(std::string, format, "fp32",
          "For `export`: the weights as fp32 or fp16.");
ABSL_FLAG(std::string, coordinator, "",
          "The coordinator shard, if not the first of --servers.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the admin token (the shards' --admin_token_file), "
          "sent with every call; calls that change a shard need it.");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_admin: %s\n", message.c_str());
  return 2;
}

// The token every call carries; empty for none.
std::string& Token() {
  static std::string* token = new std::string;
  return *token;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  if (!Token().empty())
    context->AddMetadata("authorization", "Bearer " + Token());
  return context;
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    default:
      return "see the code";
  }
}

const char* OptimizerName(ps::OptimizerSpec::Kind kind) {
  switch (kind) {
    case ps::OptimizerSpec::ADAGRAD:
      return "adagrad";
    case ps::OptimizerSpec::ADAM:
      return "adam";
    case ps::OptimizerSpec::FTRL:
      return "ftrl";
    default:
      return "sgd";
  }
}

// Runs `command` on one shard; prints what it answers.
grpc::Status RunCommand(const std::string& command, ps::Admin::Stub& admin) {
  grpc::Status status;
  if (command == "tables") {
    ps::ListTablesResponse response;
    status =
        admin.ListTables(Context().get(), ps::ListTablesRequest(), &response);
    if (status.ok()) {
      std::printf("%-40s %6s %-8s %10s %14s %14s\n", "table", "dim",
                  "optimizer", "lr", "rows (est.)", "disk bytes");
      for (const ps::TableInfo& table : response.tables()) {
        std::printf("%-40s %6u %-8s %10g %14llu %14llu\n",
                    table.spec().name().c_str(), table.spec().dim(),
                    OptimizerName(table.spec().optimizer().kind()),
                    table.spec().optimizer().learning_rate(),
                    static_cast<unsigned long long>(table.estimated_rows()),
                    static_cast<unsigned long long>(table.disk_bytes()));
      }
    }
  } else if (command == "stats") {
    ps::ShardStatsResponse response;
    status =
        admin.ShardStats(Context().get(), ps::ShardStatsRequest(), &response);
    if (status.ok()) std::printf("%s", response.DebugString().c_str());
  } else if (command == "row") {
    ps::GetRowRequest request;
    request.set_table(absl::GetFlag(FLAGS_table));
    request.set_key(absl::GetFlag(FLAGS_key));
    ps::GetRowResponse response;
    status = admin.GetRow(Context().get(), request, &response);
    if (status.ok()) {
      std::printf("%s [%s]\n",
                  response.stored() ? "stored" : "initial value (never pushed)",
                  absl::StrJoin(response.values(), ", ").c_str());
    }
  } else if (command == "clocks") {
    ps::WorkerClocksResponse response;
    status = admin.WorkerClocks(Context().get(), ps::WorkerClocksRequest(),
                                &response);
    if (status.ok()) {
      for (const auto& worker : response.workers()) {
        std::printf("worker %u clock %lld %s\n", worker.worker(),
                    static_cast<long long>(worker.clock()),
                    worker.live()       ? "live"
                    : worker.finished() ? "finished"
                                        : "lease expired");
      }
      std::printf("spread among live workers: %lld\n",
                  static_cast<long long>(response.clock_spread()));
    }
  } else if (command == "drain") {
    ps::DrainResponse response;
    status = admin.Drain(Context().get(), ps::DrainRequest(), &response);
    if (status.ok()) std::printf("draining\n");
  }
  return status;
}

// `checkpoint`: one consistent checkpoint of every shard in --servers.
int Checkpoint(const std::vector<std::string>& servers,
               const ps::TlsFiles& tls) {
  ps::CheckpointOptions options;
  options.servers = servers;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.dir = absl::GetFlag(FLAGS_dir);
  options.tls = tls;
  options.token = Token();
  options.progress = true;
  absl::StatusOr<ps::CheckpointManifest> manifest = ps::TakeCheckpoint(options);
  if (!manifest.ok()) return Fail(manifest.status().ToString());
  uint64_t bytes = 0;
  for (const auto& shard : manifest->shards()) bytes += shard.bytes();
  std::printf(
      "checkpoint at clock %lld in %s: %u shards, %llu bytes; workers held "
      "%.3f s for the cut, shards wrote their parts in %.3f s\n",
      static_cast<long long>(manifest->cut()), options.dir.c_str(),
      manifest->num_shards(), static_cast<unsigned long long>(bytes),
      manifest->hold_seconds(), manifest->snapshot_seconds());
  for (const auto& worker : manifest->workers()) {
    if (!worker.finished() && !worker.live()) {
      std::printf(
          "warning: worker %u's lease had lapsed at clock %lld: it was not "
          "waited for, and a step it had in flight may be on some shards "
          "only\n",
          worker.worker(), static_cast<long long>(worker.clock()));
    }
  }
  return 0;
}

// `export`: one model's weights at one cut, for serving.
int Export(const std::vector<std::string>& servers, const ps::TlsFiles& tls) {
  ps::ExportOptions options;
  options.cluster.servers = servers;
  options.cluster.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.cluster.dir = absl::GetFlag(FLAGS_dir);
  options.cluster.tls = tls;
  options.cluster.token = Token();
  options.cluster.progress = true;
  options.model = absl::GetFlag(FLAGS_model);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "fp32" && format != "fp16")
    return Fail("--format must be fp32 or fp16, not " + format);
  options.fp16 = format == "fp16";
  absl::StatusOr<ps::ExportManifest> manifest = ps::TakeExport(options);
  if (!manifest.ok()) return Fail(manifest.status().ToString());
  uint64_t rows = 0, bytes = 0;
  for (const auto& table : manifest->tables()) {
    rows += table.rows();
    bytes += table.bytes();
  }
  std::printf(
      "exported %s at clock %lld into %s: %zu tables, %llu rows, %llu bytes "
      "(%s); workers held %.3f s for the cut, the shards wrote in %.3f s\n",
      manifest->model_name().c_str(), static_cast<long long>(manifest->cut()),
      options.cluster.dir.c_str(), static_cast<size_t>(manifest->tables_size()),
      static_cast<unsigned long long>(rows),
      static_cast<unsigned long long>(bytes), format.c_str(),
      manifest->hold_seconds(), manifest->export_seconds());
  return 0;
}

// "0:16 1:16 2:9(finished)": each worker's clock in `manifest`, marked
// when it had finished or its lease had lapsed.
std::string WorkerClocks(const ps::CheckpointManifest& manifest) {
  std::vector<std::string> clocks;
  for (const auto& worker : manifest.workers()) {
    clocks.push_back(absl::StrCat(
        worker.worker(), ":", worker.clock(),
        worker.finished() ? "(finished)" : (worker.live() ? "" : "(lapsed)")));
  }
  return absl::StrJoin(clocks, " ");
}

// `checkpoints`: the checkpoint in --dir, or those in its subdirectories.
int ListCheckpoints() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::vector<std::string> candidates = {dir};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (entry.is_directory()) candidates.push_back(entry.path().string());
  std::sort(candidates.begin() + 1, candidates.end());
  std::printf("%-40s %10s %7s %14s  %-25s  %s\n", "checkpoint", "clock",
              "shards", "bytes", "taken", "worker clocks");
  int found = 0;
  for (const std::string& candidate : candidates) {
    absl::StatusOr<ps::CheckpointManifest> manifest =
        ps::ReadManifest(candidate);
    if (!manifest.ok()) continue;
    uint64_t bytes = 0;
    for (const auto& shard : manifest->shards()) bytes += shard.bytes();
    std::printf("%-40s %10lld %7u %14llu  %-25s  %s\n", candidate.c_str(),
                static_cast<long long>(manifest->cut()), manifest->num_shards(),
                static_cast<unsigned long long>(bytes),
                manifest->created_at().c_str(),
                WorkerClocks(*manifest).c_str());
    ++found;
  }
  if (found == 0) return Fail("no checkpoint in " + dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Asks ps_server shards: ps_admin [--servers=HOST:PORT,...] "
      "tables|stats|row|clocks|drain|checkpoint|checkpoints|export\n  row "
      "needs "
      "--table and --key; clocks is answered by the coordinator shard (shard "
      "0 by default); drain stops each shard as SIGTERM does; checkpoint "
      "--dir=DIR takes a consistent checkpoint of every shard in --servers "
      "(in shard order); checkpoints --dir=DIR lists them; export --dir=DIR "
      "[--format=fp16] [--model=NAME] writes one model's weights for "
      "ps_predict. Calls that change "
      "a shard need --token_file when the shards have --admin_token_file.");
  std::vector<char*> commands = absl::ParseCommandLine(argc, argv);
  if (commands.size() != 2) {
    return Fail(
        "give one command: tables, stats, row, clocks, drain, checkpoint, "
        "checkpoints or export");
  }
  const std::string command = commands[1];
  if (command != "tables" && command != "stats" && command != "row" &&
      command != "clocks" && command != "drain" && command != "checkpoint" &&
      command != "checkpoints" && command != "export") {
    return Fail("unknown command '" + command +
                "': use tables, stats, row, clocks, drain, checkpoint, "
                "checkpoints or export");
  }
  if ((command == "checkpoint" || command == "checkpoints" ||
       command == "export") &&
      absl::GetFlag(FLAGS_dir).empty()) {
    return Fail(command + " needs --dir");
  }
  if (command == "checkpoints") return ListCheckpoints();
  if (command == "row" && absl::GetFlag(FLAGS_table).empty())
    return Fail("row needs --table");
  ps::TlsFiles tls;
  tls.ca = absl::GetFlag(FLAGS_tls_ca);
  tls.cert = absl::GetFlag(FLAGS_tls_cert);
  tls.key = absl::GetFlag(FLAGS_tls_key);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  auto credentials = ps::ChannelCredentials(tls);
  if (!credentials.ok()) return Fail(credentials.status().ToString());
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ps::ReadTokenFile(path);
    if (!token.ok()) return Fail(token.status().ToString());
    Token() = *std::move(token);
  }
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipWhitespace());
  if (servers.empty()) return Fail("--servers names no shard");
  std::vector<std::string> addresses = servers;
  if (!absl::GetFlag(FLAGS_coordinator).empty())
    addresses.push_back(absl::GetFlag(FLAGS_coordinator));
  if (absl::Status private_token =
          ps::CheckTokenStaysPrivate(Token(), tls, addresses);
      !private_token.ok()) {
    return Fail(std::string(private_token.message()));
  }
  if (command == "checkpoint") return Checkpoint(servers, tls);
  if (command == "export") return Export(servers, tls);
  int failures = 0;
  for (const std::string& server : servers) {
    if (servers.size() > 1) std::printf("== %s\n", server.c_str());
    grpc::ChannelArguments arguments;
    ps::AddTlsChannelArguments(tls, &arguments);
    auto admin = ps::Admin::NewStub(
        grpc::CreateCustomChannel(server, *credentials, arguments));
    const grpc::Status status = RunCommand(command, *admin);
    if (!status.ok()) {
      std::fprintf(stderr, "ps_admin: %s on %s: %s (%s)\n", command.c_str(),
                   server.c_str(), status.error_message().c_str(),
                   StatusCodeName(status.error_code()));
      ++failures;
    }
  }
  return failures == 0 ? 0 : 2;
}
