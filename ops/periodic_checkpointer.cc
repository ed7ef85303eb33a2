#include "ops/periodic_checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/manifest.h"
#include "glog/logging.h"

namespace ps::ops {
namespace {

// The suffix of a checkpoint being taken.
constexpr char kTaking[] = ".taking";

}  // namespace

std::string CheckpointName(int64_t cut) {
  return absl::StrFormat("ckpt-%010d", cut);
}

PeriodicCheckpointer::PeriodicCheckpointer(const CheckpointOptions& options,
                                           int keep)
    : options_(options), keep_(keep), thread_([this] { Loop(); }) {}

PeriodicCheckpointer::~PeriodicCheckpointer() { Stop(); }

void PeriodicCheckpointer::Request(int64_t clock) {
  absl::MutexLock lock(&mu_);
  requested_ = std::max(requested_, clock);
}

void PeriodicCheckpointer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PeriodicCheckpointer::Abandon() {
  {
    absl::MutexLock lock(&mu_);
    abandoning_ = true;
  }
  Stop();
}

PeriodicCheckpointer::Counts PeriodicCheckpointer::counts() {
  absl::MutexLock lock(&mu_);
  return counts_;
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
      // Requests made while this one is taken wait for it.
      requested_ = -1;
    }
    CheckpointOptions options = options_;
    if (options.find_coordinator) {
      // Another shard may have taken over since the last checkpoint.
      absl::StatusOr<std::string> coordinator = options.find_coordinator();
      if (coordinator.ok()) {
        options.coordinator = *std::move(coordinator);
      } else {
        LOG(WARNING) << "looking up the coordinator: " << coordinator.status();
      }
    }
    if (options.find_shards) {
      // Shards may have joined or left since the last checkpoint.
      absl::StatusOr<std::vector<std::string>> shards = options.find_shards();
      if (shards.ok()) {
        options.servers = *std::move(shards);
      } else {
        LOG(WARNING) << "looking up the shards: " << shards.status();
      }
    }
    options.abandon = [this] {
      absl::MutexLock lock(&mu_);
      return abandoning_;
    };
    options.dir =
        absl::StrCat(options_.dir, "/", CheckpointName(clock), kTaking);
    std::error_code error;
    std::filesystem::remove_all(options.dir, error);  // a crashed run's
    absl::StatusOr<CheckpointManifest> taken = TakeCheckpoint(options);
    std::string final_dir;
    if (taken.ok()) {
      // Named after its cut, under a name no other checkpoint has.
      const std::string base =
          absl::StrCat(options_.dir, "/", CheckpointName(taken->cut()));
      final_dir = base;
      for (int n = 1; std::filesystem::exists(final_dir, error); ++n) {
        final_dir = absl::StrCat(base, ".", n);
      }
      std::filesystem::rename(options.dir, final_dir, error);
      if (error) {
        taken = absl::InternalError(absl::StrCat("cannot rename ", options.dir,
                                                 " to ", final_dir, ": ",
                                                 error.message()));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      ++(taken.ok() ? counts_.taken : counts_.failed);
      // A request this checkpoint's cut already covers is done.
      if (taken.ok() && requested_ >= 0 && requested_ <= taken->cut()) {
        requested_ = -1;
      }
    }
    if (taken.ok()) {
      LOG(INFO) << "checkpoint at clock " << taken->cut() << " in " << final_dir
                << ": workers held " << taken->hold_seconds()
                << " s for the cut, shards wrote "
                << "their parts in " << taken->snapshot_seconds() << " s";
    } else {
      LOG(ERROR) << "checkpoint into " << options.dir
                 << " failed (training goes on): " << taken.status();
    }
    Prune();
  }
}

void PeriodicCheckpointer::Prune() {
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.dir, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && absl::StartsWith(name, "ckpt-") &&
        absl::EndsWith(name, kTaking)) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
  for (const std::string& dir : PruneCheckpoints(options_.dir, keep_))
    LOG(INFO) << "removed the older checkpoint " << dir;
}

}  // namespace ps::ops
