// File: ops/periodic_exporter.h
//
// PeriodicExporter writes a model's exports for serving while the cluster
// trains (ps_worker --export_every_s, worker 0): every `every`, a delta of
// the newest export in DIR (ops/checkpoint.h, ExportOptions::predecessor),
// or a full export (a base) when DIR holds none, when the newest is the
// `base_every`-th delta of its base, or when a delta is refused (a shard
// restarted since, another shard count, ...). Each goes into
// DIR/export-<n>/, n one more than the largest in DIR, so that names order
// exports as they were written (ps_serve serves the newest by cut, then by
// name). After each, all but the newest `bases_to_keep` bases and the
// deltas over them are deleted, with what an export of this class left
// unfinished. A failed export is logged, and the next tries again.
//
// Exports are written on a thread of its own: an export holds every live
// worker at its cut, this process's too, which must never wait inside the
// training loop for it.
//
// Thread-safe. Stop() (or the destructor) gives up an export still waiting
// for its cut.

#ifndef PS_OPS_PERIODIC_EXPORTER_H_
#define PS_OPS_PERIODIC_EXPORTER_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ops/checkpoint.h"
#include "proto/checkpoint.pb.h"

namespace ps::ops {

struct PeriodicExportOptions {
  // The cluster, the model and its format; export.cluster.dir is DIR, the
  // exports' parent (made if missing). export.predecessor is unused.
  ExportOptions export_options;
  // How often to export. Default: 5 minutes.
  absl::Duration every = absl::Minutes(5);
  // A full export after this many deltas of one base (0: only when a delta
  // is refused). Default: 12.
  int base_every = 12;
  // Bases kept, each with its deltas (0: all). Default: 2.
  int bases_to_keep = 2;
};

class PeriodicExporter {
 public:
  struct Counts {
    int bases = 0;
    int deltas = 0;
    int failed = 0;
  };

  // Starts the thread; the first export is written `every` from now.
  explicit PeriodicExporter(const PeriodicExportOptions& options);
  ~PeriodicExporter();

  PeriodicExporter(const PeriodicExporter&) = delete;
  PeriodicExporter& operator=(const PeriodicExporter&) = delete;

  // Writes one export now, on the calling thread (a delta if it can be):
  // the last one, once training is over. Returns its manifest, or the
  // error. REQUIRES: Stop() was called first.
  absl::StatusOr<ExportManifest> ExportNow();

  // Gives up an export waiting for its cut, waits for one being written,
  // and writes no more periodically.
  void Stop();

  Counts counts();

 private:
  void Loop();
  // Writes DIR/export-<n>/ (a delta of the newest export if it may be one
  // and the shards can write it, else a base), then prunes. A `periodic`
  // one is given up when Stop() is called while it waits for its cut.
  absl::StatusOr<ExportManifest> ExportOnce(bool periodic);

  const PeriodicExportOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The name of the n-th export of a PeriodicExporter: export-<n, 10 digits>.
std::string ExportName(int64_t n);

// Deletes from `dir` all but the newest `bases_to_keep` full exports named
// export-<n> (newest by n; 0 keeps all) and every delta whose base is not
// kept, and the unfinished export-<n> older than the newest finished one.
// Returns the directories deleted.
std::vector<std::string> PruneExports(const std::string& dir,
                                      int bases_to_keep);

}  // namespace ps::ops

#endif  // PS_OPS_PERIODIC_EXPORTER_H_
