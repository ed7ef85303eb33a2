#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/exit_codes.h"
#include "base/latency_quantile.h"
#include "base/manifest.h"
#include "base/optimizer.h"
#include "base/routing.h"
#include "grpcpp/client_context.h"
#include "ops/admin_command.h"
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {

namespace {

// Each worker's clock in `manifest` and whether it had finished or its
// lease had lapsed, as JSON.
Json WorkersJson(const ps::CheckpointManifest& manifest) {
  Json workers = Json::array();
  for (const auto& worker : manifest.workers()) {
    workers.push_back(Json{{"worker", worker.worker()},
                           {"clock", worker.clock()},
                           {"state", worker.finished() ? "finished"
                                     : worker.live()   ? "live"
                                                       : "lapsed"}});
  }
  return workers;
}

}  // namespace

// `checkpoint`: one consistent checkpoint of every shard in --servers.
int Checkpoint(const Cluster& cluster) {
  ps::CheckpointOptions options;
  options.servers = cluster.servers;
  options.coordinator = cluster.coordinator;
  options.dir = cluster.options.dir;
  options.tls = cluster.tls;
  options.token = cluster.token;
  options.progress = true;
  options.hold_timeout = cluster.options.hold_timeout;
  absl::StatusOr<ps::CheckpointManifest> manifest = ps::TakeCheckpoint(options);
  if (!manifest.ok()) return Fail(manifest.status());
  if (const int keep = cluster.options.checkpoints_to_keep; keep > 0) {
    const std::string parent =
        std::filesystem::path(options.dir).lexically_normal().parent_path();
    for (const std::string& removed : ps::PruneCheckpoints(parent, keep))
      std::fprintf(stderr, "removed the older checkpoint %s\n",
                   removed.c_str());
  }
  uint64_t bytes = 0;
  for (const auto& shard : manifest->shards()) bytes += shard.bytes();
  if (cluster.options.json) {
    std::printf("%s\n",
                Dump({{"dir", options.dir},
                      {"cut", manifest->cut()},
                      {"shards", manifest->num_shards()},
                      {"bytes", bytes},
                      {"hold_seconds", manifest->hold_seconds()},
                      {"snapshot_seconds", manifest->snapshot_seconds()},
                      {"workers", WorkersJson(*manifest)}})
                    .c_str());
    return 0;
  }
  std::printf(
      "checkpoint at clock %lld in %s: %u shards, %llu bytes; workers held "
      "%.3f s for the cut, shards wrote their parts in %.3f s\n",
      static_cast<long long>(manifest->cut()), options.dir.c_str(),
      manifest->num_shards(), static_cast<unsigned long long>(bytes),
      manifest->hold_seconds(), manifest->snapshot_seconds());
  for (const auto& worker : manifest->workers()) {
    if (!worker.finished() && !worker.live()) {
      std::printf(
          "warning: worker %u's lease had lapsed at clock %lld: it was not "
          "waited for, and a step it had in flight may be on some shards "
          "only\n",
          worker.worker(), static_cast<long long>(worker.clock()));
    }
  }
  return 0;
}

// `export`: one model's weights at one cut, for serving.
int Export(const Cluster& cluster) {
  ps::ExportOptions options;
  options.cluster.servers = cluster.servers;
  options.cluster.coordinator = cluster.coordinator;
  options.cluster.dir = cluster.options.dir;
  options.cluster.tls = cluster.tls;
  options.cluster.token = cluster.token;
  options.cluster.progress = true;
  options.cluster.hold_timeout = cluster.options.hold_timeout;
  options.model = cluster.options.model;
  const std::string& format = cluster.options.format;
  options.fp16 = format == "fp16";
  options.predecessor = cluster.options.base;
  options.job = cluster.options.job;
  absl::StatusOr<ps::ExportManifest> manifest = ps::TakeExport(options);
  if (!manifest.ok()) return Fail(manifest.status());
  uint64_t rows = 0, bytes = 0, deleted = 0;
  for (const auto& table : manifest->tables()) {
    rows += table.rows();
    bytes += table.bytes();
    deleted += table.deleted_rows();
  }
  if (cluster.options.json) {
    std::printf("%s\n", Dump({{"model", manifest->model_name()},
                              {"dir", options.cluster.dir},
                              {"cut", manifest->cut()},
                              {"tables", manifest->tables_size()},
                              {"rows", rows},
                              {"deleted_rows", deleted},
                              {"bytes", bytes},
                              {"format", format},
                              {"base", manifest->base()},
                              {"predecessor", manifest->predecessor()},
                              {"delta_index", manifest->delta_index()},
                              {"hold_seconds", manifest->hold_seconds()},
                              {"export_seconds", manifest->export_seconds()}})
                            .c_str());
    return 0;
  }
  const std::string delta =
      manifest->delta_index() == 0
          ? std::string()
          : absl::StrCat(" delta ", manifest->delta_index(), " of ",
                         manifest->base(), " (", deleted, " rows deleted)");
  std::printf(
      "exported %s at clock %lld into %s%s: %zu tables, %llu rows, %llu "
      "bytes (%s); workers held %.3f s for the cut, the shards wrote in "
      "%.3f s\n",
      manifest->model_name().c_str(), static_cast<long long>(manifest->cut()),
      options.cluster.dir.c_str(), delta.c_str(),
      static_cast<size_t>(manifest->tables_size()),
      static_cast<unsigned long long>(rows),
      static_cast<unsigned long long>(bytes), format.c_str(),
      manifest->hold_seconds(), manifest->export_seconds());
  return 0;
}

namespace {

// "0:16 1:16 2:9(finished)": each worker's clock in `manifest`, marked
// when it had finished or its lease had lapsed.
std::string WorkerClocks(const ps::CheckpointManifest& manifest) {
  std::vector<std::string> clocks;
  for (const auto& worker : manifest.workers()) {
    clocks.push_back(absl::StrCat(
        worker.worker(), ":", worker.clock(),
        worker.finished() ? "(finished)" : (worker.live() ? "" : "(lapsed)")));
  }
  return absl::StrJoin(clocks, " ");
}

}  // namespace

// `checkpoints`: the checkpoint in --dir, or those in its subdirectories.
int ListCheckpoints(const CommandOptions& options) {
  const std::string& dir = options.dir;
  std::vector<std::string> candidates = {dir};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (entry.is_directory()) candidates.push_back(entry.path().string());
  std::sort(candidates.begin() + 1, candidates.end());
  const bool json = options.json;
  if (!json) {
    std::printf("%-40s %10s %7s %14s  %-25s  %s\n", "checkpoint", "clock",
                "shards", "bytes", "taken", "worker clocks");
  }
  Json listed = Json::array();
  int found = 0;
  for (const std::string& candidate : candidates) {
    absl::StatusOr<ps::CheckpointManifest> manifest =
        ps::ReadManifest(candidate);
    if (!manifest.ok()) continue;
    uint64_t bytes = 0;
    for (const auto& shard : manifest->shards()) bytes += shard.bytes();
    ++found;
    if (json) {
      listed.push_back(Json{{"path", candidate},
                            {"cut", manifest->cut()},
                            {"shards", manifest->num_shards()},
                            {"bytes", bytes},
                            {"created_at", manifest->created_at()},
                            {"workers", WorkersJson(*manifest)}});
      continue;
    }
    std::printf("%-40s %10lld %7u %14llu  %-25s  %s\n", candidate.c_str(),
                static_cast<long long>(manifest->cut()), manifest->num_shards(),
                static_cast<unsigned long long>(bytes),
                manifest->created_at().c_str(),
                WorkerClocks(*manifest).c_str());
  }
  if (found == 0) return Fail("no checkpoint in " + dir);
  if (json)
    std::printf("%s\n", Dump({{"checkpoints", std::move(listed)}}).c_str());
  return 0;
}

}  // namespace ps::ops
