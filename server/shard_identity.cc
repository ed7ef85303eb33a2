#include "server/shard_identity.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"

namespace ps::server {
namespace {

constexpr char kFileName[] = "/SHARD_IDENTITY";

std::string Describe(const ShardIdentity& identity) {
  return absl::StrCat("shard ", identity.shard_index, " of ",
                      identity.num_shards, " (routing version ",
                      identity.routing_version, ")");
}

}  // namespace

absl::StatusOr<ShardIdentity> ReadShardIdentity(const std::string& data_dir) {
  const std::string path = data_dir + kFileName;
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("no ", path));
  ShardIdentity identity;
  std::string key;
  bool index = false, count = false, routing = false;
  while (file >> key) {
    if (key == "shard_index")
      index = static_cast<bool>(file >> identity.shard_index);
    else if (key == "num_shards")
      count = static_cast<bool>(file >> identity.num_shards);
    else if (key == "routing_version")
      routing = static_cast<bool>(file >> identity.routing_version);
    else
      return absl::DataLossError(absl::StrCat(path, ": unknown key ", key));
  }
  if (!index || !count || !routing || identity.num_shards == 0 ||
      identity.shard_index >= identity.num_shards) {
    return absl::DataLossError(absl::StrCat(path, " does not parse"));
  }
  return identity;
}

absl::Status CheckShardIdentity(const std::string& data_dir,
                                const ShardIdentity& identity,
                                bool compare_count) {
  absl::StatusOr<ShardIdentity> recorded = ReadShardIdentity(data_dir);
  if (absl::IsNotFound(recorded.status())) return absl::OkStatus();
  if (!recorded.ok()) return recorded.status();
  ShardIdentity compared = identity;
  if (!compare_count) compared.num_shards = recorded->num_shards;
  if (*recorded == compared) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      data_dir, " holds the rows of ", Describe(*recorded),
      ", but this server was started as ", Describe(identity),
      ": it would answer initial values for keys it holds and hold keys "
      "another shard serves. Start it with --shard_index=",
      recorded->shard_index, " --num_shards=", recorded->num_shards,
      ", or restore a checkpoint into the new layout"));
}

absl::Status WriteShardIdentity(const std::string& data_dir,
                                const ShardIdentity& identity) {
  return WriteFileDurably(
      data_dir + kFileName,
      absl::StrCat("shard_index ", identity.shard_index, "\n", "num_shards ",
                   identity.num_shards, "\n", "routing_version ",
                   identity.routing_version, "\n"));
}

}  // namespace ps::server
