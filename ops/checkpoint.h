// File: ops/checkpoint.h
//
// Takes a consistent checkpoint (ps_admin checkpoint, ps_worker
// --checkpoint_every_steps) or export (ps_admin export) of a running
// cluster (base/manifest.h reads their manifests back):
//
//   1. BeginCut on the coordinator: every live worker stops before pushing
//      step `cut` and finishes the steps before it (admin.proto).
//   2. CutStatus until every live worker holds there: no push of a later
//      step is in flight, every earlier one was acknowledged on every shard.
//   3. SnapshotShard on every shard at once: DIR/shard-<i>-of-<n>/, while
//      CutStatus calls keep the cut's lease; then CutStatus once more to
//      check that the cut held all along (no worker's clock moved).
//   4. DIR/MANIFEST.json, last (a directory without one is no checkpoint).
//   5. EndCut (of this cut only), whatever happened: workers go on. What a
//      failed checkpoint wrote is removed.
//
// A worker whose lease lapsed (dead, or stalled past its --lease_ms) is not
// waited for: a step it had in flight may be on some shards only, in the
// cluster and so in the checkpoint. The manifest marks it not live.
//
// DIR is a path on the shards' file system (and this process's, for the
// manifest): the same machine, or a volume they share.

#ifndef PS_OPS_CHECKPOINT_H_
#define PS_OPS_CHECKPOINT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/tls_credentials.h"
#include "proto/checkpoint.pb.h"

namespace ps {

struct CheckpointOptions {
  // Shard i is servers[i]. REQUIRES: not empty.
  std::vector<std::string> servers;
  // Where the clock coordinator is. Default (empty): servers[0].
  std::string coordinator;
  // Under --etcd: looks the coordinator up (cluster/shard_directory.h), which
  // PeriodicCheckpointer does before each checkpoint instead of using
  // `coordinator`. Default: none.
  std::function<absl::StatusOr<std::string>()> find_coordinator;
  // Under --etcd: looks the job's shards up, which PeriodicCheckpointer
  // also does before each checkpoint instead of using `servers` (shards
  // join and leave). Default: none.
  std::function<absl::StatusOr<std::vector<std::string>>()> find_shards;
  // The checkpoint's directory: made if it does not exist; ALREADY_EXISTS
  // if it is not empty.
  std::string dir;
  TlsFiles tls;
  // The admin token, when the shards want one. Default: none.
  std::string token;
  // How long to wait for the cut to start (UNAVAILABLE from a coordinator
  // that restarted is asked again) and for every live worker to reach it.
  // Default: 5 min.
  absl::Duration hold_timeout = absl::Minutes(5);
  // Print what is happening to stderr once it takes more than 3 s.
  bool progress = false;
  // Asked while waiting for the cut (to start, or for the workers to reach
  // it): true gives up with CANCELLED, and the cut ends. Default: never.
  std::function<bool()> abandon;
};

// Takes the checkpoint; returns its manifest. ALREADY_EXISTS for a
// directory that is not empty; FAILED_PRECONDITION when `servers` are not
// every shard in shard order; DEADLINE_EXCEEDED when the cut does not start
// or the workers do not all reach it within hold_timeout; CANCELLED when
// `abandon` said so; ABORTED when the cut did not hold while the shards
// wrote; the shards' errors.
absl::StatusOr<CheckpointManifest> TakeCheckpoint(
    const CheckpointOptions& options);

// An export: one model's weights at one cut, for serving (ExportManifest in
// proto/checkpoint.proto). The same cut as a checkpoint's, then every shard
// writes the model's tables' weights, then DIR/MANIFEST.json.
struct ExportOptions {
  // The cluster, and the export's directory.
  CheckpointOptions cluster;
  // The model: the name its tables start with ("wide_deep" for
  // wide_deep.embedding, ...). Default (empty): the only model there is.
  std::string model;
  // Weights as IEEE half instead of float32. Default: false.
  bool fp16 = false;
  // A delta (ExportManifest in proto/checkpoint.proto): the export before
  // it, a directory beside `cluster.dir`. Only the rows each shard changed
  // since that export's time and deletions of those dropped since are
  // written. Default (empty): a full export.
  std::string predecessor;
  // The job (its name under --etcd), recorded in the manifest. Default:
  // none.
  std::string job;
};

// NOT_FOUND when the cluster holds no such model (or none with the model
// card ps_worker declares), INVALID_ARGUMENT when there are several and
// none was named; for a delta, INVALID_ARGUMENT for a predecessor that is
// not beside `dir` or another model or format, FAILED_PRECONDITION when a
// shard cannot tell what changed since it (another shard count, a shard
// restarted, a table declared since, too many rows dropped: write a full
// export); otherwise as TakeCheckpoint().
absl::StatusOr<ExportManifest> TakeExport(const ExportOptions& options);

}  // namespace ps

#endif  // PS_OPS_CHECKPOINT_H_
