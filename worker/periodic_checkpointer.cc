#include "worker/periodic_checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace ps::worker {

std::string CheckpointName(int64_t clock) {
  return absl::StrFormat("ckpt-%010d", clock);
}

PeriodicCheckpointer::PeriodicCheckpointer(const CheckpointOptions& options,
                                           int keep)
    : options_(options), keep_(keep), thread_([this] { Loop(); }) {}

PeriodicCheckpointer::~PeriodicCheckpointer() { Stop(); }

void PeriodicCheckpointer::Request(int64_t clock) {
  absl::MutexLock lock(&mu_);
  if (requested_ < 0) requested_ = clock;
}

void PeriodicCheckpointer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

PeriodicCheckpointer::Stats PeriodicCheckpointer::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void PeriodicCheckpointer::Loop() {
  while (true) {
    int64_t clock = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PeriodicCheckpointer* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || self->requested_ >= 0;
          },
          this));
      if (stopping_) return;
      clock = requested_;
    }
    CheckpointOptions options = options_;
    options.dir = options_.dir + "/" + CheckpointName(clock);
    absl::StatusOr<CheckpointManifest> taken = TakeCheckpoint(options);
    {
      absl::MutexLock lock(&mu_);
      requested_ = -1;
      if (taken.ok()) {
        ++stats_.taken;
        stats_.hold_seconds += taken->hold_seconds();
        stats_.snapshot_seconds += taken->snapshot_seconds();
        stats_.last_dir = options.dir;
      } else {
        ++stats_.failed;
      }
    }
    if (taken.ok()) {
      LOG(INFO) << "checkpoint at clock " << taken->cut() << " in "
                << options.dir << ": workers held " << taken->hold_seconds()
                << " s for the cut, shards wrote "
                << "their parts in " << taken->snapshot_seconds() << " s";
      Prune();
    } else {
      LOG(ERROR) << "checkpoint into " << options.dir
                 << " failed (training goes on): " << taken.status();
    }
  }
}

void PeriodicCheckpointer::Prune() {
  std::vector<std::pair<std::string, bool>> checkpoints;  // (dir, finished)
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !absl::StartsWith(name, "ckpt-")) continue;
    checkpoints.emplace_back(
        entry.path().string(),
        std::filesystem::exists(entry.path() / "MANIFEST.json"));
  }
  std::sort(checkpoints.begin(), checkpoints.end());
  int finished_seen = 0;
  bool newer_finished = false;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    const bool drop =
        it->second ? keep_ > 0 && ++finished_seen > keep_ : newer_finished;
    newer_finished = newer_finished || it->second;
    if (drop) {
      std::filesystem::remove_all(it->first, error);
      LOG(INFO) << "removed the older checkpoint " << it->first;
    }
  }
}

}  // namespace ps::worker
