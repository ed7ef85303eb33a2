// File: cluster/shard_role.h
//
// How a ps_server process under --etcd takes its place in the job: which
// role it finds (ChooseRole(), under --replicas: the primary or a replica),
// and, as the primary, its registration (RegisterAsPrimary(): the fencing
// checks, the GENERATION file, the key in etcd, then the shard's steps in
// order). A replica's promotion is cluster/primary_watch.h.
//
// Only a data dir that holds the shard's newest rows becomes the primary;
// a replica's copy does only by its promotion, which a start finishes once
// etcd holds it, never otherwise (it might lack what the primary took since
// it stopped following).

#ifndef PS_CLUSTER_SHARD_ROLE_H_
#define PS_CLUSTER_SHARD_ROLE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_control.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

struct RoleOptions {
  // REQUIRED: the job (CheckJobName()) and the shard's index in it.
  std::string job;
  int shard_index = 0;
  // REQUIRED: the shard's data dir.
  std::string data_dir;
  // Whether `data_dir` holds a replica's copy (a REPLICA_OF file).
  bool replica_copy = false;
  // The address this process will register under; empty while it is not
  // known yet (--listen on port 0).
  std::string own_address;
  // The lease of a new shard's claim. Default: 10 s (--etcd_lease_s).
  absl::Duration lease = absl::Seconds(10);
  // How long to wait for a role before UNAVAILABLE. Default: 60 s
  // (--join_wait_s).
  absl::Duration join_wait = absl::Seconds(60);
  // How often to look again meanwhile. Default: 250 ms.
  absl::Duration poll = absl::Milliseconds(250);
};

// The role ChooseRole() found.
struct ShardRole {
  // -1: this process serves the shard as its primary; otherwise the index
  // of the shard it follows as a replica.
  int replica_of_shard = -1;
  // A replica's data dir holds rows of an older generation: they are
  // emptied for the copy.
  bool discard_superseded_data_dir = false;
  // A new shard's claim (no process served it yet), to be held until this
  // process registered as its primary.
  std::unique_ptr<LeasedKey> claim;
};

// Under --replicas: waits (up to options.join_wait) until this process can
// be the shard's primary (a new shard it claimed, or its data dir holds
// the newest rows and no other process serves the shard) or its replica
// (another process is registered as the shard). FAILED_PRECONDITION for a
// data dir that must not serve (newer than etcd; one of the current
// generation beside a registered primary); UNAVAILABLE when the wait ran
// out; the store's errors.
absl::StatusOr<ShardRole> ChooseRole(CoordinationStore* store,
                                     const RoleOptions& options);

// Shard `index`'s record, waiting up to `wait` for one to be registered:
// the primary a --replica_of_shard replica follows. UNAVAILABLE once the
// wait ran out.
absl::StatusOr<ShardRecord> WaitForShard(
    CoordinationStore& store, const std::string& job, int index,
    absl::Duration wait, absl::Duration poll = absl::Milliseconds(250));

struct RegistrationOptions {
  // REQUIRED: the job, and what the shard registers (its index, count and
  // the address workers dial).
  std::string job;
  ShardRecord record;
  // REQUIRED: the shard's data dir (its GENERATION file).
  std::string data_dir;
  // The registration's lease and the coordinator's. Default: 10 s.
  absl::Duration lease = absl::Seconds(10);
  // How long a shard beyond the job's count waits to join it. Default: 60 s.
  absl::Duration join_wait = absl::Seconds(60);
};

// Registers the shard as its primary: refuses a data dir that must not
// serve (CheckDataDirMayServe()), writes its GENERATION (before the key: a
// crash between leaves a data dir that may serve again, nothing having
// been acknowledged), registers exclusively at etcd's generation (then
// releases `claim`, a new shard's, if any), records the in-sync set before
// any push is taken, fences the shard's pushes by the registration, joins
// the job and runs for the coordinator. `registration` is set as soon as
// the key is registered, and holds it on a later error too: the shard may
// be fenced by it, so the owner releases it only after shard.FenceBy(nullptr)
// or once the shard is gone.
absl::Status RegisterAsPrimary(CoordinationStore* store,
                               const RegistrationOptions& options,
                               ShardControl& shard,
                               std::unique_ptr<LeasedKey>* registration,
                               std::unique_ptr<LeasedKey>* claim = nullptr);

}  // namespace ps::cluster

#endif  // PS_CLUSTER_SHARD_ROLE_H_
