#include "server/model_directory.h"

#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/manifest.h"
#include "glog/logging.h"

namespace ps::server {
namespace {

// Loads of one export tried before it is left out for good.
constexpr int kLoadAttempts = 3;

}  // namespace

absl::StatusOr<std::unique_ptr<ModelDirectory>> ModelDirectory::Start(
    const ModelDirectoryOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(options.dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("--model_dir ", options.dir, " is not a directory"));
  }
  auto directory = std::unique_ptr<ModelDirectory>(new ModelDirectory(options));
  directory->LookOnce();
  directory->watcher_ = std::thread([raw = directory.get()] {
    while (!raw->stop_.WaitForNotificationWithTimeout(raw->options_.poll)) {
      raw->LookOnce();
    }
  });
  return directory;
}

ModelDirectory::~ModelDirectory() {
  stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
}

absl::StatusOr<ModelDirectory::Newest> ModelDirectory::FindNewest(
    const ServingModel* current) {
  Newest newest;
  std::error_code error;
  for (std::filesystem::directory_iterator entry(options_.dir, error), end;
       !error && entry != end; entry.increment(error)) {
    std::error_code ignored;
    if (!entry->is_directory(ignored)) continue;
    const std::string name = entry->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (auto it = failed_.find(name);
        it != failed_.end() && it->second >= kLoadAttempts) {
      continue;
    }
    absl::StatusOr<ExportManifest> manifest =
        ReadExportManifest(entry->path().string());
    if (!manifest.ok()) {
      // Not an export, or not finished yet (no MANIFEST.json); another
      // error is worth a line, once.
      if (!absl::IsNotFound(manifest.status()) &&
          unreadable_.insert(name).second) {
        LOG(WARNING) << "--model_dir: " << manifest.status();
      }
      continue;
    }
    const auto candidate =
        std::make_tuple(ExportWrittenAt(*manifest), manifest->cut(), name);
    if (current != nullptr && name == current->version() &&
        std::get<0>(candidate) == current->written_at()) {
      newest.current_there = true;
    }
    if (candidate > newest.at) {
      newest.at = candidate;
      newest.job = manifest->job();
    }
  }
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot list --model_dir ", options_.dir, ": ", error.message()));
  }
  return newest;
}

void ModelDirectory::LookOnce() {
  std::shared_ptr<ServingModel> current = this->current();
  absl::StatusOr<Newest> found = FindNewest(current.get());
  if (!found.ok()) {
    LOG_EVERY_N(WARNING, 60) << found.status().message();
    return;
  }
  const Newest& newest_found = *found;
  const bool current_there = newest_found.current_there;
  const std::string& newest_job = newest_found.job;
  const auto& newest = newest_found.at;
  const auto& [written, cut, name] = newest;
  if (name.empty()) return;
  if (current != nullptr && current_there &&
      std::make_tuple(current->written_at(), current->cut(),
                      current->version()) >= newest) {
    return;
  }
  const std::string dir = absl::StrCat(options_.dir, "/", name);
  absl::StatusOr<std::unique_ptr<ServingModel>> loaded =
      ServingModel::Open(dir, options_.scorers, options_.model_options);
  if (!loaded.ok()) {
    const int attempts = ++failed_[name];
    LOG(ERROR) << "cannot serve " << dir << ": " << loaded.status()
               << (attempts < kLoadAttempts ? " (tried again at the next poll"
                                            : " (not tried again")
               << "; serving the model before it)";
    return;
  }
  std::shared_ptr<ServingModel> model = std::move(loaded).value();
  LOG(INFO) << "serving " << dir << " (job "
            << (newest_job.empty() ? "without etcd" : newest_job) << ", cut "
            << cut << ", written "
            << absl::FormatTime(absl::RFC3339_full, written,
                                absl::UTCTimeZone())
            << ")"
            << (current == nullptr ? ""
                : !current_there   ? "; the export serving was deleted"
                : cut < current->cut()
                    ? absl::StrCat("; a lower cut than ", current->cut(),
                                   ", written later")
                    : "");
  {
    absl::MutexLock lock(&mu_);
    current_ = model;
  }
  if (options_.on_swap) options_.on_swap(*model);
}

}  // namespace ps::server
