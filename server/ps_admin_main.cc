// ps_admin: queries a ps_server shard over its admin API.
//
//   ps_admin --server=127.0.0.1:50051 tables
//   ps_admin --server=... stats
//   ps_admin --server=... row --table=wide_deep.embedding --key=12345
//   ps_admin --server=... clocks          (on the coordinator shard)

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "host:port of the shard to ask.");
ABSL_FLAG(std::string, table, "", "For `row`: the table.");
ABSL_FLAG(uint64_t, key, 0, "For `row`: the key.");
ABSL_FLAG(int32_t, timeout_s, 10, "Deadline of the call.");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_admin: %s\n", message.c_str());
  return 2;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  return context;
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Queries a ps_server shard: ps_admin [--server=HOST:PORT] "
      "tables|stats|row|clocks\n  row needs --table and --key; clocks is "
      "answered by the coordinator shard (shard 0 by default).");
  std::vector<char*> commands = absl::ParseCommandLine(argc, argv);
  if (commands.size() != 2)
    return Fail("give one command: tables, stats, row or clocks");
  const std::string command = commands[1];
  auto admin = ps::Admin::NewStub(grpc::CreateChannel(
      absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials()));
  grpc::Status status;
  if (command == "tables") {
    ps::ListTablesResponse response;
    status =
        admin->ListTables(Context().get(), ps::ListTablesRequest(), &response);
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
        admin->ShardStats(Context().get(), ps::ShardStatsRequest(), &response);
    if (status.ok()) std::printf("%s", response.DebugString().c_str());
  } else if (command == "row") {
    if (absl::GetFlag(FLAGS_table).empty()) return Fail("row needs --table");
    ps::GetRowRequest request;
    request.set_table(absl::GetFlag(FLAGS_table));
    request.set_key(absl::GetFlag(FLAGS_key));
    ps::GetRowResponse response;
    status = admin->GetRow(Context().get(), request, &response);
    if (status.ok()) {
      std::printf("%s [%s]\n",
                  response.stored() ? "stored" : "initial value (never pushed)",
                  absl::StrJoin(response.values(), ", ").c_str());
    }
  } else if (command == "clocks") {
    ps::WorkerClocksResponse response;
    status = admin->WorkerClocks(Context().get(), ps::WorkerClocksRequest(),
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
  } else {
    return Fail("unknown command '" + command +
                "': use tables, stats, row or clocks");
  }
  if (!status.ok()) {
    return Fail(absl::StrFormat("%s on %s: %s (code %d)", command,
                                absl::GetFlag(FLAGS_server),
                                status.error_message(), status.error_code()));
  }
  return 0;
}
