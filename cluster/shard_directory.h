// File: cluster/shard_directory.h
//
// Where a job's shards, workers and coordinator are found under --etcd.
// Each shard keeps the key /ps/<job>/shards/<index> (its address and the
// job's shard count) alive under an etcd lease: a shard that stops revokes
// it and the key goes at once; one that dies stops renewing and the key
// goes when the lease expires. Workers and ps_admin read the keys instead
// of --servers. Workers keep /ps/<job>/workers/<index> the same way, and
// the elected coordinator /ps/<job>/coordinator.
//
// Thread-safe.

#ifndef PS_CLUSTER_SHARD_DIRECTORY_H_
#define PS_CLUSTER_SHARD_DIRECTORY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"

namespace ps::cluster {

// What a shard says of itself under its key.
struct ShardRecord {
  int index = 0;
  int num_shards = 1;
  // host:port that workers dial.
  std::string address;
};

// INVALID_ARGUMENT unless `job` is 1 to 64 of [a-z0-9_-] (it is part of
// every key).
absl::Status CheckJobName(const std::string& job);

// "/ps/<job>/shards/".
std::string ShardsPrefix(const std::string& job);

// Keeps one key in etcd while this process lives: a shard's record, a
// worker's, the coordinator's election.
class LeasedKey {
 public:
  // Writes `value` at `key` under a lease of `ttl` and renews it every
  // third of `ttl` on a thread of its own; a lease that lapsed (etcd
  // unreachable for longer) is granted again and the key written again.
  // `exclusive`: the key is taken only where no other process holds it; one
  // left by a process that died is waited out (up to `ttl` and a second),
  // then ALREADY_EXISTS. Otherwise the key is overwritten (a restarted
  // process replaces the one it restarts). `etcd` must outlive the key.
  // `may_take_again`, if set, is asked before the key is written again
  // after its lease lapsed: an error leaves it unwritten for good (the
  // process is fenced, held() stays false). An exclusive key
  // is written only while every one of `conditions` holds, in the same
  // transaction (FAILED_PRECONDITION once one does not).
  static absl::StatusOr<std::unique_ptr<LeasedKey>> Start(
      CoordinationStore* etcd, std::string key, std::string value,
      absl::Duration ttl, bool exclusive,
      std::function<absl::Status()> may_take_again = {},
      std::vector<EtcdCondition> conditions = {});

  // Revokes the lease: the key goes at once.
  ~LeasedKey();

  // Whether the key is surely this process's now: the lease's last grant
  // or renewal, timed from before it was asked for, plus its TTL, has not
  // passed. etcd lets the key go no earlier, so a process that writes only
  // while this holds (a shard fencing itself) never writes once another
  // holds the key. Timed by the boot clock: a step of the wall clock does
  // not stretch it, and a suspend counts. (A stopped VM stops every clock
  // of its guest: no lease fencing holds there.)
  bool held() const { return SteadyNanos() < held_until_ns_.load(); }

  // Whether the key is lost for good: its lease lapsed and
  // `may_take_again` refused to write it again.
  bool lost() const { return lost_.load(); }

 private:
  LeasedKey(CoordinationStore* etcd, std::string key, std::string value,
            absl::Duration ttl, bool exclusive,
            std::function<absl::Status()> may_take_again,
            std::vector<EtcdCondition> conditions)
      : etcd_(etcd),
        key_(std::move(key)),
        value_(std::move(value)),
        ttl_(ttl),
        exclusive_(exclusive),
        may_take_again_(std::move(may_take_again)),
        conditions_(std::move(conditions)) {}
  absl::Status Register();
  // Whether every one of conditions_ holds now.
  absl::StatusOr<bool> ConditionsHold() const;
  void KeepAlive();

  CoordinationStore* const etcd_;
  const std::string key_, value_;
  const absl::Duration ttl_;
  const bool exclusive_;
  const std::function<absl::Status()> may_take_again_;
  const std::vector<EtcdCondition> conditions_;
  int64_t lease_ = 0;  // the renewing thread's once started
  // CLOCK_BOOTTIME's now, in nanoseconds.
  static int64_t SteadyNanos();
  // On SteadyNanos()'s clock.
  std::atomic<int64_t> held_until_ns_{0};
  std::atomic<bool> lost_{false};
  absl::Notification stop_;
  std::thread renewer_;
};

// Shard `index`'s generation: a counter, not under any lease, that each
// failover of the shard (a replica promoted in its primary's place) raises
// by one, at /ps/<job>/generation/<index>, with a token naming the
// promotion that raised it. A process serves the shard only at the
// generation (and promotion) its data dir was written at: an old primary
// (paused past its lease, or restarted on its data dir) never takes the
// shard back after a replica did.
struct ShardGeneration {
  uint64_t generation = 0;  // 0 before the first failover
  // The token of the promotion that raised it; empty at generation 0.
  std::string promotion;
  int64_t mod_revision = 0;  // 0 while the key does not exist
};
absl::StatusOr<ShardGeneration> ReadShardGeneration(CoordinationStore& etcd,
                                                    const std::string& job,
                                                    int index);
// A generation as written, in etcd and in a data dir: "N" or "N TOKEN".
std::string GenerationText(uint64_t generation, const std::string& promotion);
// INVALID_ARGUMENT unless `text` is GenerationText()'s.
absl::StatusOr<ShardGeneration> ParseGeneration(absl::string_view text);
// Raises the generation from `seen` (ReadShardGeneration()) by one, for
// the promotion `promotion`, only while no process is registered as shard
// `index`; ABORTED if the generation changed since (another promotion came
// first) or a process registered (a restarted primary came first). A raise
// that finds `promotion` (not empty) already there is answered as done: it
// is this promotion's raise sent again after etcd applied it and its answer
// was lost. With `in_sync_revision`, only while the shard's in-sync set
// (ReadInSyncSet()) is still at that mod revision (0: still absent), so
// that a primary that changed it since the promoting replica read it
// (dropping that replica, then acknowledging pushes it lacks) is not
// replaced by it: ABORTED then too.
absl::StatusOr<uint64_t> RaiseShardGeneration(
    CoordinationStore& etcd, const std::string& job, int index,
    const ShardGeneration& seen, const std::string& promotion,
    std::optional<int64_t> in_sync_revision = std::nullopt);

// Which replicas of shard `index` its primary counts as in sync, at
// /ps/<job>/in_sync/<index>: followers of one feed (by the ids the feed
// gave them at their copy), written by the primary at its generation. A
// primary removes a replica here before it acknowledges a push that
// replica lacks, so a replica named here holds every acknowledged push,
// and only such a replica is promoted (unless the operator accepts losing
// some: ps_server --allow_unclean_promotion).
struct InSyncSet {
  uint64_t generation = 0;
  uint64_t feed = 0;
  std::vector<uint64_t> followers;  // ascending
  // The key's mod revision, as ReadInSyncSet() found it.
  int64_t mod_revision = 0;

  bool Holds(uint64_t feed_id, uint64_t follower) const;
};
// "GENERATION FEED ID,ID,..." and back; INVALID_ARGUMENT for other text.
std::string InSyncText(const InSyncSet& set);
absl::StatusOr<InSyncSet> ParseInSync(absl::string_view text);
// NOT_FOUND while the shard's primary has written none.
absl::StatusOr<InSyncSet> ReadInSyncSet(CoordinationStore& etcd,
                                        const std::string& job, int index);
// Writes `set` while the shard's generation is still `at` (as read, with
// its mod revision): FAILED_PRECONDITION once it moved (a replica was
// promoted: this primary is fenced); ABORTED when the key changed under
// the write (retry). A write etcd applied whose answer was lost is OK.
absl::Status WriteInSyncSet(CoordinationStore& etcd, const std::string& job,
                            int index, const ShardGeneration& at,
                            const InSyncSet& set);

// The first start of shard `index` among processes that find their roles
// (ps_server --replicas): a claim, held under a lease of `ttl` until the
// claimer registers as the shard's primary, so that one process of many
// takes a new shard. FAILED_PRECONDITION once the shard is not new (it has
// a generation: some process registered as it); ALREADY_EXISTS while
// another live process holds the claim (one left by a process that died is
// waited out first).
absl::StatusOr<std::unique_ptr<LeasedKey>> ClaimNewShard(
    CoordinationStore* etcd, const std::string& job, int index,
    absl::Duration ttl);

// Shard `index`'s record now. NOT_FOUND when none is registered (its
// process stopped, or its lease ran out).
absl::StatusOr<ShardRecord> FindShard(CoordinationStore& etcd,
                                      const std::string& job, int index);

// Registers a shard's record at ShardsPrefix(job) + index, exclusively
// (ALREADY_EXISTS when another live process holds the index), and only
// while the shard's generation is still `generation` (as read; then and
// after a lapse): FAILED_PRECONDITION once a replica was promoted. A
// shard's first registration writes its generation 0, so that a shard that
// served is told from a new one.
absl::StatusOr<std::unique_ptr<LeasedKey>> RegisterShard(
    CoordinationStore* etcd, const std::string& job, const ShardRecord& record,
    absl::Duration ttl, const ShardGeneration& generation = {});

// "/ps/<job>/workers/": each worker's key, "<index>" -> its lease at the
// coordinator in milliseconds, under an etcd lease of that length. A
// coordinator that takes over learns from them which workers to wait for.
std::string WorkersPrefix(const std::string& job);

// Registers worker `index` of `job`, whose coordinator lease is `lease`.
absl::StatusOr<std::unique_ptr<LeasedKey>> RegisterWorker(
    CoordinationStore* etcd, const std::string& job, uint32_t index,
    absl::Duration lease);

// A worker registered in etcd.
struct RegisteredWorker {
  uint32_t index = 0;
  absl::Duration lease;
};

// The workers of `job` registered now. Keys that are not a worker's are
// left out (logged).
absl::StatusOr<std::vector<RegisteredWorker>> RegisteredWorkers(
    CoordinationStore& etcd, const std::string& job);

// "/ps/<job>/slot_map": the job's slot map (cluster/etcd_slot_map.h), whose
// shard count says how many shards the job has.
std::string SlotMapKey(const std::string& job);

// "/ps/<job>/coordinator": the elected coordinator's "<index> <address>",
// under its lease (cluster/coordinator_election.h).
std::string CoordinatorKey(const std::string& job);

// The coordinator's address, waiting up to `wait` for one to be elected.
// DEADLINE_EXCEEDED when none was; etcd's errors once the wait is over.
absl::StatusOr<std::string> FindCoordinator(CoordinationStore& etcd,
                                            const std::string& job,
                                            absl::Duration wait);

// Waits up to `wait` until every shard of `job` is registered (indexes 0
// to count - 1, the count being the job's slot map's, or, before the job
// has a map, the one its records agree on); their addresses in index
// order. Records beyond the map's count (a shard that left and has not
// stopped, one not joined yet) are left out. Until the wait is over, whatever
// stands in the way is waited out (etcd unreachable, a shard missing,
// records of an earlier shard count whose leases have not run out); then
// it is the error: DEADLINE_EXCEEDED naming the missing shards,
// FAILED_PRECONDITION for records that disagree, etcd's own.
absl::StatusOr<std::vector<std::string>> FindShards(CoordinationStore& etcd,
                                                    const std::string& job,
                                                    absl::Duration wait);

// The shard count of `job`'s slot map (the shards in the job: one that
// left is not counted); 0 when the job has no map yet; DATA_LOSS for a
// map that is not one; etcd's errors.
absl::StatusOr<uint32_t> MapShardCount(CoordinationStore& etcd,
                                       const std::string& job);

}  // namespace ps::cluster

#endif  // PS_CLUSTER_SHARD_DIRECTORY_H_
