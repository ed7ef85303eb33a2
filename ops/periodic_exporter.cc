#include "ops/periodic_exporter.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/manifest.h"
#include "glog/logging.h"

namespace ps::ops {
namespace {

constexpr char kPrefix[] = "export-";

// An export-<n> directory of DIR, and its manifest if it is finished.
struct Entry {
  int64_t n = 0;
  std::string path;
  std::optional<ExportManifest> manifest;
};

// DIR's export-<n> directories, by n.
std::vector<Entry> ListExports(const std::string& dir) {
  std::vector<Entry> entries;
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    Entry entry;
    if (!absl::StartsWith(name, kPrefix) ||
        !absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &entry.n)) {
      continue;
    }
    entry.path = it->path().string();
    absl::StatusOr<ExportManifest> manifest = ReadExportManifest(entry.path);
    if (manifest.ok()) entry.manifest = *std::move(manifest);
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.n < b.n; });
  return entries;
}

}  // namespace

std::string ExportName(int64_t n) {
  return absl::StrFormat("%s%010d", kPrefix, n);
}

PeriodicExporter::PeriodicExporter(const PeriodicExportOptions& options)
    : options_(options), thread_([this] { Loop(); }) {}

PeriodicExporter::~PeriodicExporter() { Stop(); }

void PeriodicExporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

PeriodicExporter::Counts PeriodicExporter::counts() {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void PeriodicExporter::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](PeriodicExporter* self)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_; },
              this),
          options_.every);
      if (stopping_) return;
    }
    absl::StatusOr<ExportManifest> written = ExportOnce(/*periodic=*/true);
    if (!written.ok()) {
      LOG(WARNING) << "periodic export into "
                   << options_.export_options.cluster.dir
                   << " failed (training goes on; the next one tries "
                      "again): "
                   << written.status();
    }
  }
}

absl::StatusOr<ExportManifest> PeriodicExporter::ExportNow() {
  return ExportOnce(/*periodic=*/false);
}

absl::StatusOr<ExportManifest> PeriodicExporter::ExportOnce(bool periodic) {
  const std::string& dir = options_.export_options.cluster.dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::vector<Entry> entries = ListExports(dir);
  const Entry* newest = nullptr;
  for (const Entry& entry : entries) {
    if (entry.manifest.has_value()) newest = &entry;
  }
  ExportOptions options = options_.export_options;
  options.cluster.dir = absl::StrCat(
      dir, "/", ExportName(entries.empty() ? 1 : entries.back().n + 1));
  // Stop() gives up a periodic export's cut still being waited for; the
  // last export (after Stop()) is waited for whole.
  options.cluster.abandon = [this, periodic] {
    absl::MutexLock lock(&mu_);
    return periodic && stopping_;
  };
  if (options.cluster.find_coordinator) {
    // Another shard may have taken over since the last export.
    absl::StatusOr<std::string> coordinator =
        options.cluster.find_coordinator();
    if (coordinator.ok()) options.cluster.coordinator = *std::move(coordinator);
  }
  if (options.cluster.find_shards) {
    absl::StatusOr<std::vector<std::string>> shards =
        options.cluster.find_shards();
    if (shards.ok()) options.cluster.servers = *std::move(shards);
  }
  const bool delta =
      newest != nullptr &&
      (options_.base_every <= 0 ||
       static_cast<int>(newest->manifest->delta_index()) < options_.base_every);
  absl::StatusOr<ExportManifest> written;
  if (delta) {
    options.predecessor = newest->path;
    written = TakeExport(options);
    if (absl::IsFailedPrecondition(written.status()) ||
        absl::IsInvalidArgument(written.status())) {
      LOG(INFO) << "no delta of " << newest->path << " (" << written.status()
                << "): a full export instead";
      options.predecessor.clear();
      written = TakeExport(options);
    }
  } else {
    written = TakeExport(options);
  }
  {
    absl::MutexLock lock(&mu_);
    if (!written.ok()) {
      ++counts_.failed;
    } else if (written->delta_index() > 0) {
      ++counts_.deltas;
    } else {
      ++counts_.bases;
    }
  }
  if (!written.ok()) return written.status();
  uint64_t rows = 0;
  for (const auto& table : written->tables()) rows += table.rows();
  LOG(INFO) << "exported " << options.cluster.dir << " at clock "
            << written->cut() << ": "
            << (written->delta_index() > 0
                    ? absl::StrCat("delta ", written->delta_index(), " of ",
                                   written->base())
                    : std::string("a full export"))
            << ", " << rows << " rows";
  for (const std::string& removed : PruneExports(
           options_.export_options.cluster.dir, options_.bases_to_keep)) {
    LOG(INFO) << "removed the older export " << removed;
  }
  return written;
}

std::vector<std::string> PruneExports(const std::string& dir,
                                      int bases_to_keep) {
  const std::vector<Entry> entries = ListExports(dir);
  std::vector<std::string> bases;
  int64_t newest_finished = 0;
  for (const Entry& entry : entries) {
    if (!entry.manifest.has_value()) continue;
    newest_finished = entry.n;
    if (entry.manifest->delta_index() == 0)
      bases.push_back(std::filesystem::path(entry.path).filename().string());
  }
  std::set<std::string> kept(bases.begin(), bases.end());
  if (bases_to_keep > 0 && static_cast<int>(bases.size()) > bases_to_keep) {
    kept = std::set<std::string>(bases.end() - bases_to_keep, bases.end());
  }
  std::vector<std::string> removed;
  for (const Entry& entry : entries) {
    const std::string name =
        std::filesystem::path(entry.path).filename().string();
    // An unfinished one is a failed or cut-short export, unless it is
    // newer than every finished one (being written).
    const bool remove = entry.manifest.has_value()
                            ? kept.count(entry.manifest->delta_index() == 0
                                             ? name
                                             : entry.manifest->base()) == 0
                            : entry.n < newest_finished;
    if (!remove) continue;
    std::error_code error;
    std::filesystem::remove_all(entry.path, error);
    if (error) {
      LOG(WARNING) << "cannot remove the older export " << entry.path << ": "
                   << error.message();
    } else {
      removed.push_back(entry.path);
    }
  }
  return removed;
}

}  // namespace ps::ops
