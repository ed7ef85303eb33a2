#include "server/server_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/address_list.h"
#include "base/status_macros.h"
#include "cluster/shard_directory.h"
#include "glog/logging.h"
#include "net/etcd_security_flags.h"
#include "net/server_tls_flags.h"
#include "net/tls_credentials.h"

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
ABSL_FLAG(bool, hot_tier_huge_pages, true,
          "Keep the hot tier's rows on transparent huge pages (madvise), "
          "which spares most TLB misses of random row reads; false: the "
          "heap's 4 KiB pages (for a kernel whose huge-page compaction "
          "stalls page faults).");
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
          "HOST:PORT of a primary shard to replicate (without --etcd; under "
          "it, --replica_of_shard): copy its store into --data_dir (empty, or "
          "a replica's from before), then apply every push and table change "
          "it makes, in order. A replica serves pulls, refuses pushes and "
          "takes the primary's shard index. Empty: a primary. (A number here "
          "is the old form of --replica_of_shard.)");
ABSL_FLAG(int32_t, replica_of_shard, -1,
          "Under --etcd: replicate shard N of the job, its address looked up "
          "in etcd and followed through failovers; the replica takes the "
          "primary's place once the primary's registration goes, or exits "
          "70, to be started again and copy anew, once another process "
          "serves the shard. -1: none.");
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
namespace ps::server {
namespace {

// A bad flag: INVALID_ARGUMENT whose message is what ps_server prints
// before it exits 64.
absl::Status BadFlag(const std::string& message) {
  return absl::InvalidArgumentError(message);
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
absl::Status ReadServingFlags(ServerOptions* options) {
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
absl::Status ReadStoreFlags(ServerOptions* options) {
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
  store->hot_tier_huge_pages = absl::GetFlag(FLAGS_hot_tier_huge_pages);
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
absl::Status ReadDurabilityFlags(ServerOptions* options) {
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
absl::Status ReadPushLogRecoveryFlag(ServerOptions* options) {
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
absl::Status ReadWorkerFlags(ServerOptions* options) {
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

absl::Status RequireDataDir(ServerOptions* options) {
  if (options->store.data_dir.empty()) return BadFlag("--data_dir is required");
  return absl::OkStatus();
}

// TLS, whom the shard may listen to, the checkpoint to restore, and the
// metrics and health servers' addresses.
absl::Status ReadTlsAndListenFlags(ServerOptions* options) {
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
// --max_replication_lag_mb in bytes; by default a 32nd of the memory (the
// container's limit where there is one), at least 64 MiB.
absl::StatusOr<uint64_t> MaxReplicationLagBytes() {
  if (const uint64_t mb = absl::GetFlag(FLAGS_max_replication_lag_mb); mb > 0) {
    if (mb > (uint64_t{1} << 20)) {
      return BadFlag("--max_replication_lag_mb must be at most 1048576");
    }
    return mb << 20;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  uint64_t memory =
      pages > 0 && page_bytes > 0
          ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes)
          : 0;
  // In a container, its limit rather than the machine's.
  uint64_t limit = 0;
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  if (cgroup >> limit && limit > 0 && (memory == 0 || limit < memory)) {
    memory = limit;
  }
  return std::max<uint64_t>(memory / 32, uint64_t{64} << 20);
}

absl::Status ReadReplicationFlags(ServerOptions* options) {
  options->replica_of = absl::GetFlag(FLAGS_replica_of);
  if (!options->replica_of.empty() &&
      absl::GetFlag(FLAGS_replica_of_shard) >= 0) {
    return BadFlag(
        "--replica_of (an address) and --replica_of_shard (an index under "
        "--etcd) both name the primary: give one");
  }
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
  ASSIGN_OR_RETURN(options->max_replication_lag_bytes,
                   MaxReplicationLagBytes());
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
absl::Status ReadTokenFlags(ServerOptions* options) {
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
absl::Status CheckPushLogBound(ServerOptions* /*options*/) {
  if (absl::GetFlag(FLAGS_wal_max_log_mb) == 0)
    return BadFlag("--wal_max_log_mb must be positive");
  return absl::OkStatus();
}

// With --etcd: --job, --etcd_lease_s and an address workers can dial,
// checked before the store opens.
absl::Status CheckEtcdFlags(ServerOptions* options) {
  if (absl::GetFlag(FLAGS_etcd).empty()) return absl::OkStatus();
  RETURN_IF_ERROR(ps::cluster::CheckJobName(absl::GetFlag(FLAGS_job)));
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

// --replica_of_shard, or its old form --replica_of=N; only under --etcd,
// which takes no address in --replica_of.
absl::Status ReadReplicaOfShard(ServerProcessOptions* options) {
  int32_t shard = absl::GetFlag(FLAGS_replica_of_shard);
  if (uint32_t index = 0;
      absl::SimpleAtoi(options->server.replica_of, &index)) {
    std::fprintf(stderr,
                 "--replica_of=N is deprecated: use --replica_of_shard=N\n");
    shard = static_cast<int32_t>(index);
    options->server.replica_of.clear();
  }
  if (shard < -1) return BadFlag("--replica_of_shard must be >= 0 (or -1)");
  if (shard >= 0 && !options->etcd.enabled()) {
    return BadFlag(
        "--replica_of_shard needs --etcd; without it, give the primary's "
        "address in --replica_of=HOST:PORT");
  }
  if (!options->server.replica_of.empty() && options->etcd.enabled()) {
    return BadFlag(
        "under --etcd, name the shard to replicate with --replica_of_shard=N "
        "(its address is looked up, and followed through failovers), not "
        "--replica_of");
  }
  options->etcd.replica_of_shard = shard;
  return absl::OkStatus();
}

// --etcd and what goes with it.
absl::Status ReadEtcdFlags(EtcdMembershipOptions* etcd) {
  etcd->connection.endpoints = SplitAddressList(absl::GetFlag(FLAGS_etcd));
  if (!absl::GetFlag(FLAGS_etcd).empty() && !etcd->enabled()) {
    return BadFlag("--etcd names no endpoint");
  }
  if (etcd->enabled()) {
    RETURN_IF_ERROR(net::AddEtcdSecurityFromFlags(&etcd->connection));
  }
  etcd->job = absl::GetFlag(FLAGS_job);
  etcd->lease = absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_s));
  etcd->advertise_address = absl::GetFlag(FLAGS_advertise_address);
  if (absl::GetFlag(FLAGS_replicas) < 0)
    return BadFlag("--replicas must be >= 0");
  etcd->replicas = absl::GetFlag(FLAGS_replicas);
  etcd->join_wait = absl::Seconds(absl::GetFlag(FLAGS_join_wait_s));
  etcd->accept_etcd_rollback = absl::GetFlag(FLAGS_accept_etcd_rollback);
  etcd->allow_unclean_promotion = absl::GetFlag(FLAGS_allow_unclean_promotion);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerProcessOptions> ServerProcessOptionsFromFlags() {
  using FlagReader = absl::Status (*)(ServerOptions*);
  const FlagReader readers[] = {
      ReadServingFlags,        ReadStoreFlags,      ReadDurabilityFlags,
      ReadPushLogRecoveryFlag, ReadWorkerFlags,     RequireDataDir,
      ReadTlsAndListenFlags,   ReadTokenFlags,      CheckPushLogBound,
      CheckEtcdFlags,          ReadReplicationFlags};
  ServerProcessOptions options;
  for (FlagReader read : readers) {
    RETURN_IF_ERROR(read(&options.server));
  }
  RETURN_IF_ERROR(ReadEtcdFlags(&options.etcd));
  RETURN_IF_ERROR(ReadReplicaOfShard(&options));
  options.drain = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  return options;
}

}  // namespace ps::server
