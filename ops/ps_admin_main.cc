// ps_admin: asks ps_server shards over their admin API.
//
//   ps_admin --servers=127.0.0.1:50051 tables
//   ps_admin --servers=HOST:PORT,HOST:PORT stats    (summed over the shards)
//   ps_admin --servers=... --json stats             (one JSON object)
//   ps_admin --servers=... row --table=wide_deep.embedding --key=12345
//   ps_admin --servers=... clocks          (on the coordinator shard)
//   ps_admin --servers=... slots           (which shard owns which slots)
//   ps_admin --servers=... --token_file=F set-lr --table=T --learning_rate=0.01
//   ps_admin --servers=... --token_file=F drop-table --table=T [--force]
//   ps_admin --servers=... --token_file=F expire --table=T
//   ps_admin --servers=... --token_file=F stop

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/address_list.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/flag_alias.h"
#include "base/lock_mode.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "cluster/etcd_job_flags.h"
#include "cluster/shard_directory.h"
#include "net/admin_channel.h"
#include "net/client_tls_flags.h"
#include "net/tls_credentials.h"
#include "ops/admin_command.h"

ABSL_FLAG(std::string, servers, "127.0.0.1:50051",
          "host:port of the shards, comma-separated in shard order; every "
          "shard is asked and the answers are added up.");
ABSL_FLAG(int32_t, etcd_wait_s, 10,
          "With --etcd: how long to wait for every shard to be registered.");
ABSL_FLAG(std::string, table, "",
          "For `row`, `set-lr` and `drop-table`: the table.");
ABSL_FLAG(uint64_t, key, 0, "For `row`: the key.");
ABSL_FLAG(std::string, read_replicas, "",
          "For `row`: HOST:PORT of a replica of each shard (ps_server "
          "--replica_of), in shard order: the row is read from the owning "
          "shard's replica, by the replicas' slot maps, as of the entries "
          "the replica applied; the primaries (--servers, --etcd) are not "
          "asked, and may be down. Empty: from the primary.");
ABSL_FLAG(bool, json, false,
          "Print one JSON object (numbers as numbers) instead of tables.");
ABSL_FLAG(double, interval_s, 1.0,
          "For `stats`: rates and latency percentiles over this many seconds "
          "(two samples); 0: since each shard started.");
ABSL_FLAG(double, learning_rate, 0.0,
          "For `set-lr`: the learning rate (positive), from the next push on.");
ABSL_FLAG(double, lr, 0.0, "Deprecated: use --learning_rate.");
ABSL_FLAG(bool, force, false,
          "For `drop-table`: drop even while workers hold leases.");
ABSL_FLAG(int32_t, rpc_timeout_s, 10, "Deadline of each call.");
ABSL_FLAG(int32_t, timeout_s, 10, "Deprecated: use --rpc_timeout_s.");
ABSL_FLAG(std::string, dir, "",
          "For `checkpoint`: the directory to write (a path on the shards' "
          "file system); for `checkpoints`: a checkpoint or a directory of "
          "them.");
ABSL_FLAG(int32_t, checkpoints_to_keep, 0,
          "For `checkpoint`: once it is written, delete all but the newest N "
          "finished checkpoints (ckpt-* directories) beside --dir, as this "
          "process sees them (a volume it shares with the shards). Default "
          "0: keep all.");
ABSL_FLAG(int32_t, hold_timeout_s, 300,
          "For `checkpoint` and `export`: how long to wait for the cut to "
          "start (a coordinator that just restarted waits for its workers to "
          "report again) and for every live worker to reach it.");
ABSL_FLAG(std::string, model, "",
          "For `export`: the model (its tables' prefix, e.g. wide_deep); "
          "default: the only one.");
ABSL_FLAG(std::string, export_format, "fp32",
          "For `export`: the weights as fp32 or fp16.");
ABSL_FLAG(std::string, format, "fp32", "Deprecated: use --export_format.");
ABSL_FLAG(std::string, base, "",
          "For `export`: write a delta of this earlier export (a directory "
          "beside --dir): only the rows changed since it and deletions of "
          "those dropped since, read over it by ps_predict and ps_serve. "
          "Refused (exit 70, FAILED_PRECONDITION) when a shard cannot tell "
          "what changed since it: write a full export then. Default: a full "
          "export.");
ABSL_FLAG(std::string, slots, "",
          "For `move-slots`: the slots to move, A-B (inclusive) or A, of "
          "0-16383.");
ABSL_FLAG(int32_t, to, -1, "For `move-slots`: the shard the slots go to.");
ABSL_FLAG(bool, cancel, false,
          "For `move-slots`: cancel a move under way instead (pushes to its "
          "slots go on at its source).");
ABSL_FLAG(int32_t, shard, -1, "For `drain-shard`: the shard to empty.");
ABSL_FLAG(int32_t, move_lease_s, 30,
          "For `move-slots`: a source cancels its move by itself when "
          "ps_admin is not heard from for this long.");
ABSL_FLAG(int32_t, move_page_rows, 4096,
          "For `move-slots`: rows per page copied from a source to the "
          "target.");
ABSL_FLAG(uint64_t, move_final_backlog_rows, 2048,
          "For `move-slots`, `rebalance` and `drain-shard`: the rows pushed "
          "during a move are copied again in rounds until at most this many "
          "are left, which are copied with the slots' pushes paused.");
ABSL_FLAG(int32_t, move_catch_up_rounds, 8,
          "For `move-slots`, `rebalance` and `drain-shard`: most rounds of "
          "copying changed rows before pausing whatever is left.");
ABSL_FLAG(std::string, coordinator, "",
          "The coordinator shard, if not the first of --servers.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the admin token (the shards' --admin_token_file), "
          "sent with every call; calls that change a shard need it.");

namespace {

// How long a command waits for its channels to connect before its calls
// (at most --rpc_timeout_s): a shard that is down costs this much, then its
// calls fail as they would have (net/admin_channel.h AwaitConnected()).
constexpr absl::Duration kConnectGrace = absl::Seconds(1);

using ps::ops::Cluster;
using ps::ops::CommandOptions;
using ps::ops::Fail;

struct Command {
  const char* name;
  int (*run)(const Cluster&);
  bool needs_table;
};

constexpr Command kCommands[] = {
    {"tables", ps::ops::Tables, false},
    {"stats", ps::ops::Stats, false},
    {"row", ps::ops::Row, true},
    {"clocks", ps::ops::Clocks, false},
    {"set-lr", ps::ops::SetLearningRate, true},
    {"drop-table", ps::ops::DropTable, true},
    {"expire", ps::ops::Expire, true},
    {"stop", ps::ops::Stop, false},
    {"checkpoint", ps::ops::Checkpoint, false},
    // Needs no shard: run before the cluster is connected.
    {"checkpoints", nullptr, false},
    {"export", ps::ops::Export, false},
    {"slots", ps::ops::Slots, false},
    {"move-slots", ps::ops::MoveSlotsCommand, false},
    {"rebalance", ps::ops::Rebalance, false},
    {"drain-shard", ps::ops::DrainShard, false},
};

// Old command names, still accepted with a line saying so.
struct RenamedCommand {
  const char* old_name;
  const char* name;
};
constexpr RenamedCommand kRenamedCommands[] = {
    // "drain" means moving slots away elsewhere (drain-shard).
    {"drain", "stop"},
};

// The flags of the commands that move slots (move-slots, rebalance,
// drain-shard) into `options`; INVALID_ARGUMENT names the bad one.
absl::Status MoveFlags(const std::string& command, CommandOptions* options) {
  options->cancel = command == "move-slots" && absl::GetFlag(FLAGS_cancel);
  if (absl::GetFlag(FLAGS_move_lease_s) < 1 ||
      absl::GetFlag(FLAGS_move_page_rows) < 1 ||
      absl::GetFlag(FLAGS_move_catch_up_rounds) < 0) {
    return absl::InvalidArgumentError(
        "--move_lease_s and --move_page_rows must be positive, "
        "--move_catch_up_rounds at least 0");
  }
  options->move_final_backlog_rows =
      absl::GetFlag(FLAGS_move_final_backlog_rows);
  options->move_catch_up_rounds = absl::GetFlag(FLAGS_move_catch_up_rounds);
  options->move_lease = absl::Seconds(absl::GetFlag(FLAGS_move_lease_s));
  options->move_page_rows =
      static_cast<uint32_t>(absl::GetFlag(FLAGS_move_page_rows));
  if (command == "drain-shard") {
    if (absl::GetFlag(FLAGS_shard) < 0)
      return absl::InvalidArgumentError("drain-shard needs --shard");
    options->shard = static_cast<uint32_t>(absl::GetFlag(FLAGS_shard));
  }
  if (command != "move-slots" || options->cancel) return absl::OkStatus();
  const std::string slots = absl::GetFlag(FLAGS_slots);
  const std::vector<std::string> ends = absl::StrSplit(slots, '-');
  uint32_t first = 0;
  uint32_t last = 0;
  if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &first) ||
      !absl::SimpleAtoi(ends.back(), &last) || first > last ||
      last >= ps::kNumSlots) {
    return absl::InvalidArgumentError(
        "move-slots needs --slots=A-B (or A), slots of 0-16383 with A <= B, "
        "not '" +
        slots + "'");
  }
  if (absl::GetFlag(FLAGS_to) < 0) {
    return absl::InvalidArgumentError(
        "move-slots needs --to, the shard the slots go to");
  }
  options->first_slot = first;
  options->last_slot = last;
  options->to_shard = static_cast<uint32_t>(absl::GetFlag(FLAGS_to));
  return absl::OkStatus();
}

// The commands' options from the flags; INVALID_ARGUMENT names the bad one.
absl::StatusOr<CommandOptions> OptionsFromFlags(const Command& command) {
  CommandOptions options;
  const std::string name = command.name;
  options.table = absl::GetFlag(FLAGS_table);
  if (command.needs_table && options.table.empty())
    return absl::InvalidArgumentError(name + " needs --table");
  options.key = absl::GetFlag(FLAGS_key);
  options.read_replicas =
      ps::SplitAddressList(absl::GetFlag(FLAGS_read_replicas));
  if (!options.read_replicas.empty() && name != "row") {
    return absl::InvalidArgumentError("--read_replicas is for `row` only");
  }
  options.json = absl::GetFlag(FLAGS_json);
  options.interval_s = absl::GetFlag(FLAGS_interval_s);  // stats checks it
  ASSIGN_OR_RETURN(options.learning_rate,
                   ps::FlagOrAlias(FLAGS_learning_rate, FLAGS_lr));
  if (name == "set-lr" &&
      (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate) ||
       options.learning_rate > std::numeric_limits<float>::max())) {
    return absl::InvalidArgumentError(
        "set-lr needs --learning_rate, a positive learning rate");
  }
  options.force = absl::GetFlag(FLAGS_force);
  ASSIGN_OR_RETURN(const int32_t timeout_s,
                   ps::FlagOrAlias(FLAGS_rpc_timeout_s, FLAGS_timeout_s));
  options.timeout = absl::Seconds(timeout_s);
  options.dir = absl::GetFlag(FLAGS_dir);
  if ((name == "checkpoint" || name == "checkpoints" || name == "export") &&
      options.dir.empty()) {
    return absl::InvalidArgumentError(name + " needs --dir");
  }
  options.checkpoints_to_keep = absl::GetFlag(FLAGS_checkpoints_to_keep);
  if (name != "checkpoints" && options.checkpoints_to_keep < 0)
    return absl::InvalidArgumentError(
        "--checkpoints_to_keep must be >= 0 (0 keeps all)");
  options.hold_timeout = absl::Seconds(absl::GetFlag(FLAGS_hold_timeout_s));
  if ((name == "checkpoint" || name == "export") &&
      absl::GetFlag(FLAGS_hold_timeout_s) <= 0)
    return absl::InvalidArgumentError("--hold_timeout_s must be positive");
  if (name == "move-slots" || name == "rebalance" || name == "drain-shard")
    RETURN_IF_ERROR(MoveFlags(name, &options));
  options.model = absl::GetFlag(FLAGS_model);
  ASSIGN_OR_RETURN(options.format,
                   ps::FlagOrAlias(FLAGS_export_format, FLAGS_format));
  options.base = absl::GetFlag(FLAGS_base);
  if (name != "export" && !options.base.empty())
    return absl::InvalidArgumentError("--base is for `export` only");
  if (name == "export" && options.format != "fp32" && options.format != "fp16")
    return absl::InvalidArgumentError(
        "--export_format must be fp32 or fp16, not " + options.format);
  return options;
}

// The command `word` names (an old name warns); null for none.
const Command* FindCommand(std::string word) {
  for (const RenamedCommand& renamed : kRenamedCommands) {
    if (word != renamed.old_name) continue;
    std::fprintf(stderr, "ps_admin: `%s` is deprecated: use `%s`\n",
                 renamed.old_name, renamed.name);
    word = renamed.name;
  }
  for (const Command& candidate : kCommands) {
    if (word == candidate.name) return &candidate;
  }
  return nullptr;
}

// The shards the command asks (--read_replicas, the job's in etcd, or
// --servers) and the coordinator (--coordinator, the one elected in etcd,
// or the first shard). INVALID_ARGUMENT for none; etcd's errors.
absl::Status FindShardsAndCoordinator(const ps::cluster::EtcdJob& etcd,
                                      Cluster* cluster) {
  const absl::Duration etcd_wait =
      absl::Seconds(absl::GetFlag(FLAGS_etcd_wait_s));
  const bool from_replicas = !cluster->options.read_replicas.empty();
  if (from_replicas) {
    // The replicas alone: their primaries may be down.
    cluster->servers = cluster->options.read_replicas;
  } else if (etcd.enabled()) {
    cluster->options.job = etcd.job;
    ASSIGN_OR_RETURN(cluster->servers,
                     ps::cluster::FindJobShards(etcd, etcd_wait));
  } else {
    cluster->servers = ps::SplitAddressList(absl::GetFlag(FLAGS_servers));
  }
  if (cluster->servers.empty()) {
    return absl::InvalidArgumentError("--servers names no shard");
  }
  const std::string coordinator_flag = absl::GetFlag(FLAGS_coordinator);
  cluster->coordinator =
      coordinator_flag.empty() ? cluster->servers[0] : coordinator_flag;
  if (!etcd.enabled() || from_replicas || !coordinator_flag.empty()) {
    return absl::OkStatus();
  }
  // The shard elected to coordinate (cluster/coordinator_election.h).
  absl::StatusOr<std::unique_ptr<ps::cluster::CoordinationStore>> client =
      ps::cluster::ConnectToJobEtcd(etcd);
  absl::StatusOr<std::string> coordinator =
      client.ok() ? ps::cluster::FindCoordinator(**client, etcd.job, etcd_wait)
                  : absl::StatusOr<std::string>(client.status());
  if (coordinator.ok()) {
    cluster->coordinator = *std::move(coordinator);
    cluster->coordinator_elected = true;
  } else {
    // Only the commands that ask the coordinator need one.
    std::fprintf(stderr, "warning: %s; asking %s as the coordinator\n",
                 std::string(coordinator.status().message()).c_str(),
                 cluster->coordinator.c_str());
  }
  return absl::OkStatus();
}

void SetUsage() {
  absl::SetProgramUsageMessage(
      "Asks ps_server shards: ps_admin [--servers=HOST:PORT,...] [--json] "
      "COMMAND\n"
      "  tables       every table, rows and bytes added up over the shards\n"
      "  stats        counters summed over the shards, rates and p50/p99 per "
      "method over --interval_s\n"
      "  row          --table --key: one row, from the shard that owns it\n"
      "               (--read_replicas: from that shard's replica)\n"
      "  clocks       the workers' clocks (the coordinator shard: the first "
      "of --servers or --coordinator)\n"
      "  set-lr       --table --learning_rate: the table's learning rate from "
      "the next "
      "push on\n"
      "  drop-table   --table [--force]: drop it and its rows; refused while "
      "workers hold leases unless --force\n"
      "  expire       --table: drop its expired rows now (a compaction)\n"
      "  stop         each shard stops as SIGTERM stops it (was `drain`)\n"
      "  checkpoint   --dir [--checkpoints_to_keep=N]: a consistent "
      "checkpoint of every shard\n"
      "  checkpoints  --dir: the checkpoints in a directory\n"
      "  export       --dir [--export_format=fp16] [--model] [--base=EXPORT]: "
      "one "
      "model's weights for ps_predict and ps_serve (--base: a delta)\n"
      "  slots        which shard owns which key slots, and the map's epoch\n"
      "  move-slots   --slots=A-B --to=SHARD: move slots while workers train "
      "(--cancel: end a move under way)\n"
      "  rebalance    move slots so that every shard owns an equal share\n"
      "  drain-shard  --shard=I: move every slot of shard I to the others\n"
      "Commands that change a shard need --token_file when the shards have "
      "--admin_token_file.");
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  SetUsage();
  ps::SetVersionFlag("ps_admin",
                     {"net/client_tls_flags.cc", "cluster/etcd_job_flags.cc"});
  std::vector<char*> words = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> names;
  for (const Command& command : kCommands) names.push_back(command.name);
  const std::string known = absl::StrJoin(names, ", ");
  if (words.size() != 2) return Fail("give one command: " + known);
  const Command* command = FindCommand(words[1]);
  if (command == nullptr) {
    return Fail("unknown command '" + std::string(words[1]) + "': use " +
                known);
  }
  absl::StatusOr<CommandOptions> options = OptionsFromFlags(*command);
  if (!options.ok()) return Fail(std::string(options.status().message()));
  if (command->run == nullptr) return ps::ops::ListCheckpoints(*options);

  Cluster cluster;
  cluster.options = *std::move(options);
  cluster.tls = ps::ClientTlsFilesFromFlags();
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ps::ReadTokenFile(path);
    if (!token.ok()) return Fail(token.status().ToString());
    cluster.token = *std::move(token);
  }
  absl::StatusOr<ps::cluster::EtcdJob> etcd = ps::cluster::EtcdJobFromFlags();
  if (!etcd.ok()) return Fail(std::string(etcd.status().message()));
  if (absl::Status found = FindShardsAndCoordinator(*etcd, &cluster);
      !found.ok()) {
    if (absl::IsInvalidArgument(found))
      return Fail(std::string(found.message()));
    return Fail(found);
  }
  // Fails for TLS files that cannot be read and for a token that would
  // leave loopback in plaintext: bad flags, either way.
  absl::StatusOr<ps::net::AdminChannels> channels =
      ps::net::AdminChannels::Connect(cluster.servers, cluster.coordinator,
                                      cluster.tls, cluster.token);
  if (!channels.ok()) return Fail(std::string(channels.status().message()));
  cluster.channels = *std::move(channels);
  cluster.channels->AwaitConnected(
      std::min(kConnectGrace, cluster.options.timeout));
  return command->run(cluster);
}
