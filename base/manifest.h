// File: base/manifest.h
//
// Reads and writes the manifests of checkpoints and exports:
// DIR/MANIFEST.json, protobuf's JSON of CheckpointManifest or ExportManifest
// (proto/checkpoint.proto). A manifest is written last, when every part it
// names is there, so that a directory without one is neither a checkpoint
// nor an export. No networking: servers, workers and ps_predict read them.

#ifndef PS_BASE_MANIFEST_H_
#define PS_BASE_MANIFEST_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/slot_map.h"
#include "google/protobuf/message.h"
#include "proto/checkpoint.pb.h"

namespace ps {

// DIR/MANIFEST.json.
std::string ManifestPath(const std::string& dir);

// Writes `manifest` to DIR/MANIFEST.json atomically and durably (a
// temporary file, fsynced, renamed into place, the directory fsynced).
absl::Status WriteManifest(const std::string& dir,
                           const google::protobuf::Message& manifest);

// The manifest of the checkpoint in `dir`. NOT_FOUND without one (an
// unfinished checkpoint, or none), DATA_LOSS for one that does not parse or
// that this version does not read.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir);

// The manifest of the export in `dir` (see ReadManifest()).
absl::StatusOr<ExportManifest> ReadExportManifest(const std::string& dir);

// The exports a delta is read over, oldest first: its base, each delta
// after it, and `dir` last (just `dir` for a full export). NOT_FOUND or
// DATA_LOSS for a link that is missing or does not read, DATA_LOSS for one
// that does not follow (another base, index or model).
absl::StatusOr<std::vector<std::string>> ExportChain(const std::string& dir);

// When the export's manifest was written: its created_at_unix_ms, or for a
// manifest written without one, its created_at (to the second); the
// infinite past for one whose created_at does not read either.
absl::Time ExportWrittenAt(const ExportManifest& manifest);

// The slot map a manifest records, or for one written before manifests
// recorded maps, the initial map of its shard count. REQUIRES: `manifest`
// came from ReadManifest() or ReadExportManifest(), which check the map.
SlotMap RecordedSlotMap(const CheckpointManifest& manifest);
SlotMap RecordedSlotMap(const ExportManifest& manifest);

// Deletes all but the newest `keep` finished checkpoints (subdirectories
// named ckpt-* with a readable manifest) of `parent`, newest by the time
// they were taken (then cut, then name); unfinished ones are left alone.
// Returns the directories deleted. `keep` <= 0 keeps all.
std::vector<std::string> PruneCheckpoints(const std::string& parent, int keep);

}  // namespace ps

#endif  // PS_BASE_MANIFEST_H_
