// File: ops/admin_command.h
//
// What ps_admin's commands share: the options main parses from its flags,
// the cluster they talk to (net/admin_channel.h), and how a command reports
// (plain text, or one JSON object with --json; exit codes of
// base/exit_codes.h). One file per command group implements the commands:
// admin_tables.cc (tables, row, set-lr, drop-table, expire),
// admin_cluster.cc (stats, clocks, drain), admin_snapshots.cc (checkpoint,
// export, checkpoints), admin_slots.cc (slots, move-slots, rebalance,
// drain-shard).

#ifndef PS_OPS_ADMIN_COMMAND_H_
#define PS_OPS_ADMIN_COMMAND_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/slot_map.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "net/admin_channel.h"
#include "net/tls_credentials.h"
#include "nlohmann/json.hpp"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {

// What the commands take from ps_admin's flags (main parses them).
struct CommandOptions {
  std::string table;  // --table
  uint64_t key = 0;   // --key
  // --read_replicas, for row: a replica of each shard, in shard order.
  std::vector<std::string> read_replicas;
  bool json = false;         // --json: one JSON object, no tables
  double interval_s = 1.0;   // --interval_s, for stats
  double learning_rate = 0;  // --lr, for set-lr
  bool force = false;        // --force, for drop-table
  absl::Duration timeout = absl::Seconds(10);  // --timeout_s, of each call
  std::string dir;                             // --dir
  int checkpoints_to_keep = 0;                 // --checkpoints_to_keep (0: all)
  absl::Duration hold_timeout = absl::Minutes(5);  // --hold_timeout_s
  std::string model;                               // --model, for export
  std::string format = "fp32";  // --format, for export: fp32 or fp16
  std::string base;             // --base, for export: a delta of this one
  std::string job;              // --job under --etcd, recorded by export
  // For move-slots: --slots=A-B, --to, --cancel, --move_lease_s,
  // --move_page_rows.
  uint32_t first_slot = 0;
  uint32_t last_slot = 0;
  uint32_t to_shard = 0;
  bool cancel = false;
  absl::Duration move_lease = absl::Seconds(30);
  uint32_t move_page_rows = 4096;
  // --move_final_backlog_rows, --move_catch_up_rounds.
  uint64_t move_final_backlog_rows = 2048;
  int move_catch_up_rounds = 8;
  uint32_t shard = UINT32_MAX;  // --shard, for drain-shard
};

// nlohmann's JSON, whose objects keep their keys in the order they are set.
using Json = nlohmann::ordered_json;

struct Cluster {
  std::vector<std::string> servers;
  std::string coordinator;  // --coordinator, or the first of servers
  // Under --etcd: `coordinator` is the shard elected in etcd, the only one
  // that knows the workers.
  bool coordinator_elected = false;
  TlsFiles tls;
  std::string token;  // sent with every call; empty for none
  CommandOptions options;
  std::optional<net::AdminChannels> channels;

  // A call's context with its deadline (options.timeout, or `at_least` if
  // longer) and the token.
  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration at_least = absl::ZeroDuration()) const {
    return channels->Context(std::max(at_least, options.timeout));
  }
};

// What one shard answered: its reply in JSON (or its error), for --json.
struct ShardAnswer {
  explicit ShardAnswer(std::string server) : server(std::move(server)) {}
  std::string server;
  grpc::Status status;
  Json fields = Json::object();  // the reply, when status is ok
};

// A bad flag: prints `message`, returns 64.
int Fail(const std::string& message);
// A command the cluster refused or could not answer: prints it, returns 69
// for a shard unreachable, else 70.
int Fail(const absl::Status& status);
const char* StatusCodeName(grpc::StatusCode code);
// `json` on one line. Invalid UTF-8 in a string (a path, a shard's message)
// becomes U+FFFD rather than an exception; a NaN or an infinity is null.
std::string Dump(const Json& json);
// A float as the double nearest its shortest decimal form, so that 0.01f is
// written 0.01 and not 0.009999999776482582.
double Decimal(float value);
// Each shard's answer: {"server": ..., its reply's fields} or {"server":
// ..., "error": {"code": ..., "message": ...}}.
Json ShardAnswersJson(const std::vector<ShardAnswer>& answers);
// Reports the shards that failed on stderr; returns the exit code.
int ReportFailures(const std::string& command,
                   const std::vector<ShardAnswer>& answers);
// Runs `call` on every shard, one after the other, and prints what each
// did: `done` in words, or the fields the call filled in for --json; the
// exit code.
int OnEveryShard(const Cluster& cluster, const std::string& command,
                 const std::function<grpc::Status(Admin::Stub&, Json*)>& call,
                 const std::function<std::string(const Json&)>& done);

// The commands; each returns ps_admin's exit code.
int Tables(const Cluster& cluster);
int Row(const Cluster& cluster);
int SetLearningRate(const Cluster& cluster);
int DropTable(const Cluster& cluster);
int Expire(const Cluster& cluster);
int Stats(const Cluster& cluster);
int Clocks(const Cluster& cluster);
// `stop` (Admin.Stop): every shard stops as SIGTERM stops it.
int Stop(const Cluster& cluster);
int Checkpoint(const Cluster& cluster);
int Export(const Cluster& cluster);
int Slots(const Cluster& cluster);
int MoveSlotsCommand(const Cluster& cluster);
int Rebalance(const Cluster& cluster);
int DrainShard(const Cluster& cluster);

// The slot map of the newest epoch any shard routes by; UNAVAILABLE when no
// shard answers.
absl::StatusOr<SlotMap> ReadSlotMap(const Cluster& cluster);
// `checkpoints`: needs no shard.
int ListCheckpoints(const CommandOptions& options);

}  // namespace ps::ops

#endif  // PS_OPS_ADMIN_COMMAND_H_
