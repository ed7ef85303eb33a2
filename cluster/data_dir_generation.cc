#include "cluster/data_dir_generation.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"

namespace ps::cluster {
namespace {

constexpr char kGenerationFile[] = "/GENERATION";

}  // namespace

absl::StatusOr<DataDirGeneration> ReadDataDirGeneration(
    const std::string& data_dir) {
  DataDirGeneration read;
  std::ifstream in(data_dir + kGenerationFile);
  if (!in) return read;
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  absl::StatusOr<ShardGeneration> parsed = ParseGeneration(text);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(data_dir, kGenerationFile, ": ",
                                            parsed.status().message()));
  }
  read.served = true;
  read.at = *std::move(parsed);
  return read;
}

absl::Status WriteDataDirGeneration(const std::string& data_dir,
                                    uint64_t generation,
                                    const std::string& promotion) {
  return WriteFileDurably(data_dir + kGenerationFile,
                          GenerationText(generation, promotion) + "\n");
}

absl::Status CheckDataDirMayServe(const std::string& data_dir, int index,
                                  const DataDirGeneration& own,
                                  const ShardGeneration& now) {
  const uint64_t own_generation = own.at.generation;
  if (now.generation > own_generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", index, " failed over to a replica (generation ",
                     now.generation, ") since ", data_dir,
                     " last served it (generation ", own_generation,
                     "): its rows are stale. Start this process as a replica "
                     "(--replica_of_shard=",
                     index, ") on an empty --data_dir"));
  }
  if (own.served && own_generation == now.generation &&
      own.at.promotion != now.promotion) {
    return absl::FailedPreconditionError(absl::StrCat(
        data_dir, " was being promoted to shard ", index, "'s generation ",
        own_generation,
        ", which another replica's promotion took: its rows are stale. Start "
        "this process as a replica on an empty --data_dir"));
  }
  if (own_generation > now.generation) {
    return absl::FailedPreconditionError(
        absl::StrCat(data_dir, " served shard ", index, " at generation ",
                     own_generation, ", newer than etcd's ", now.generation,
                     ": etcd lost its state, or --job names another job"));
  }
  return absl::OkStatus();
}

}  // namespace ps::cluster
