// ps_server: one parameter-server shard. See README.md and --help.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/address_list.h"
#include "base/build_info.h"
#include "base/durable_file.h"
#include "base/exit_codes.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "net/etcd_client.h"
#include "net/etcd_security_flags.h"
#include "net/server_tls_flags.h"
#include "net/shard_directory.h"
#include "net/tls_credentials.h"
#include "server/etcd_seen.h"
#include "server/shard_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port to serve on. Port 0 picks a free port and prints it as "
          "'ps_server listening on HOST:PORT'. Binds loopback unless told "
          "otherwise (e.g. 0.0.0.0:50051).");
ABSL_FLAG(uint32_t, shard_index, 0,
          "This shard's index, in [0, num_shards). Under --etcd, an index at "
          "or beyond the job's shard count joins the running job as its next "
          "shard, owning no slot until `ps_admin rebalance` gives it some.");
ABSL_FLAG(uint32_t, num_shards, 1,
          "Shards in the cluster: a new data dir starts from the slot map "
          "slot % num_shards. Keys of slots the map gives to another shard "
          "are refused with FAILED_PRECONDITION and a ps-moved trailer. "
          "Under --etcd, a new job's initial count (and with --restore_from "
          "the count to restore into): the count then lives in the job's "
          "slot map, growing as shards join and shrinking when `ps_admin "
          "drain-shard` empties the last one; a shard restarted with "
          "another --num_shards serves its data dir as before.");
ABSL_FLAG(int32_t, join_wait_s, 300,
          "Under --etcd, how long a shard started beyond the job's shard "
          "count waits for the shards before it to join first (shards join "
          "in index order), in seconds.");
ABSL_FLAG(std::string, etcd, "",
          "host:port[,...] of an etcd cluster: register this shard under "
          "/ps/<--job>/shards/<--shard_index> with a lease, so that workers "
          "and ps_admin find it with --etcd instead of --servers, and run "
          "for the job's clock coordinator (any shard may hold it; another "
          "takes over when it dies). Empty: none (the embedded default: "
          "shard 0 coordinates).");
ABSL_FLAG(std::string, job, "",
          "With --etcd: the job this shard serves (a-z, 0-9, _ and -).");
ABSL_FLAG(int32_t, etcd_lease_s, 10,
          "With --etcd: the lease of this shard's record and of its "
          "coordinator role; a shard that dies drops out of etcd this long "
          "after, and another shard coordinates.");
ABSL_FLAG(std::string, advertise_address, "",
          "With --etcd: the host:port workers dial (default: the address "
          "this shard listens on; required when that is 0.0.0.0 or [::]).");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of this shard's RocksDB (created if missing). Restarting "
          "on the same directory resumes every table. Required.");
ABSL_FLAG(uint64_t, cache_mb, 256,
          "Memory budget of the in-memory hot tier over all tables, in MiB. "
          "Tables may be many times larger; the rest lives in RocksDB.");
ABSL_FLAG(std::string, durability, "wal",
          "'wal': a push is acknowledged only once a record of its gradients "
          "is appended to the push log (<data_dir>/push_log), so kill -9 "
          "loses no acknowledged update; rows are written back every "
          "--write_back_ms and the log replayed at restart. 'periodic': "
          "pushes update memory and dirty rows are "
          "written back every --write_back_ms, so a crash loses at most "
          "that interval; faster.");
ABSL_FLAG(bool, sync_wal, false,
          "With --durability=wal, also fdatasync the push log (and RocksDB's "
          "WAL) before acknowledging, so "
          "acknowledged pushes survive a machine crash, not only a process "
          "crash.");
ABSL_FLAG(uint64_t, write_back_ms, 0,
          "How often dirty rows are written back to RocksDB. "
          "--durability=periodic: the most a crash loses (default 1000). "
          "--durability=wal: never loses an acknowledged push; longer costs "
          "less CPU and replays more of the push log at restart (default "
          "10000). 0: the durability's default.");
ABSL_FLAG(uint64_t, flush_interval_ms, 0,
          "Deprecated: --write_back_ms, under --durability=periodic (0: not "
          "given).");
ABSL_FLAG(uint64_t, wal_write_back_ms, 0,
          "Deprecated: --write_back_ms, under --durability=wal (0: not "
          "given).");
ABSL_FLAG(uint64_t, wal_max_log_mb, 1024,
          "With --durability=wal, the push log a shard may hold before it "
          "writes stripes back early, whatever --write_back_ms says: "
          "bounds the disk it takes and the replay at restart.");
ABSL_FLAG(uint32_t, max_keys_per_request, 65536,
          "Most keys one pull or push may carry; more is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_move_changed_keys, 1 << 20,
          "During a slot move out of this shard (ps_admin move-slots), most "
          "keys pushed meanwhile whose rows are still to copy; past it the "
          "moving slots' pushes wait for the rest of the move (memory: about "
          "16 bytes a key).");
ABSL_FLAG(uint64_t, max_message_mb, 64,
          "Largest gRPC message either way, in MiB.");
ABSL_FLAG(uint64_t, max_inflight_mb, 1024,
          "Bytes (MiB) of pulls and pushes, requests and replies, the shard "
          "holds at once; past it calls get RESOURCE_EXHAUSTED (marked "
          "transient: workers back off and retry). Bounds memory under a "
          "flood of large requests.");
ABSL_FLAG(uint32_t, max_dim, 4096,
          "Largest row dimension a table may declare.");
ABSL_FLAG(uint32_t, max_tables, 1024,
          "Most tables this shard may hold; a dropped table keeps its id, so "
          "tables dropped count too.");
ABSL_FLAG(uint32_t, hot_tier_stripes, 0,
          "Lock stripes of the hot tier; more lets more pulls and pushes run "
          "at once, fewer costs less per request. 0: four per hardware "
          "thread, at least 8 and at most 256.");
ABSL_FLAG(uint64_t, rocksdb_block_cache_mb, 16,
          "RocksDB's block cache, in MiB.");
ABSL_FLAG(uint64_t, rocksdb_write_buffer_mb, 64,
          "RocksDB's memtables over all tables together, in MiB.");
ABSL_FLAG(std::string, push_log_recovery, "strict",
          "With --durability=wal, what starting does with a push-log record "
          "that is damaged anywhere but at the log's torn end (a disk error, "
          "or a power loss without --sync_wal): 'strict' refuses to start, "
          "naming the file and what follows the damage; 'point_in_time' "
          "replays what precedes the damage and drops the rest, logging what "
          "was lost.");
ABSL_FLAG(uint32_t, admission_sketch_mb, 16,
          "Memory of the count-min sketch each table with admit_after "
          "(ps_worker --admit_after) counts its not-yet-stored keys in. A "
          "count errs only upward (a key admitted early), by more than "
          "2.7 * N / (MiB * 256 Ki) with probability under 2%, N being the "
          "pushes of keys not yet admitted since the shard started.");
ABSL_FLAG(uint64_t, max_dropped_rows_remembered, 1 << 20,
          "Expired rows that RocksDB's compactions dropped, remembered (16 "
          "bytes each) so that a delta export (ps_admin export --base) "
          "deletes them from serving too; past it, the oldest are forgotten "
          "and a delta since before them is refused (a full export is "
          "needed). A restart forgets them all.");
ABSL_FLAG(uint32_t, max_workers, 4096,
          "Most workers this shard keeps exactly-once push state and clocks "
          "for; past it, the worker heard from longest ago is forgotten.");
ABSL_FLAG(int32_t, relearn_time_s, 60,
          "Coordinator: after starting without its state (an unreadable "
          "coordinator.state), refuse checkpoint cuts for this long, so that "
          "every live worker has reported again (more than the workers' "
          "--lease_ms).");
ABSL_FLAG(uint64_t, testing_kill_after_push_records, 0,
          "Testing only: SIGKILL this process right after its N-th push is "
          "in the push log, before the push is answered. 0: never.");
ABSL_FLAG(std::string, worker_token_file, "",
          "File holding a token that the data plane's Clock and DeclareTable "
          "calls must carry as 'authorization: Bearer <token>' (ps_worker "
          "--worker_token_file); needed with --admin_token_file.");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding a token that admin calls which change the shard "
          "(ps_admin stop, drop-table, ...) must carry as 'authorization: "
          "Bearer <token>' "
          "(ps_admin --token_file); others get UNAUTHENTICATED. Required "
          "when --listen is beyond loopback, unless "
          "--allow_unauthenticated_admin.");
ABSL_FLAG(bool, allow_unauthenticated_admin, false,
          "Listen beyond loopback without --admin_token_file anyway: every "
          "client that reaches the shard (each worker among them) may then "
          "stop it, drop tables, move its slots or copy its rows. Only on a "
          "network you trust.");
ABSL_FLAG(std::string, restore_from, "",
          "A checkpoint directory (ps_admin checkpoint): on an empty "
          "--data_dir, load the rows that route to this shard from every part "
          "of it, whatever shard count took it, then serve. A data dir "
          "restored from it before just opens.");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics): calls by "
          "method and code, latencies, rows pulled and pushed, hot tier, "
          "RocksDB, push log. Port 0 picks a free one, printed as "
          "'ps_server metrics on HOST:PORT'. Empty: none.");
ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT of a plaintext gRPC server with only the standard health "
          "service (grpc.health.v1), for probes that cannot speak TLS "
          "(Kubernetes' gRPC probe). NOT_SERVING once a drain starts. Empty: "
          "none.");
ABSL_FLAG(uint64_t, drain_seconds, 10,
          "On SIGTERM or SIGINT, how long in-flight calls may finish before "
          "they are cancelled; then dirty rows are flushed and the process "
          "exits 0.");
ABSL_FLAG(std::string, replica_of, "",
          "HOST:PORT of a primary shard to replicate (under --etcd: the "
          "shard's index, and the replica takes the primary's place once the "
          "primary's registration goes, or exits 70, to be started again "
          "and copy anew, once another process serves the shard): copy its "
          "store into "
          "--data_dir (empty, or a replica's from before), then apply every "
          "push and table change it makes, in order. A replica serves pulls, "
          "refuses pushes and takes the primary's shard index. Empty: a "
          "primary.");
ABSL_FLAG(std::string, tls_server_name, "",
          "When this shard dials another (a replica its primary, over "
          "--tls_cert and --tls_ca as a client): the name the other's "
          "certificate carries, when it is not the host dialled. A shard's "
          "certificate needs clientAuth besides serverAuth for that, and "
          "--tls_ca must have signed the shards' certificates too. Empty: "
          "the host dialled.");
ABSL_FLAG(int32_t, replicas, 0,
          "Under --etcd: how many replicas each shard of the job runs with. "
          "Start replicas + 1 processes per --shard_index, all with the same "
          "flags (each its own --data_dir); each finds its role at start: "
          "the shard's primary where none is registered and its data dir "
          "holds the shard's newest rows (or, for a job's first start, the "
          "first to claim the shard), else a replica of the registered "
          "primary, waiting up to --join_wait_s for one (a data dir a "
          "replica took over from is emptied for the copy; one newer than "
          "etcd's generation is refused). A replica that cannot follow any "
          "more, and a primary whose registration is lost for good, exit "
          "(70), to be restarted in the role they find then. Needs "
          "--durability=wal. 0: roles are given by --replica_of.");
ABSL_FLAG(std::string, replication, "async",
          "A primary's promise to its replicas: sync (a push is answered once "
          "every replica that has caught up applied it and logged it) or "
          "async (answered at once; replicas lag by at most "
          "--max_replication_lag_records). Needs --durability=wal to feed "
          "replicas at all.");
ABSL_FLAG(int32_t, min_in_sync_replicas, -1,
          "A primary refuses pushes (UNAVAILABLE, transient: clients retry) "
          "while fewer replicas than this are in sync with it, so that no "
          "push is acknowledged that fewer replicas hold. -1: 1 under "
          "--replication=sync, 0 under async. 0: pushes go on with no "
          "replica (a sync primary then acknowledges pushes nobody else has, "
          "counted in ps_replication_pushes_without_replica_total).");
ABSL_FLAG(bool, accept_etcd_rollback, false,
          "Under --etcd, start even when etcd went backwards since this data "
          "dir last saw it (a lower revision, or another cluster: etcd "
          "restored from an older snapshot, or replaced). Its generation "
          "fences may then be older than this shard's, so a primary that "
          "was replaced could serve again: check first.");
ABSL_FLAG(bool, allow_unclean_promotion, false,
          "Under --etcd, a replica takes its shard over even when its "
          "primary's recorded in-sync set does not name it (it was dropped: "
          "paused, cut off or behind): it may lack pushes the primary "
          "acknowledged, which are then lost. Without it such a replica is "
          "not promoted and the shard waits for its primary or an "
          "operator.");
ABSL_FLAG(uint64_t, max_replication_lag_records, 100000,
          "A primary's pushes wait while a replica reading its feed (in sync "
          "or catching up) is more than this many feed entries (pushes and "
          "table changes) behind: the bound on what an async replica may "
          "lack. A replica still copying is bounded by "
          "--max_replication_lag_mb instead: pushes never wait for a copy.");
ABSL_FLAG(uint64_t, max_replication_lag_mb, 0,
          "The feed entries a primary keeps for replicas behind it may take "
          "this many MiB: past it the copy furthest behind (behind every "
          "replica reading the feed) is abandoned (the "
          "replica copies again) rather than pushes waiting for it, and "
          "pushes wait while replicas reading the feed hold more. A copy "
          "must finish before pushes fill this much: size it as push bytes "
          "per second times a copy's seconds. 0: 1/32 of the machine's "
          "memory, at least 64 MiB. At most 1048576.");
ABSL_FLAG(uint64_t, replica_copy_timeout_s, 300,
          "A replica's copy gives up (and the replica exits, 70) when the "
          "primary does not cut the copy within this long (a paused "
          "primary); each piece of a file within this long or 1 min, "
          "whichever is less, and the end of the copy 30 s.");
ABSL_FLAG(int32_t, replica_copy_attempts, 5,
          "Copies a replica starts before it gives up, when its primary "
          "abandons each (it fell more than the primary's "
          "--max_replication_lag_mb behind) or refuses it for now (other "
          "replicas copying), a second longer apart each time.");
ABSL_FLAG(int32_t, replica_slot_map_grace_s, 10,
          "How long a replica's slot map may differ from its primary's "
          "before it stops following and copies the shard again (under "
          "--etcd both read the job's map, each at its own moment).");
ABSL_FLAG(uint64_t, replica_timeout_ms, 10000,
          "A replica that does not read its primary's feed for this long is "
          "dropped (it must copy again), and no push waits longer for one.");

namespace {

// A bad flag: exit 64.
int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_server: %s\n", message.c_str());
  return ps::kExitUsage;
}

// A shard that cannot start or stop cleanly: 69 or 70 (base/exit_codes.h).
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_server: %s\n", status.ToString().c_str());
  return ps::ExitCodeFor(status);
}

// The flag helpers below report a bad flag as INVALID_ARGUMENT whose message
// is what ps_server prints before it exits 64.
absl::Status BadFlag(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// Parses the command line and sets up logging.
void InitProcess(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One parameter-server shard: sparse embedding tables over RocksDB, "
      "served over gRPC.\n\nExample:\n  ps_server --data_dir=/tmp/shard0 "
      "--listen=127.0.0.1:0 --shard_index=0 --num_shards=2");
  ps::SetVersionFlag("ps_server");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with deadlock detection on, which records every
  // lock acquisition in a graph; the tests keep it, the binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
}

// Blocks the shutdown signals (SIGTERM, SIGINT) in this thread and every
// thread it creates later (gRPC's included); returns them for sigwait().
sigset_t BlockShutdownSignals() {
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  return shutdown_signals;
}

// `megabytes` of flag --`name` in bytes; INVALID_ARGUMENT past
// `max_megabytes` (where the bytes would overflow what they are given to).
absl::Status MegabytesFlag(absl::string_view name, uint64_t megabytes,
                           uint64_t max_megabytes, size_t* bytes) {
  if (megabytes > max_megabytes) {
    return BadFlag(
        absl::StrCat("--", name, " must be at most ", max_megabytes));
  }
  *bytes = static_cast<size_t>(megabytes) << 20;
  return absl::OkStatus();
}

// The largest size flag in megabytes: 2^40 MiB, an exabyte.
constexpr uint64_t kMaxMegabytes = uint64_t{1} << 40;
// Lock stripes past this cost memory per stripe and help nothing.
constexpr uint32_t kMaxStripes = 65536;

// --listen, the shard's place and the limits on calls.
absl::Status ReadServingFlags(ps::server::ServerOptions* options) {
  options->listen_address = absl::GetFlag(FLAGS_listen);
  options->shard_index = absl::GetFlag(FLAGS_shard_index);
  options->num_shards = absl::GetFlag(FLAGS_num_shards);
  options->max_keys_per_request = absl::GetFlag(FLAGS_max_keys_per_request);
  options->max_move_changed_keys = absl::GetFlag(FLAGS_max_move_changed_keys);
  // gRPC takes a message size as an int.
  RETURN_IF_ERROR(MegabytesFlag("max_message_mb",
                                absl::GetFlag(FLAGS_max_message_mb), 2047,
                                &options->max_message_bytes));
  RETURN_IF_ERROR(MegabytesFlag("max_inflight_mb",
                                absl::GetFlag(FLAGS_max_inflight_mb),
                                kMaxMegabytes, &options->max_inflight_bytes));
  if (options->max_inflight_bytes == 0)
    return BadFlag("--max_inflight_mb must be positive");
  return absl::OkStatus();
}

// The store's directory, sizes and testing hook.
absl::Status ReadStoreFlags(ps::server::ServerOptions* options) {
  ps::embedding::StoreOptions* store = &options->store;
  store->data_dir = absl::GetFlag(FLAGS_data_dir);
  RETURN_IF_ERROR(MegabytesFlag("cache_mb", absl::GetFlag(FLAGS_cache_mb),
                                kMaxMegabytes, &store->cache_bytes));
  store->sync_wal = absl::GetFlag(FLAGS_sync_wal);
  size_t push_log_bytes = 0;
  RETURN_IF_ERROR(MegabytesFlag("wal_max_log_mb",
                                absl::GetFlag(FLAGS_wal_max_log_mb),
                                kMaxMegabytes, &push_log_bytes));
  store->max_push_log_bytes = push_log_bytes;
  store->max_dim = absl::GetFlag(FLAGS_max_dim);
  store->max_tables = absl::GetFlag(FLAGS_max_tables);
  if (absl::GetFlag(FLAGS_admission_sketch_mb) == 0 ||
      absl::GetFlag(FLAGS_admission_sketch_mb) > 65536) {
    return BadFlag("--admission_sketch_mb must be between 1 and 65536");
  }
  store->admission_sketch_bytes =
      size_t{absl::GetFlag(FLAGS_admission_sketch_mb)} << 20;
  if (absl::GetFlag(FLAGS_max_dropped_rows_remembered) == 0 ||
      absl::GetFlag(FLAGS_max_dropped_rows_remembered) > (uint64_t{1} << 32)) {
    return BadFlag("--max_dropped_rows_remembered must be between 1 and 2^32");
  }
  store->max_dropped_rows_remembered =
      absl::GetFlag(FLAGS_max_dropped_rows_remembered);
  // 0: embedding::DefaultStripeCount().
  if (absl::GetFlag(FLAGS_hot_tier_stripes) > kMaxStripes)
    return BadFlag(
        absl::StrCat("--hot_tier_stripes must be at most ", kMaxStripes));
  store->num_stripes = static_cast<int>(absl::GetFlag(FLAGS_hot_tier_stripes));
  RETURN_IF_ERROR(MegabytesFlag(
      "rocksdb_block_cache_mb", absl::GetFlag(FLAGS_rocksdb_block_cache_mb),
      kMaxMegabytes, &store->rocksdb_block_cache_bytes));
  RETURN_IF_ERROR(MegabytesFlag(
      "rocksdb_write_buffer_mb", absl::GetFlag(FLAGS_rocksdb_write_buffer_mb),
      kMaxMegabytes, &store->rocksdb_write_buffer_bytes));
  store->testing_kill_after_push_records =
      absl::GetFlag(FLAGS_testing_kill_after_push_records);
  return absl::OkStatus();
}

// --durability, and --write_back_ms with the old names it has under each
// durability (deprecated: each logs a warning).
absl::Status ReadDurabilityFlags(ps::server::ServerOptions* options) {
  ps::embedding::StoreOptions* store = &options->store;
  const std::string durability = absl::GetFlag(FLAGS_durability);
  if (durability == "wal") {
    store->durability = ps::embedding::Durability::kWal;
  } else if (durability == "periodic") {
    store->durability = ps::embedding::Durability::kPeriodic;
  } else {
    return BadFlag("--durability must be 'wal' or 'periodic', not '" +
                   durability + "'");
  }
  uint64_t write_back_ms = absl::GetFlag(FLAGS_write_back_ms);
  const bool wal = store->durability == ps::embedding::Durability::kWal;
  for (const auto& [name, value, applies] :
       {std::make_tuple("--flush_interval_ms",
                        absl::GetFlag(FLAGS_flush_interval_ms), !wal),
        std::make_tuple("--wal_write_back_ms",
                        absl::GetFlag(FLAGS_wal_write_back_ms), wal)}) {
    if (value == 0) continue;
    LOG(WARNING) << name << " is deprecated: use --write_back_ms"
                 << (applies ? "" : " (ignored under this --durability)");
    if (!applies) continue;
    if (write_back_ms != 0 && write_back_ms != value) {
      return BadFlag(absl::StrCat(name,
                                  " and --write_back_ms disagree: give "
                                  "only --write_back_ms"));
    }
    write_back_ms = value;
  }
  store->write_back_interval = absl::Milliseconds(write_back_ms);
  return absl::OkStatus();
}

// --push_log_recovery.
absl::Status ReadPushLogRecoveryFlag(ps::server::ServerOptions* options) {
  const std::string recovery = absl::GetFlag(FLAGS_push_log_recovery);
  if (recovery == "strict") {
    options->store.push_log_recovery = ps::embedding::PushLogRecovery::kStrict;
  } else if (recovery == "point_in_time") {
    options->store.push_log_recovery =
        ps::embedding::PushLogRecovery::kPointInTime;
  } else {
    return BadFlag(
        "--push_log_recovery must be 'strict' or 'point_in_time', not '" +
        recovery + "'");
  }
  return absl::OkStatus();
}

// The workers kept and the coordinator's relearning.
absl::Status ReadWorkerFlags(ps::server::ServerOptions* options) {
  if (absl::GetFlag(FLAGS_max_workers) == 0)
    return BadFlag("--max_workers must be positive");
  options->store.max_workers = absl::GetFlag(FLAGS_max_workers);
  options->coordinator.max_workers = absl::GetFlag(FLAGS_max_workers);
  if (absl::GetFlag(FLAGS_relearn_time_s) < 0)
    return BadFlag("--relearn_time_s must be >= 0");
  options->coordinator.relearn_time =
      absl::Seconds(absl::GetFlag(FLAGS_relearn_time_s));
  return absl::OkStatus();
}

absl::Status RequireDataDir(ps::server::ServerOptions* options) {
  if (options->store.data_dir.empty()) return BadFlag("--data_dir is required");
  return absl::OkStatus();
}

// TLS, whom the shard may listen to, the checkpoint to restore, and the
// metrics and health servers' addresses.
absl::Status ReadTlsAndListenFlags(ps::server::ServerOptions* options) {
  const ps::ServerTlsFlags tls = ps::ServerTlsFromFlags();
  options->tls = tls.files;
  options->tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  options->allow_insecure_remote = tls.allow_insecure_remote;
  options->allow_unauthenticated_clients = tls.allow_unauthenticated_clients;
  options->restore_from = absl::GetFlag(FLAGS_restore_from);
  options->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options->health_listen = absl::GetFlag(FLAGS_health_listen);
  return absl::OkStatus();
}

// --replica_of, --replication and their bounds.
absl::Status ReadReplicationFlags(ps::server::ServerOptions* options) {
  options->replica_of = absl::GetFlag(FLAGS_replica_of);
  const std::string mode = absl::GetFlag(FLAGS_replication);
  if (mode != "sync" && mode != "async") {
    return BadFlag("--replication must be sync or async, not \"" + mode + "\"");
  }
  options->sync_replication = mode == "sync";
  const int32_t min_in_sync = absl::GetFlag(FLAGS_min_in_sync_replicas);
  if (min_in_sync < -1 || min_in_sync > 8) {
    return BadFlag(
        "--min_in_sync_replicas must be -1 (the mode's default) "
        "or 0 to 8");
  }
  options->min_in_sync_replicas = min_in_sync >= 0
                                      ? static_cast<uint32_t>(min_in_sync)
                                      : (options->sync_replication ? 1 : 0);
  options->max_replication_lag_records =
      absl::GetFlag(FLAGS_max_replication_lag_records);
  if (options->max_replication_lag_records == 0) {
    return BadFlag("--max_replication_lag_records must be >= 1");
  }
  if (const uint64_t mb = absl::GetFlag(FLAGS_max_replication_lag_mb); mb > 0) {
    if (mb > (uint64_t{1} << 20))
      return BadFlag("--max_replication_lag_mb must be at most 1048576");
    options->max_replication_lag_bytes = mb << 20;
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_bytes = sysconf(_SC_PAGESIZE);
    uint64_t memory =
        pages > 0 && page_bytes > 0
            ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes)
            : 0;
    // In a container, its limit rather than the machine's.
    uint64_t limit = 0;
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    if (cgroup >> limit && limit > 0 && (memory == 0 || limit < memory))
      memory = limit;
    options->max_replication_lag_bytes =
        std::max<uint64_t>(memory / 32, uint64_t{64} << 20);
  }
  if (absl::GetFlag(FLAGS_replica_copy_timeout_s) == 0)
    return BadFlag("--replica_copy_timeout_s must be >= 1");
  options->replica_copy.call_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_replica_copy_timeout_s));
  options->replica_copy.attempts = absl::GetFlag(FLAGS_replica_copy_attempts);
  if (options->replica_copy.attempts < 1)
    return BadFlag("--replica_copy_attempts must be >= 1");
  if (absl::GetFlag(FLAGS_replica_slot_map_grace_s) < 0)
    return BadFlag("--replica_slot_map_grace_s must be >= 0");
  options->replica_slot_map_grace =
      absl::Seconds(absl::GetFlag(FLAGS_replica_slot_map_grace_s));
  const uint64_t timeout_ms = absl::GetFlag(FLAGS_replica_timeout_ms);
  if (timeout_ms == 0) return BadFlag("--replica_timeout_ms must be >= 1");
  options->replica_timeout = absl::Milliseconds(timeout_ms);
  if (!options->replica_of.empty() &&
      options->store.durability != ps::embedding::Durability::kWal) {
    return BadFlag("--replica_of needs --durability=wal");
  }
  const int32_t replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 0 || replicas > 8) {
    return BadFlag("--replicas must be 0 to 8");
  }
  if (replicas > 0) {
    if (absl::GetFlag(FLAGS_etcd).empty()) {
      return BadFlag(
          "--replicas needs --etcd (the processes of a shard find their "
          "roles there); without it, start replicas with --replica_of");
    }
    if (!options->replica_of.empty()) {
      return BadFlag(
          "--replicas and --replica_of do not go together: with --replicas "
          "each process finds its role itself");
    }
    if (options->store.durability != ps::embedding::Durability::kWal) {
      return BadFlag("--replicas needs --durability=wal");
    }
  }
  return absl::OkStatus();
}

// The token in the file `path` (a --*_token_file flag) into `token`; an
// empty `path` leaves it empty.
absl::Status ReadTokenFlag(const std::string& path, std::string* token) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> read = ps::ReadTokenFile(path);
  if (!read.ok()) return BadFlag(read.status().ToString());
  *token = *std::move(read);
  return absl::OkStatus();
}

// The admin and worker tokens, which go only together and differ.
absl::Status ReadTokenFlags(ps::server::ServerOptions* options) {
  options->allow_unauthenticated_admin =
      absl::GetFlag(FLAGS_allow_unauthenticated_admin);
  if (absl::Status read = ReadTokenFlag(absl::GetFlag(FLAGS_admin_token_file),
                                        &options->admin_token);
      !read.ok()) {
    return read;
  }
  if (absl::Status read = ReadTokenFlag(absl::GetFlag(FLAGS_worker_token_file),
                                        &options->worker_token);
      !read.ok()) {
    return read;
  }
  if (!options->admin_token.empty() && options->worker_token.empty()) {
    return BadFlag(
        "--admin_token_file needs --worker_token_file too: without it "
        "anyone who reaches the shard can send clock reports that move a "
        "checkpoint's cut or lock a worker out");
  }
  if (!options->admin_token.empty() &&
      options->admin_token == options->worker_token) {
    return BadFlag(
        "--worker_token_file must hold another token than "
        "--admin_token_file (workers must not be able to drain)");
  }
  return absl::OkStatus();
}

// The push log's bound, read by ReadStoreFlags().
absl::Status CheckPushLogBound(ps::server::ServerOptions* /*options*/) {
  if (absl::GetFlag(FLAGS_wal_max_log_mb) == 0)
    return BadFlag("--wal_max_log_mb must be positive");
  return absl::OkStatus();
}

// With --etcd: --job, --etcd_lease_s and an address workers can dial,
// checked before the store opens.
absl::Status CheckEtcdFlags(ps::server::ServerOptions* options) {
  if (absl::GetFlag(FLAGS_etcd).empty()) return absl::OkStatus();
  RETURN_IF_ERROR(ps::net::CheckJobName(absl::GetFlag(FLAGS_job)));
  if (absl::GetFlag(FLAGS_etcd_lease_s) < 1)
    return BadFlag("--etcd_lease_s must be >= 1");
  if (absl::GetFlag(FLAGS_join_wait_s) < 0)
    return BadFlag("--join_wait_s must be >= 0");
  const std::string host =
      options->listen_address.substr(0, options->listen_address.rfind(':'));
  if (absl::GetFlag(FLAGS_advertise_address).empty() &&
      (host == "0.0.0.0" || host == "[::]" || host.empty())) {
    return BadFlag(
        "--etcd with --listen on every address needs --advertise_address");
  }
  return absl::OkStatus();
}

// The ShardServer options the flags give; INVALID_ARGUMENT (see BadFlag) for
// the first bad flag, in the order of the readers below.
absl::StatusOr<ps::server::ServerOptions> OptionsFromFlags() {
  using FlagReader = absl::Status (*)(ps::server::ServerOptions*);
  const FlagReader readers[] = {
      ReadServingFlags,        ReadStoreFlags,      ReadDurabilityFlags,
      ReadPushLogRecoveryFlag, ReadWorkerFlags,     RequireDataDir,
      ReadTlsAndListenFlags,   ReadTokenFlags,      CheckPushLogBound,
      CheckEtcdFlags,          ReadReplicationFlags};
  ps::server::ServerOptions options;
  for (FlagReader read : readers) {
    if (absl::Status status = read(&options); !status.ok()) return status;
  }
  // A drain asked over the admin API takes the path SIGTERM takes.
  options.drain = [] { kill(getpid(), SIGTERM); };
  return options;
}

// Prints where the shard serves (the lines scripts and tests wait for) and
// logs it.
void AnnounceServing(const ps::server::ServerOptions& options,
                     const ps::server::ShardServer& server) {
  const std::string address = options.listen_address;
  const std::string host = address.substr(0, address.rfind(':'));
  std::printf("ps_server listening on %s:%d\n", host.c_str(), server.port());
  if (!options.health_listen.empty()) {
    std::printf(
        "ps_server health on %s:%d\n",
        options.health_listen.substr(0, options.health_listen.rfind(':'))
            .c_str(),
        server.health_port());
  }
  if (!options.metrics_listen.empty()) {
    std::printf("ps_server metrics on %s\n", server.metrics_address().c_str());
  }
  std::fflush(stdout);
  LOG(INFO) << "shard " << options.shard_index << " of " << options.num_shards
            << " serving " << options.store.data_dir << " on " << host << ":"
            << server.port()
            << " (durability=" << absl::GetFlag(FLAGS_durability) << ")";
}

// The shard generation (net/shard_directory.h) a data dir last served at
// (or, in a replica's copy, the one its promotion is raising to), in its
// GENERATION file: generation 0 and not `served` without one.
constexpr char kGenerationFile[] = "/GENERATION";

struct DataDirGeneration {
  bool served = false;
  ps::net::ShardGeneration at;
  // Whether it is etcd's `now`: the data dir holds the shard's newest rows.
  bool Is(const ps::net::ShardGeneration& now) const {
    return served && at.generation == now.generation &&
           at.promotion == now.promotion;
  }
};

absl::StatusOr<DataDirGeneration> ReadDataDirGeneration(
    const std::string& data_dir) {
  DataDirGeneration read;
  std::ifstream in(data_dir + kGenerationFile);
  if (!in) return read;
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  absl::StatusOr<ps::net::ShardGeneration> parsed =
      ps::net::ParseGeneration(text);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(data_dir, kGenerationFile, ": ",
                                            parsed.status().message()));
  }
  read.served = true;
  read.at = *std::move(parsed);
  return read;
}

absl::Status WriteDataDirGeneration(const std::string& data_dir,
                                    uint64_t generation,
                                    const std::string& promotion) {
  return ps::WriteFileDurably(
      data_dir + kGenerationFile,
      ps::net::GenerationText(generation, promotion) + "\n");
}

// A promotion's token: what tells it from another one to the same
// generation.
std::string NewPromotionToken() {
  absl::BitGen random;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(random));
}

// What this shard says of itself in etcd: its address, index and count.
ps::net::ShardRecord OwnRecord(const ps::server::ServerOptions& options,
                               int port) {
  ps::net::ShardRecord record;
  record.index = static_cast<int>(options.shard_index);
  record.num_shards =
      static_cast<int>(std::max(options.num_shards, options.shard_index + 1));
  // CheckEtcdFlags() made sure a wildcard --listen has --advertise_address.
  record.address = absl::GetFlag(FLAGS_advertise_address);
  if (record.address.empty()) {
    record.address = absl::StrCat(
        options.listen_address.substr(0, options.listen_address.rfind(':')),
        ":", port);
  }
  return record;
}

// Under --etcd, a replica's watch of its primary's registration: once the
// key is gone (the primary stopped, or was paused or died past its lease),
// the replica is promoted (ShardServer::Promote()), registered in the
// primary's place, fenced by that registration, and runs for the
// coordinator. If another process took the index first (the primary came
// back, or another replica was promoted), or the shard is registered at
// another address than the one this replica follows, the replica cannot
// follow any more: it stops, to be copied again.
class PrimaryWatch {
 public:
  // `allow_unclean_promotion`: take the shard over even when the recorded
  // in-sync set does not name this replica.
  // `primary_address`: the address this replica follows.
  PrimaryWatch(ps::net::EtcdClient* etcd, ps::server::ShardServer* server,
               ps::net::ShardRecord own, std::string primary_address,
               std::string data_dir, bool allow_unclean_promotion)
      : etcd_(etcd),
        server_(server),
        own_(std::move(own)),
        primary_address_(std::move(primary_address)),
        data_dir_(std::move(data_dir)),
        allow_unclean_promotion_(allow_unclean_promotion) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PrimaryWatch() { Stop(); }

  void Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }
  // Set once promoted: the registration (released before the server
  // stops, after FenceBy(nullptr)).
  std::unique_ptr<ps::net::LeasedKey> TakeRegistration() {
    return std::move(registration_);
  }
  // Set once promoted (null before, and while promoting).
  const ps::net::LeasedKey* registration() const {
    return promoted_.load() ? registration_.get() : nullptr;
  }

 private:
  void Run() {
    const std::string job = absl::GetFlag(FLAGS_job);
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      // Under --replicas a restart finds the role again (and copies anew).
      if (absl::Status following = server_->FollowingError();
          !following.ok() && absl::GetFlag(FLAGS_replicas) > 0) {
        LOG(ERROR) << "this replica stopped following its primary ("
                   << following << "); exiting, to be restarted and copy "
                   << "the shard again";
        failed_ = true;
        kill(getpid(), SIGTERM);
        return;
      }
      absl::StatusOr<ps::net::ShardRecord> primary =
          ps::net::FindShard(*etcd_, job, own_.index);
      if (primary.ok() && primary->address != primary_address_) {
        // Another process serves the shard (a replica promoted while this
        // one looked away): the feed followed is gone for good, so waiting
        // out --replica_follow_retry on it only keeps this replica out of
        // the new primary's in-sync set longer.
        LOG(ERROR) << "shard " << own_.index << " is served by "
                   << primary->address << " now, not by " << primary_address_
                   << " that this replica follows; exiting, to be restarted "
                      "and copy the shard from it";
        failed_ = true;
        kill(getpid(), SIGTERM);
        return;
      }
      if (!absl::IsNotFound(primary.status())) continue;
      // A shard that left the job (drained, the last one) and stopped:
      // nothing to take over; this replica stops too, as an operator
      // scaling the job down expects (exit 0).
      if (absl::StatusOr<uint32_t> shards = ps::net::MapShardCount(*etcd_, job);
          shards.ok() && *shards != 0 &&
          own_.index >= static_cast<int>(*shards)) {
        LOG(WARNING) << "shard " << own_.index
                     << " left the job (its slot map counts " << *shards
                     << " shards): this replica has nothing to take over "
                        "and stops";
        kill(getpid(), SIGTERM);
        return;
      }
      LOG(WARNING) << "shard " << own_.index
                   << "'s registration is gone: promoting this replica";
      if (absl::Status promoted = TakeOver(job); !promoted.ok()) {
        LOG(ERROR) << "promoting this replica failed (" << promoted
                   << "); stopping, to be copied again";
        failed_ = true;
        kill(getpid(), SIGTERM);
      }
      return;
    }
  }

  // Stops following, raises the shard's generation (so that the old
  // primary never takes the shard back), registers in its place, and only
  // then takes pushes. A failure before the registration leaves a replica
  // (its data dir still one), to be copied again.
  absl::Status TakeOver(const std::string& job) {
    const absl::Duration lease =
        absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s));
    RETURN_IF_ERROR(server_->StopFollowing());
    const std::string promotion = NewPromotionToken();
    absl::StatusOr<uint64_t> raised_to;
    // The in-sync set may change between the check and the raise (a
    // replica added, or this one dropped): checked again, a few times.
    for (int attempt = 0; attempt < 3; ++attempt) {
      ASSIGN_OR_RETURN(const ps::net::ShardGeneration seen,
                       ps::net::ReadShardGeneration(*etcd_, job, own_.index));
      // The raise holds only while the in-sync set is as checked: a
      // primary that drops this replica meanwhile is not replaced by it.
      ASSIGN_OR_RETURN(const std::optional<int64_t> in_sync_revision,
                       CheckInSync(job, seen));
      // The promotion is written into the data dir before etcd: once etcd
      // holds it, however it is cut short, the data dir is the newest and
      // a start finishes it (ChooseRole()).
      RETURN_IF_ERROR(
          WriteDataDirGeneration(data_dir_, seen.generation + 1, promotion));
      raised_to = ps::net::RaiseShardGeneration(*etcd_, job, own_.index, seen,
                                                promotion, in_sync_revision);
      if (!absl::IsAborted(raised_to.status())) break;
    }
    ASSIGN_OR_RETURN(const uint64_t generation, std::move(raised_to));
    ASSIGN_OR_RETURN(const ps::net::ShardGeneration raised,
                     ps::net::ReadShardGeneration(*etcd_, job, own_.index));
    if (raised.generation != generation || raised.promotion != promotion) {
      return absl::AbortedError(
          absl::StrCat("shard ", own_.index, "'s generation rose past ",
                       generation, " at once (another promotion)"));
    }
    // The generation is raised: this replica alone may take the shard, so
    // etcd out of reach for a moment is waited out.
    const absl::Time give_up = absl::Now() + std::max(lease, absl::Seconds(10));
    while (true) {
      absl::StatusOr<std::unique_ptr<ps::net::LeasedKey>> registered =
          ps::net::RegisterShard(etcd_, job, own_, lease, raised);
      if (registered.ok()) {
        registration_ = *std::move(registered);
        break;
      }
      const bool transient = absl::IsUnavailable(registered.status()) ||
                             absl::IsDeadlineExceeded(registered.status());
      if (!transient || absl::Now() >= give_up) return registered.status();
      LOG(WARNING) << "registering the promoted replica: "
                   << registered.status() << "; retrying";
      absl::SleepFor(absl::Milliseconds(250));
    }
    server_->FenceBy(registration_.get());
    promoted_ = true;
    RETURN_IF_ERROR(server_->Promote());
    RETURN_IF_ERROR(server_->RecordInSyncSet());
    LOG(INFO) << "registered in etcd as " << ps::net::ShardsPrefix(job)
              << own_.index << " = " << own_.address
              << " (promoted; generation " << generation << ")";
    return server_->CampaignForCoordinator(own_.address, lease);
  }

  // The in-sync set's mod revision when the primary's recorded set (at
  // generation `seen`) names this replica; nothing when it does not but
  // allow_unclean_promotion_ says to go on anyway; FAILED_PRECONDITION
  // otherwise: the replica may lack acknowledged pushes.
  absl::StatusOr<std::optional<int64_t>> CheckInSync(
      const std::string& job, const ps::net::ShardGeneration& seen) {
    ASSIGN_OR_RETURN(const auto ids, server_->FeedAndFollower());
    absl::StatusOr<ps::net::InSyncSet> set =
        ps::net::ReadInSyncSet(*etcd_, job, own_.index);
    if (!set.ok() && !absl::IsNotFound(set.status())) return set.status();
    if (set.ok() && set->generation == seen.generation &&
        set->Holds(ids.first, ids.second)) {
      return std::optional<int64_t>(set->mod_revision);
    }
    const std::string why =
        set.ok()
            ? absl::StrCat("shard ", own_.index, "'s recorded in-sync set (",
                           ps::net::InSyncText(*set),
                           ") does not name this replica (feed ", ids.first,
                           ", follower ", ids.second, ")")
            : absl::StrCat("shard ", own_.index,
                           " has no recorded in-sync set");
    if (allow_unclean_promotion_) {
      LOG(WARNING) << why
                   << "; promoting anyway (--allow_unclean_promotion): "
                      "pushes the primary acknowledged may be lost";
      return std::optional<int64_t>();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        why,
        ": it may lack pushes the primary acknowledged, so it is not "
        "promoted (--allow_unclean_promotion promotes it anyway)"));
  }

  ps::net::EtcdClient* const etcd_;
  ps::server::ShardServer* const server_;
  const ps::net::ShardRecord own_;
  const std::string primary_address_;
  const std::string data_dir_;
  const bool allow_unclean_promotion_;
  std::unique_ptr<ps::net::LeasedKey> registration_;
  absl::Notification stop_;
  std::thread thread_;

  std::atomic<bool> promoted_{false};

 public:
  std::atomic<bool> failed_{false};
};

// The shard's record in etcd while it serves (--etcd), or none; a
// replica's watch of its primary instead.
struct EtcdPresence {
  std::unique_ptr<ps::net::EtcdClient> etcd;
  std::unique_ptr<ps::net::LeasedKey> registration;
  std::unique_ptr<PrimaryWatch> watch;
  // Under --replicas, a new shard's claim (ChooseRole()), held until this
  // process registered as its primary.
  std::unique_ptr<ps::net::LeasedKey> claim;
};

// With --etcd: a client of the job's etcd, set in `options` so that the
// shard follows the job's slot map from its start.
absl::StatusOr<EtcdPresence> ConnectToEtcd(ps::server::ServerOptions* options) {
  EtcdPresence presence;
  const std::string endpoints = absl::GetFlag(FLAGS_etcd);
  if (endpoints.empty()) return presence;
  ps::net::EtcdOptions etcd_options;
  etcd_options.endpoints = ps::SplitAddressList(endpoints);
  RETURN_IF_ERROR(ps::net::AddEtcdSecurityFromFlags(&etcd_options));
  ASSIGN_OR_RETURN(presence.etcd, ps::net::EtcdClient::Connect(etcd_options));
  options->etcd = presence.etcd.get();
  options->job = absl::GetFlag(FLAGS_job);
  // A replica outlasts its dead primary's lease, to be promoted.
  options->replica_follow_retry =
      std::max(options->replica_follow_retry,
               3 * absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s)));
  return presence;
}

// Under --etcd: refuses (FAILED_PRECONDITION, exit 70) a data dir whose
// etcd went backwards since it last saw it, unless --accept_etcd_rollback.
absl::Status CheckEtcdWentOn(const std::string& data_dir,
                             ps::net::EtcdClient& etcd) {
  ASSIGN_OR_RETURN(const std::optional<ps::net::EtcdPosition> seen,
                   ps::server::ReadEtcdSeen(data_dir));
  if (!seen.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const ps::net::EtcdPosition now, etcd.Position());
  absl::Status went_on = ps::server::CheckEtcdWentOn(*seen, now);
  if (!went_on.ok() && absl::GetFlag(FLAGS_accept_etcd_rollback)) {
    LOG(WARNING) << went_on.message() << "; starting (--accept_etcd_rollback)";
    return absl::OkStatus();
  }
  return went_on;
}

// Under --etcd: records where etcd is in the data dir (after a check that
// it went on, unless `unchecked`); a failure is logged, not fatal.
void RecordEtcdSeen(const std::string& data_dir, ps::net::EtcdClient& etcd,
                    bool unchecked) {
  absl::StatusOr<ps::net::EtcdPosition> now = etcd.Position();
  if (!now.ok()) return;
  if (!unchecked) {
    absl::StatusOr<std::optional<ps::net::EtcdPosition>> seen =
        ps::server::ReadEtcdSeen(data_dir);
    if (seen.ok() && seen->has_value()) {
      if (absl::Status went_on = ps::server::CheckEtcdWentOn(**seen, *now);
          !went_on.ok()) {
        LOG_EVERY_N(ERROR, 30) << went_on.message();
        return;
      }
    }
  }
  if (absl::Status written = ps::server::WriteEtcdSeen(data_dir, *now);
      !written.ok()) {
    LOG_EVERY_N(WARNING, 30) << "recording etcd's revision: " << written;
  }
}

// --replica_of=N under --etcd: the address shard N of the job is registered
// at (waiting up to --join_wait_s for it), and this replica's index.
absl::Status FindPrimary(ps::server::ServerOptions* options,
                         const EtcdPresence& presence) {
  uint32_t index = 0;
  if (options->replica_of.empty()) return absl::OkStatus();
  if (!absl::SimpleAtoi(options->replica_of, &index)) {
    if (presence.etcd == nullptr) return absl::OkStatus();
    return BadFlag(
        "under --etcd, --replica_of is the index of the shard to replicate "
        "(its address is looked up, and followed through failovers)");
  }
  if (presence.etcd == nullptr) {
    return BadFlag(
        "--replica_of=N (a shard's index) needs --etcd; without it, give the "
        "primary's HOST:PORT");
  }
  const absl::Time give_up =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_join_wait_s));
  while (true) {
    absl::StatusOr<ps::net::ShardRecord> primary = ps::net::FindShard(
        *presence.etcd, absl::GetFlag(FLAGS_job), static_cast<int>(index));
    if (primary.ok()) {
      options->replica_of = primary->address;
      options->shard_index = index;
      options->num_shards = static_cast<uint32_t>(primary->num_shards);
      return absl::OkStatus();
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", absl::GetFlag(FLAGS_job),
          " is not registered in etcd: ", primary.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// The address this process will register under, where the flags say it
// before the server starts (empty for --listen on port 0).
std::string AddressFromFlags(const ps::server::ServerOptions& options) {
  if (!absl::GetFlag(FLAGS_advertise_address).empty()) {
    return absl::GetFlag(FLAGS_advertise_address);
  }
  if (absl::EndsWith(options.listen_address, ":0")) return "";
  return options.listen_address;
}

// ChooseRole()'s replica role: a replica of shard `index`, registered as
// `primary`; a data dir of an older generation is emptied for the copy, one
// of the current generation refused.
absl::Status FollowRegisteredPrimary(int index,
                                     const ps::net::ShardRecord& primary,
                                     const DataDirGeneration& own,
                                     const ps::net::ShardGeneration& generation,
                                     bool replica_copy,
                                     ps::server::ServerOptions* options) {
  const std::string& dir = options->store.data_dir;
  std::error_code error;
  const bool holds_rows =
      std::filesystem::exists(dir) && !std::filesystem::is_empty(dir, error);
  if (holds_rows && !replica_copy) {
    if (!own.served || own.at.generation >= generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", index, " is served by ", primary.address, ", and ", dir,
          " holds the shard's rows of its current generation too: give this "
          "replica an empty --data_dir"));
    }
    options->discard_superseded_data_dir = true;
  }
  if (!options->restore_from.empty()) {
    LOG(WARNING) << "shard " << index
                 << " is served: this replica copies it, not --restore_from";
    options->restore_from.clear();
  }
  // FindPrimary() looks the address up (again).
  options->replica_of = absl::StrCat(index);
  LOG(INFO) << "shard " << index << " is served by " << primary.address
            << " (generation " << generation.generation
            << "): this process is its replica";
  return absl::OkStatus();
}

// --replicas under --etcd: whether this process serves its shard as the
// primary or (setting options->replica_of) as a replica of the process
// registered as the shard. Only a data dir that holds the shard's newest
// rows becomes the primary; a replica's copy does only by its promotion
// (PrimaryWatch), which a start finishes once etcd holds it, never
// otherwise (it might lack what the primary took since it stopped
// following).
absl::Status ChooseRole(ps::server::ServerOptions* options,
                        EtcdPresence* presence) {
  if (absl::GetFlag(FLAGS_replicas) == 0) return absl::OkStatus();
  const std::string job = absl::GetFlag(FLAGS_job);
  const int index = static_cast<int>(options->shard_index);
  const std::string& dir = options->store.data_dir;
  const std::string own_address = AddressFromFlags(*options);
  const absl::Duration lease = absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s));
  const absl::Time give_up =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_join_wait_s));
  ps::net::EtcdClient& etcd = *presence->etcd;
  while (true) {
    // The registration first: a promotion raises the generation before it
    // registers, so the generation read next is at least the registered
    // process's.
    absl::StatusOr<ps::net::ShardRecord> primary =
        ps::net::FindShard(etcd, job, index);
    if (!primary.ok() && !absl::IsNotFound(primary.status())) {
      return primary.status();
    }
    ASSIGN_OR_RETURN(const ps::net::ShardGeneration generation,
                     ps::net::ReadShardGeneration(etcd, job, index));
    const bool replica_copy = ps::server::IsReplicaDataDir(dir);
    ASSIGN_OR_RETURN(const DataDirGeneration own, ReadDataDirGeneration(dir));
    // (A replica's copy holds a generation only while promoted.)
    if (own.served && !replica_copy &&
        own.at.generation > generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " served shard ", index, " at generation ", own.at.generation,
          ", newer than etcd's ", generation.generation,
          ": etcd lost its state, or --job names another job"));
    }
    const bool newest = own.Is(generation);
    std::string waiting_for;
    if (primary.ok() && primary->address != own_address) {
      return FollowRegisteredPrimary(index, *primary, own, generation,
                                     replica_copy, options);
    } else if (newest && generation.mod_revision != 0) {
      // No other process serves the shard (or this one's previous run,
      // whose lease RegisterShard() waits out). A replica's copy at the
      // shard's generation is one whose promotion raised it and was then
      // cut short: only it holds that promotion's token. (One cut short
      // before etcd took it is not finished: the primary it left may have
      // served since, at the old generation.)
      return absl::OkStatus();
    } else if (!replica_copy && generation.mod_revision == 0 &&
               (!own.served || newest)) {
      // A new shard (no generation yet): one process claims it, a data dir
      // that served it at generation 0 (a first registration cut short) or
      // an empty one.
      absl::StatusOr<std::unique_ptr<ps::net::LeasedKey>> claim =
          ps::net::ClaimNewShard(presence->etcd.get(), job, index, lease);
      if (claim.ok()) {
        LOG(INFO) << "shard " << index
                  << " is new: this process claimed it, as its primary";
        presence->claim = *std::move(claim);
        return absl::OkStatus();
      }
      // Another process claimed it, or registered as it, first.
      if (!absl::IsAlreadyExists(claim.status()) &&
          !absl::IsFailedPrecondition(claim.status())) {
        return claim.status();
      }
      waiting_for = " is new, and another process claimed the shard";
    } else {
      waiting_for = replica_copy ? " holds a replica's copy, which becomes the "
                                   "primary only by a promotion etcd holds"
                                 : absl::StrCat(
                                       " does not hold the shard's newest "
                                       "rows (generation ",
                                       generation.generation, ")");
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", job,
          ": this process can be neither its primary nor a replica yet: ", dir,
          waiting_for, ". Waited --join_wait_s"));
    }
    LOG_EVERY_N(INFO, 40) << "shard " << index << ": " << dir << waiting_for;
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// With --etcd: registers the shard under its job and runs for the job's
// clock coordinator.
absl::Status RegisterInEtcd(const ps::server::ServerOptions& options,
                            ps::server::ShardServer& server,
                            EtcdPresence* presence) {
  if (presence->etcd == nullptr) return absl::OkStatus();
  const ps::net::ShardRecord record = OwnRecord(options, server.port());
  if (!options.replica_of.empty()) {
    // The primary holds the index; this replica takes it over when the
    // primary's registration goes.
    presence->watch = std::make_unique<PrimaryWatch>(
        presence->etcd.get(), &server, record, options.replica_of,
        options.store.data_dir, absl::GetFlag(FLAGS_allow_unclean_promotion));
    return absl::OkStatus();
  }
  // A data dir the shard failed over from (a replica took its place since
  // it last served) is stale: it must not serve the shard again.
  ASSIGN_OR_RETURN(
      const ps::net::ShardGeneration generation,
      ps::net::ReadShardGeneration(*presence->etcd, absl::GetFlag(FLAGS_job),
                                   record.index));
  ASSIGN_OR_RETURN(const DataDirGeneration own,
                   ReadDataDirGeneration(options.store.data_dir));
  const uint64_t own_generation = own.at.generation;
  if (generation.generation > own_generation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", record.index, " failed over to a replica (generation ",
        generation.generation, ") since ", options.store.data_dir,
        " last served it (generation ", own_generation,
        "): its rows are stale. Start this process as a replica "
        "(--replica_of=",
        record.index, ") on an empty --data_dir"));
  }
  if (own.served && own_generation == generation.generation &&
      own.at.promotion != generation.promotion) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.store.data_dir, " was being promoted to shard ", record.index,
        "'s generation ", own_generation,
        ", which another replica's promotion took: its rows are stale. Start "
        "this process as a replica on an empty --data_dir"));
  }
  if (own_generation > generation.generation) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.store.data_dir, " served shard ", record.index,
                     " at generation ", own_generation, ", newer than etcd's ",
                     generation.generation,
                     ": etcd lost its state, or --job names another job"));
  }
  // Written before the registration: a crash between leaves a data dir
  // that may serve again (nothing was acknowledged: pushes wait for the
  // registration).
  RETURN_IF_ERROR(WriteDataDirGeneration(
      options.store.data_dir, generation.generation, generation.promotion));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ps::net::LeasedKey> registered,
      ps::net::RegisterShard(
          presence->etcd.get(), absl::GetFlag(FLAGS_job), record,
          absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s)), generation));
  presence->registration = std::move(registered);
  presence->claim.reset();
  // Before any push is taken: from now on no push is acknowledged that a
  // replica the record names lacks.
  RETURN_IF_ERROR(server.RecordInSyncSet());
  LOG(INFO) << "registered in etcd as "
            << ps::net::ShardsPrefix(absl::GetFlag(FLAGS_job)) << record.index
            << " = " << record.address;
  server.FenceBy(presence->registration.get());
  RETURN_IF_ERROR(
      server.JoinJob(absl::Seconds(absl::GetFlag(FLAGS_join_wait_s))));
  return server.CampaignForCoordinator(
      record.address, absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s)));
}

// Waits for one of `shutdown_signals` (or an admin drain, which raises
// SIGTERM), then leaves etcd (if registered), drains for --drain_seconds and
// stops the server; meanwhile, under --etcd, records where etcd is in
// `data_dir` every 10 s. The exit code: 0 once it stopped cleanly, 70
// otherwise.
int ServeUntilSignal(const sigset_t& shutdown_signals,
                     std::unique_ptr<ps::server::ShardServer> server,
                     EtcdPresence presence, const std::string& data_dir) {
  // Under --replicas a primary whose registration is lost for good (a
  // replica took the shard while it was paused or cut off) stops, to start
  // again as a replica.
  auto registration_lost = [&presence] {
    const ps::net::LeasedKey* registration =
        presence.registration != nullptr ? presence.registration.get()
        : presence.watch != nullptr      ? presence.watch->registration()
                                         : nullptr;
    return absl::GetFlag(FLAGS_replicas) > 0 && registration != nullptr &&
           registration->lost();
  };
  int signal_number = 0;
  bool lost = false;
  for (int second = 1;; ++second) {
    const timespec one_second = {1, 0};
    signal_number = sigtimedwait(&shutdown_signals, nullptr, &one_second);
    if (signal_number > 0) break;
    // Where etcd is, every 10 s: a restore from a snapshot older than
    // that is refused at the next start.
    if (presence.etcd != nullptr && second % 10 == 0) {
      RecordEtcdSeen(data_dir, *presence.etcd, /*unchecked=*/false);
    }
    if (registration_lost()) {
      LOG(ERROR) << "this shard's registration is lost for good (another "
                    "process serves the shard): stopping, to start again "
                    "as a replica";
      lost = true;
      break;
    }
  }
  bool failed = lost;
  if (presence.watch != nullptr) {
    presence.watch->Stop();
    failed = failed || presence.watch->failed_.load();
    presence.registration = presence.watch->TakeRegistration();
  }
  // The etcd client outlives the server, which follows the slot map with it.
  auto keep_etcd = std::move(presence.etcd);
  const absl::Duration drain =
      absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  LOG(INFO) << (lost ? std::string("the shard is lost")
                     : absl::StrCat("signal ", signal_number,
                                    " (or an admin drain)"))
            << ": draining for up to " << absl::GetFlag(FLAGS_drain_seconds)
            << " s";
  // Still registered (and fenced by it) while pushes stop and the replicas
  // catch up: one promoted once this shard lets go has every push it
  // acknowledged.
  server->HandOver(absl::Now() + drain / 2);
  absl::Status stopped = server->Shutdown(drain / 2);
  server->FenceBy(nullptr);
  // Workers that look the shards up from now on do not find this one.
  presence.registration.reset();
  server.reset();
  if (!stopped.ok()) {
    LOG(ERROR) << "shutdown: " << stopped;
    return ps::kExitFailed;
  }
  if (failed) return ps::kExitFailed;
  LOG(INFO) << "stopped cleanly";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  InitProcess(argc, argv);
  const sigset_t shutdown_signals = BlockShutdownSignals();
  absl::StatusOr<ps::server::ServerOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(std::string(options.status().message()));

  absl::StatusOr<EtcdPresence> presence = ConnectToEtcd(&*options);
  if (!presence.ok()) return Fail(std::string(presence.status().message()));
  if (presence->etcd != nullptr) {
    if (absl::Status went_on =
            CheckEtcdWentOn(options->store.data_dir, *presence->etcd);
        !went_on.ok()) {
      return Fail(went_on);
    }
  }
  if (absl::Status role = ChooseRole(&*options, &*presence); !role.ok()) {
    return Fail(role);
  }
  if (absl::Status found = FindPrimary(&*options, *presence); !found.ok()) {
    if (absl::IsInvalidArgument(found))
      return Fail(std::string(found.message()));
    return Fail(found);
  }
  auto server = ps::server::ShardServer::Start(*options);
  // Options that do not go together are a bad command (64), as flags are.
  if (!server.ok() && absl::IsInvalidArgument(server.status()))
    return Fail(std::string(server.status().message()));
  // Anything else (a port in use, a data dir of another shard): 70; 69
  // means a shard this binary needed did not answer, which is not this.
  if (!server.ok()) {
    Fail(server.status());
    return ps::kExitFailed;
  }
  const absl::Status registered =
      RegisterInEtcd(*options, **server, &*presence);
  if (absl::IsInvalidArgument(registered))
    return Fail(std::string(registered.message()));
  if (!registered.ok()) return Fail(registered);
  if (presence->etcd != nullptr) {
    RecordEtcdSeen(options->store.data_dir, *presence->etcd,
                   /*unchecked=*/absl::GetFlag(FLAGS_accept_etcd_rollback));
  }
  AnnounceServing(*options, **server);
  return ServeUntilSignal(shutdown_signals, *std::move(server),
                          *std::move(presence), options->store.data_dir);
}
