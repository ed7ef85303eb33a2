#include "cluster/etcd_slot_map.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "cluster/shard_directory.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

// A map written without its shard count has `num_shards_if_unset`.
absl::StatusOr<SlotMap> FromJson(const std::string& key,
                                 const std::string& json,
                                 uint32_t num_shards_if_unset) {
  absl::StatusOr<SlotMap> map = SlotMapFromJson(json, num_shards_if_unset);
  if (!map.ok()) {
    return absl::DataLossError(
        absl::StrCat("etcd's ", key, ": ", map.status().message()));
  }
  return map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdSlotMap>> EtcdSlotMap::Start(
    CoordinationStore* etcd, const std::string& job, SlotOwnership* slots,
    OwnMap own_map, absl::Duration resync_interval) {
  auto synced = std::unique_ptr<EtcdSlotMap>(
      new EtcdSlotMap(etcd, SlotMapKey(job), slots, resync_interval));
  absl::StatusOr<std::pair<SlotMap, int64_t>> read = synced->Read();
  if (absl::IsNotFound(read.status())) {
    // The job's first shard: its own map (the initial one, on a new job)
    // becomes the job's, unless another shard's got there first.
    ASSIGN_OR_RETURN(
        const bool created,
        etcd->PutIf(synced->key_, SlotMapToJson(*slots->current()), 0));
    if (created) {
      LOG(INFO) << "slot map epoch " << slots->current()->epoch()
                << " written to etcd's " << synced->key_;
    }
    read = synced->Read();
  }
  RETURN_IF_ERROR(read.status());
  const SlotMap& job_map = read->first;
  {
    // A map written before maps held their shard count: the count this
    // shard reads it with (its --num_shards, the job's) goes into it, so
    // that workers and ps_admin count the shards as the shards do.
    ASSIGN_OR_RETURN(const net::EtcdValue raw, etcd->Get(synced->key_));
    if (raw.value.find("\"num_shards\"") == std::string::npos &&
        etcd->PutIf(synced->key_, SlotMapToJson(job_map), raw.mod_revision)
            .value_or(false)) {
      LOG(INFO) << "slot map epoch " << job_map.epoch() << " in etcd's "
                << synced->key_ << " now records its " << job_map.num_shards()
                << " shards";
    }
  }
  const SlotMap& own = *slots->current();
  const uint64_t own_epoch = own.epoch();
  if (own_map == OwnMap::kRestored && !(job_map == own)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this shard was just restored with the checkpoint's slot map (epoch ",
        own_epoch, "), but the job's map in etcd (", synced->key_, ", epoch ",
        job_map.epoch(),
        ") is another: its rows were placed by the checkpoint's. Restore "
        "into a new --job, or delete the key (etcdctl del ",
        synced->key_, ") before restoring"));
  }
  if (own_map == OwnMap::kDataDirWithTables && own_epoch == job_map.epoch() &&
      !(job_map == own)) {
    return absl::FailedPreconditionError(
        absl::StrCat("this data dir's slot map and the job's in etcd (",
                     synced->key_, ") are both at epoch ", own_epoch,
                     " but differ: one of them was changed outside etcd"));
  }
  if (own_map == OwnMap::kDataDirWithTables && own_epoch > job_map.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this data dir routes by slot map epoch ", own_epoch,
        ", newer than the job's map in etcd (", synced->key_, ", epoch ",
        job_map.epoch(),
        "): was etcd's state lost? Put the newest map back in etcd (every "
        "shard's data dir keeps its map in SLOT_MAP.json) before starting"));
  }
  RETURN_IF_ERROR(slots->Adopt(job_map));
  synced->follower_ = std::thread([raw = synced.get()] { raw->Follow(); });
  return synced;
}

EtcdSlotMap::~EtcdSlotMap() {
  stop_.Notify();
  if (follower_.joinable()) follower_.join();
}

absl::StatusOr<std::pair<SlotMap, int64_t>> EtcdSlotMap::Read() {
  ASSIGN_OR_RETURN(net::EtcdValue value, etcd_->Get(key_));
  ASSIGN_OR_RETURN(SlotMap map,
                   FromJson(key_, value.value, slots_->num_shards()));
  return std::make_pair(std::move(map), value.mod_revision);
}

absl::Status EtcdSlotMap::Propose(uint64_t expected_epoch,
                                  const SlotMap& next) {
  std::optional<SlotMap> newer;
  const absl::Status agreed =
      slots_->AdoptAgreed([&]() -> absl::StatusOr<SlotMap> {
        ASSIGN_OR_RETURN(auto read, Read());
        const auto& [job_map, revision] = read;
        if (job_map == next) return next;
        if (job_map.epoch() != expected_epoch ||
            next.epoch() <= expected_epoch) {
          newer = job_map;
          return absl::FailedPreconditionError(
              absl::StrCat("the job's slot map is at epoch ", job_map.epoch(),
                           "; a change from epoch ", expected_epoch,
                           " to epoch ", next.epoch(),
                           " does not apply (read the map again and start "
                           "over)"));
        }
        if (next.num_shards() > job_map.num_shards()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "slot map epoch ", next.epoch(), " is of ", next.num_shards(),
              " shards, but the job has ", job_map.num_shards(),
              ": a shard joins by starting with --etcd and its --shard_index"));
        }
        ASSIGN_OR_RETURN(const bool swapped,
                         etcd_->PutIf(key_, SlotMapToJson(next), revision));
        if (!swapped) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the job's slot map changed while epoch ", next.epoch(),
              " was being written; read it again and start over"));
        }
        return next;
      });
  // The caller reads the job's map again: let this shard route by it too.
  if (newer.has_value()) slots_->Adopt(*newer).IgnoreError();
  return agreed;
}

absl::Status EtcdSlotMap::Join(uint32_t shard_index, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    absl::StatusOr<std::pair<SlotMap, int64_t>> read = Read();
    if (!read.ok()) {
      // etcd unreachable for a moment: within the wait, try again.
      if (absl::Now() >= deadline) return read.status();
      LOG_EVERY_N(WARNING, 10) << "joining the job: " << read.status();
      absl::SleepFor(absl::Milliseconds(500));
      continue;
    }
    const auto& [job_map, revision] = *read;
    if (shard_index < job_map.num_shards()) return slots_->Adopt(job_map);
    if (shard_index == job_map.num_shards()) {
      const SlotMap joined = job_map.WithNumShards(shard_index + 1);
      absl::StatusOr<bool> swapped =
          etcd_->PutIf(key_, SlotMapToJson(joined), revision);
      if (!swapped.ok() && absl::Now() >= deadline) return swapped.status();
      if (swapped.ok() && *swapped) {
        LOG(INFO) << "joined the job as shard " << shard_index << " of "
                  << joined.num_shards() << " (slot map epoch "
                  << joined.epoch() << "), owning no slot until a rebalance";
        return slots_->Adopt(joined);
      }
      continue;  // the map changed meanwhile: read it again
    }
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", shard_index, " cannot join: the job has ",
          job_map.num_shards(), " shards, and shards join in index order (",
          FormatSlotRanges({{job_map.num_shards(), shard_index - 1}}),
          " first)"));
    }
    LOG_EVERY_N(INFO, 10) << "shard " << shard_index
                          << " waits for the job's shards "
                          << FormatSlotRanges(
                                 {{job_map.num_shards(), shard_index - 1}})
                          << " to join first";
    absl::SleepFor(absl::Milliseconds(500));
  }
}

absl::Status EtcdSlotMap::CatchUp() {
  absl::StatusOr<std::pair<SlotMap, int64_t>> read = Read();
  if (absl::IsNotFound(read.status())) return absl::OkStatus();
  RETURN_IF_ERROR(read.status());
  return slots_->Adopt(read->first);
}

void EtcdSlotMap::OnEvent(const net::EtcdEvent& event) {
  if (event.type != net::EtcdEvent::Type::kPut || event.kv.key != key_) return;
  absl::StatusOr<SlotMap> map =
      FromJson(key_, event.kv.value, slots_->num_shards());
  absl::Status adopted = map.ok() ? slots_->Adopt(*map) : map.status();
  if (!adopted.ok()) LOG(ERROR) << "slot map from etcd: " << adopted;
}

void EtcdSlotMap::Follow() {
  std::unique_ptr<StoreWatch> watch;
  do {
    if (watch == nullptr || !watch->status().ok()) {
      watch.reset();
      absl::StatusOr<std::unique_ptr<StoreWatch>> made = etcd_->WatchPrefix(
          key_, 0, [this](const net::EtcdEvent& event) { OnEvent(event); });
      if (made.ok()) {
        watch = *std::move(made);
      } else {
        LOG_EVERY_N(WARNING, 10) << "watching the slot map: " << made.status();
      }
    }
    // Whatever the watch missed while it was down.
    absl::StatusOr<std::pair<SlotMap, int64_t>> read = Read();
    absl::Status adopted =
        read.ok() ? slots_->Adopt(read->first) : read.status();
    if (!adopted.ok()) {
      LOG_EVERY_N(WARNING, 10) << "slot map: " << adopted;
    }
  } while (!stop_.WaitForNotificationWithTimeout(resync_interval_));
}

}  // namespace ps::cluster
