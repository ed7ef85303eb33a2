#include "base/manifest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/durable_file.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace {

// Reads DIR/MANIFEST.json into `manifest`.
absl::Status ReadJson(const std::string& dir,
                      google::protobuf::Message* manifest) {
  std::ifstream file(ManifestPath(dir));
  if (!file) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no MANIFEST.json: not a checkpoint or export, or one "
        "that was not finished"));
  }
  std::stringstream json;
  json << file.rdbuf();
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(json.str(), manifest, parse)
           .ok()) {
    return absl::DataLossError(
        absl::StrCat(ManifestPath(dir), " does not parse"));
  }
  return absl::OkStatus();
}

// Rows were placed by the routing the manifest names; this build must route
// keys the same way to find them.
absl::Status CheckRouting(const std::string& dir, uint32_t routing_version) {
  if (routing_version == kRoutingVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(ManifestPath(dir), " was written with key routing version ",
                   routing_version, "; this build routes keys with version ",
                   kRoutingVersion));
}

// DATA_LOSS unless the manifest's slot map, if it records one, is a map of
// at most `num_shards` shards.
absl::Status CheckSlotMap(const std::string& dir, bool has_slot_map,
                          const SlotMapSpec& spec, uint32_t num_shards) {
  if (!has_slot_map) return absl::OkStatus();
  absl::StatusOr<SlotMap> map = SlotMap::FromSpec(spec, num_shards);
  if (!map.ok()) {
    return absl::DataLossError(
        absl::StrCat(ManifestPath(dir), ": ", map.status().message()));
  }
  if (map->num_shards() != num_shards) {
    return absl::DataLossError(absl::StrCat(
        ManifestPath(dir), ": its slot map is of ", map->num_shards(),
        " shards, the checkpoint of ", num_shards));
  }
  return absl::OkStatus();
}

SlotMap RecordedSlotMap(bool has_slot_map, const SlotMapSpec& spec,
                        uint32_t num_shards) {
  if (!has_slot_map) return SlotMap::Initial(num_shards);
  // Checked when the manifest was read.
  return *SlotMap::FromSpec(spec, num_shards);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExportChain(const std::string& dir) {
  std::vector<std::string> chain = {dir};
  ASSIGN_OR_RETURN(ExportManifest manifest, ReadExportManifest(dir));
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  while (manifest.delta_index() > 0) {
    const std::string previous = (parent / manifest.predecessor()).string();
    absl::StatusOr<ExportManifest> before = ReadExportManifest(previous);
    if (!before.ok()) {
      return absl::Status(
          before.status().code(),
          absl::StrCat("the delta ", chain.back(), " follows ", previous,
                       ", which does not read: ", before.status().message()));
    }
    const bool is_base = before->delta_index() == 0;
    if (before->delta_index() + 1 != manifest.delta_index() ||
        (is_base ? manifest.predecessor() : before->base()) !=
            manifest.base() ||
        before->model_name() != manifest.model_name() ||
        before->format() != manifest.format() ||
        before->created_at() != manifest.predecessor_created_at()) {
      return absl::DataLossError(absl::StrCat(
          "the delta ", chain.back(), " (delta ", manifest.delta_index(),
          " of base ", manifest.base(), ", cut ", manifest.cut(),
          ") does not follow ", previous, " (delta ", before->delta_index(),
          " of base ", is_base ? "itself" : before->base(), ", cut ",
          before->cut(), ", written at ", before->created_at(), ", not ",
          manifest.predecessor_created_at(), ")"));
    }
    chain.push_back(previous);
    manifest = *std::move(before);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

absl::Time ExportWrittenAt(const ExportManifest& manifest) {
  if (manifest.created_at_unix_ms() > 0)
    return absl::FromUnixMillis(manifest.created_at_unix_ms());
  absl::Time written;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, manifest.created_at(), &written,
                      &error)) {
    return written;
  }
  return absl::InfinitePast();
}

SlotMap RecordedSlotMap(const CheckpointManifest& manifest) {
  return RecordedSlotMap(manifest.has_slot_map(), manifest.slot_map(),
                         manifest.num_shards());
}

SlotMap RecordedSlotMap(const ExportManifest& manifest) {
  return RecordedSlotMap(manifest.has_slot_map(), manifest.slot_map(),
                         manifest.num_shards());
}

std::string ManifestPath(const std::string& dir) {
  return dir + "/MANIFEST.json";
}

absl::Status WriteManifest(const std::string& dir,
                           const google::protobuf::Message& manifest) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(manifest, &json, print)
           .ok()) {
    return absl::InternalError("cannot write the manifest as JSON");
  }
  return WriteFileDurably(ManifestPath(dir), json);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  CheckpointManifest manifest;
  RETURN_IF_ERROR(ReadJson(dir, &manifest));
  // Version 1's parts keyed rows by the key alone; both restore alike
  // (embedding/restore.h reads either).
  if ((manifest.format_version() != 1 && manifest.format_version() != 2) ||
      manifest.num_shards() == 0 ||
      manifest.shards_size() != static_cast<int>(manifest.num_shards())) {
    return absl::DataLossError(absl::StrCat(
        ManifestPath(dir), ": format version ", manifest.format_version(),
        " with ", manifest.shards_size(), " of ", manifest.num_shards(),
        " shards is not one this version reads"));
  }
  RETURN_IF_ERROR(CheckRouting(dir, manifest.routing_version()));
  RETURN_IF_ERROR(CheckSlotMap(dir, manifest.has_slot_map(),
                               manifest.slot_map(), manifest.num_shards()));
  return manifest;
}

absl::StatusOr<ExportManifest> ReadExportManifest(const std::string& dir) {
  ExportManifest manifest;
  RETURN_IF_ERROR(ReadJson(dir, &manifest));
  if (manifest.format_version() < 1 || manifest.format_version() > 3 ||
      manifest.num_shards() == 0 || !manifest.has_model()) {
    return absl::DataLossError(absl::StrCat(
        ManifestPath(dir), " is not an export this version reads"));
  }
  // Version 3 is a delta, and only a delta: it names what it follows.
  const bool delta = manifest.format_version() == 3;
  if (delta != !manifest.predecessor().empty() ||
      delta != !manifest.base().empty() ||
      delta != (manifest.delta_index() > 0)) {
    return absl::DataLossError(absl::StrCat(
        ManifestPath(dir), ": format version ", manifest.format_version(),
        " with predecessor \"", manifest.predecessor(), "\", base \"",
        manifest.base(), "\" and delta index ", manifest.delta_index(),
        " is not an export this version reads"));
  }
  // What a delta follows is a directory beside it, named alone.
  for (const std::string* name : {&manifest.predecessor(), &manifest.base()}) {
    if (delta && (*name == "." || *name == ".." ||
                  name->find('/') != std::string::npos)) {
      return absl::DataLossError(
          absl::StrCat(ManifestPath(dir), ": a delta follows \"", *name,
                       "\", which is not an export's name beside it"));
    }
  }
  for (const auto& table : manifest.tables()) {
    if (table.parts_size() != static_cast<int>(manifest.num_shards())) {
      return absl::DataLossError(absl::StrCat(
          ManifestPath(dir), ": table ", table.spec().name(), " has ",
          table.parts_size(), " parts for ", manifest.num_shards(), " shards"));
    }
  }
  RETURN_IF_ERROR(CheckRouting(dir, manifest.routing_version()));
  RETURN_IF_ERROR(CheckSlotMap(dir, manifest.has_slot_map(),
                               manifest.slot_map(), manifest.num_shards()));
  return manifest;
}

std::vector<std::string> PruneCheckpoints(const std::string& parent, int keep) {
  struct Finished {
    std::string created_at;  // RFC 3339, UTC: orders as text
    int64_t cut;
    std::string dir;
    bool operator<(const Finished& other) const {
      return std::tie(created_at, cut, dir) <
             std::tie(other.created_at, other.cut, other.dir);
    }
  };
  std::vector<Finished> finished;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !absl::StartsWith(name, "ckpt-")) continue;
    absl::StatusOr<CheckpointManifest> manifest =
        ReadManifest(entry.path().string());
    if (manifest.ok()) {
      finished.push_back(
          {manifest->created_at(), manifest->cut(), entry.path().string()});
    }
  }
  std::vector<std::string> removed;
  if (keep <= 0 || finished.size() <= static_cast<size_t>(keep)) return removed;
  std::sort(finished.begin(), finished.end());
  for (size_t i = 0; i + keep < finished.size(); ++i) {
    std::filesystem::remove_all(finished[i].dir, error);
    removed.push_back(finished[i].dir);
  }
  return removed;
}

}  // namespace ps
