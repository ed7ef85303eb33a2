// File: server/model_directory.h
//
// ModelDirectory follows ps_serve's --model_dir, a directory that exports
// arrive in (ps_admin export --dir=MODEL_DIR/NAME): the complete export
// written last there (a subdirectory with an export's MANIFEST.json, which
// ps_admin writes last; last by the time its manifest records, then by cut,
// then by name) is the one served, whatever its job and cut: a job restored
// from an older checkpoint, or a new job exporting into the same
// directory, is served from its first export. When the export serving is
// deleted (pruned), the newest one left is served. A newer one is loaded beside
// the one serving and then swapped in whole: a request holds the model it
// started with (a shared_ptr), so it sees one export entirely and never waits
// beyond the pointer swap. An export that does not load is logged and tried
// again at the next polls, three times in all; the one serving goes on.
//
// Thread-safe.

#ifndef PS_SERVER_MODEL_DIRECTORY_H_
#define PS_SERVER_MODEL_DIRECTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "rocksdb/cache.h"
#include "server/serving_model.h"

namespace ps::server {

struct ModelDirectoryOptions {
  // REQUIRES: exists.
  std::string dir;
  // How often to look for a newer export. Default: 1 s.
  absl::Duration poll = absl::Seconds(1);
  // Scorers per loaded model (ServingModel::Open). Default: 1.
  int scorers = 1;
  // How each model loaded is read: the block cache every one shares (null:
  // none), and how much may be read into memory.
  model::ExportedModelOptions model_options;
  // Called with each model swapped in (metrics, health), from the
  // watcher's thread; may be empty.
  std::function<void(const ServingModel&)> on_swap;
};

class ModelDirectory {
 public:
  // Looks once (loading the newest export, if any) and starts following.
  // NOT_FOUND if `dir` is not a directory.
  static absl::StatusOr<std::unique_ptr<ModelDirectory>> Start(
      const ModelDirectoryOptions& options);
  ~ModelDirectory();

  // The model serving now; null before the first export loaded.
  std::shared_ptr<ServingModel> current() const {
    absl::MutexLock lock(&mu_);
    return current_;
  }

 private:
  explicit ModelDirectory(const ModelDirectoryOptions& options)
      : options_(options) {}
  // Loads and swaps in the export written last if it is not the one
  // serving (or the one serving was deleted).
  void LookOnce();
  // The complete export written last: by when its manifest was written,
  // then by cut, then by name. Not by cut alone: a job restored from an
  // older checkpoint, or another job, exports lower cuts later.
  struct Newest {
    std::tuple<absl::Time, int64_t, std::string> at{absl::InfinitePast(), -1,
                                                    ""};
    std::string job;
    // Whether the export `current` serves is still there (pruning deletes
    // exports): if not, the newest there is served even if it is older.
    bool current_there = false;
  };
  // INTERNAL for a directory that cannot be listed.
  absl::StatusOr<Newest> FindNewest(const ServingModel* current);

  const ModelDirectoryOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<ServingModel> current_ ABSL_GUARDED_BY(mu_);
  // The watcher's: loads that failed, by export, and exports whose
  // manifest did not read (logged once).
  absl::flat_hash_map<std::string, int> failed_;
  absl::flat_hash_set<std::string> unreadable_;
  absl::Notification stop_;
  std::thread watcher_;
};

}  // namespace ps::server

#endif  // PS_SERVER_MODEL_DIRECTORY_H_
