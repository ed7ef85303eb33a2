#include "cluster/slot_ownership.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace ps::cluster {
namespace {

constexpr char kSlotMapFile[] = "/SLOT_MAP.json";

absl::Status WriteSlotMap(const std::string& path, const SlotMap& map) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(map.ToSpec(), &json, print)
           .ok()) {
    return absl::InternalError("cannot write the slot map as JSON");
  }
  return WriteFileDurably(path, json);
}

absl::Status CheckShardCount(const SlotMap& map, uint32_t num_shards) {
  if (map.num_shards() == num_shards) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "slot map epoch ", map.epoch(), " is of ", map.num_shards(),
      " shards, but the cluster has ", num_shards,
      " (--num_shards; only a job under --etcd changes its shard count)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlotOwnership>> SlotOwnership::Open(
    const std::string& data_dir, uint32_t num_shards) {
  const std::string path = data_dir + kSlotMapFile;
  std::ifstream file(path);
  if (!file) {
    auto map = std::make_shared<const SlotMap>(SlotMap::Initial(num_shards));
    RETURN_IF_ERROR(WriteSlotMap(path, *map));
    return std::unique_ptr<SlotOwnership>(
        new SlotOwnership(path, std::move(map)));
  }
  std::stringstream json;
  json << file.rdbuf();
  absl::StatusOr<SlotMap> map = SlotMapFromJson(json.str(), num_shards);
  if (!map.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", map.status().message()));
  }
  return std::unique_ptr<SlotOwnership>(new SlotOwnership(
      path, std::make_shared<const SlotMap>(*std::move(map))));
}

absl::Status SlotOwnership::Create(const std::string& data_dir,
                                   const SlotMap& map) {
  return WriteSlotMap(data_dir + kSlotMapFile, map);
}

absl::Status SlotOwnership::Replace(uint64_t expected_epoch,
                                    const SlotMap& next) {
  absl::WriterMutexLock changing(&push_lock_);
  absl::MutexLock lock(&mu_);
  if (*current_ == next) return absl::OkStatus();
  RETURN_IF_ERROR(CheckShardCount(next, current_->num_shards()));
  if (current_->epoch() != expected_epoch || next.epoch() <= expected_epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the slot map is at epoch ", current_->epoch(),
        "; a change from epoch ", expected_epoch, " to epoch ", next.epoch(),
        " does not apply (read the map again and start over)"));
  }
  RETURN_IF_ERROR(WriteSlotMap(path_, next));
  current_ = std::make_shared<const SlotMap>(next);
  return absl::OkStatus();
}

absl::Status SlotOwnership::Adopt(const SlotMap& next) {
  absl::WriterMutexLock changing(&push_lock_);
  return AdoptLocked(next);
}

absl::Status SlotOwnership::AdoptAgreed(
    const std::function<absl::StatusOr<SlotMap>()>& agree) {
  absl::WriterMutexLock changing(&push_lock_);
  ASSIGN_OR_RETURN(const SlotMap next, agree());
  return AdoptLocked(next);
}

absl::Status SlotOwnership::AdoptLocked(const SlotMap& next) {
  absl::MutexLock lock(&mu_);
  if (next.epoch() <= current_->epoch()) return absl::OkStatus();
  RETURN_IF_ERROR(WriteSlotMap(path_, next));
  current_ = std::make_shared<const SlotMap>(next);
  return absl::OkStatus();
}

}  // namespace ps::cluster
