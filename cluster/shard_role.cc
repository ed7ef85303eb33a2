#include "cluster/shard_role.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "cluster/data_dir_generation.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

// ChooseRole()'s replica role: a replica of shard `index`, registered as
// `primary`; a data dir of an older generation is emptied for the copy,
// one of the current generation refused.
absl::StatusOr<ShardRole> FollowRegisteredPrimary(
    const RoleOptions& options, const ShardRecord& primary,
    const DataDirGeneration& own, const ShardGeneration& generation) {
  const std::string& dir = options.data_dir;
  const int index = options.shard_index;
  ShardRole role;
  role.replica_of_shard = index;
  std::error_code error;
  const bool holds_rows =
      std::filesystem::exists(dir) && !std::filesystem::is_empty(dir, error);
  if (holds_rows && !options.replica_copy) {
    if (!own.served || own.at.generation >= generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", index, " is served by ", primary.address, ", and ", dir,
          " holds the shard's rows of its current generation too: give this "
          "replica an empty --data_dir"));
    }
    role.discard_superseded_data_dir = true;
  }
  LOG(INFO) << "shard " << index << " is served by " << primary.address
            << " (generation " << generation.generation
            << "): this process is its replica";
  return role;
}

}  // namespace

absl::StatusOr<ShardRole> ChooseRole(CoordinationStore* store,
                                     const RoleOptions& options) {
  const std::string& job = options.job;
  const int index = options.shard_index;
  const std::string& dir = options.data_dir;
  const absl::Time give_up = absl::Now() + options.join_wait;
  while (true) {
    // The registration first: a promotion raises the generation before it
    // registers, so the generation read next is at least the registered
    // process's.
    absl::StatusOr<ShardRecord> primary = FindShard(*store, job, index);
    if (!primary.ok() && !absl::IsNotFound(primary.status())) {
      return primary.status();
    }
    ASSIGN_OR_RETURN(const ShardGeneration generation,
                     ReadShardGeneration(*store, job, index));
    ASSIGN_OR_RETURN(const DataDirGeneration own, ReadDataDirGeneration(dir));
    // (A replica's copy holds a generation only while promoted.)
    if (own.served && !options.replica_copy &&
        own.at.generation > generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " served shard ", index, " at generation ", own.at.generation,
          ", newer than etcd's ", generation.generation,
          ": etcd lost its state, or --job names another job"));
    }
    const bool newest = own.Is(generation);
    std::string waiting_for;
    if (primary.ok() && primary->address != options.own_address) {
      return FollowRegisteredPrimary(options, *primary, own, generation);
    } else if (newest && generation.mod_revision != 0) {
      // No other process serves the shard (or this one's previous run,
      // whose lease RegisterShard() waits out). A replica's copy at the
      // shard's generation is one whose promotion raised it and was then
      // cut short: only it holds that promotion's token. (One cut short
      // before etcd took it is not finished: the primary it left may have
      // served since, at the old generation.)
      return ShardRole();
    } else if (!options.replica_copy && generation.mod_revision == 0 &&
               (!own.served || newest)) {
      // A new shard (no generation yet): one process claims it, a data dir
      // that served it at generation 0 (a first registration cut short) or
      // an empty one.
      absl::StatusOr<std::unique_ptr<LeasedKey>> claim =
          ClaimNewShard(store, job, index, options.lease);
      if (claim.ok()) {
        LOG(INFO) << "shard " << index
                  << " is new: this process claimed it, as its primary";
        ShardRole role;
        role.claim = *std::move(claim);
        return role;
      }
      // Another process claimed it, or registered as it, first.
      if (!absl::IsAlreadyExists(claim.status()) &&
          !absl::IsFailedPrecondition(claim.status())) {
        return claim.status();
      }
      waiting_for = " is new, and another process claimed the shard";
    } else {
      waiting_for = options.replica_copy
                        ? " holds a replica's copy, which becomes the "
                          "primary only by a promotion etcd holds"
                        : absl::StrCat(
                              " does not hold the shard's newest "
                              "rows (generation ",
                              generation.generation, ")");
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", job,
          ": this process can be neither its primary nor a replica yet: ", dir,
          waiting_for, ". Waited --join_wait_s"));
    }
    LOG_EVERY_N(INFO, 40) << "shard " << index << ": " << dir << waiting_for;
    absl::SleepFor(options.poll);
  }
}

absl::StatusOr<ShardRecord> WaitForShard(CoordinationStore& store,
                                         const std::string& job, int index,
                                         absl::Duration wait,
                                         absl::Duration poll) {
  const absl::Time give_up = absl::Now() + wait;
  while (true) {
    absl::StatusOr<ShardRecord> primary = FindShard(store, job, index);
    if (primary.ok()) return primary;
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", job,
          " is not registered in etcd: ", primary.status().message()));
    }
    absl::SleepFor(poll);
  }
}

absl::Status RegisterAsPrimary(CoordinationStore* store,
                               const RegistrationOptions& options,
                               ShardControl& shard,
                               std::unique_ptr<LeasedKey>* registration,
                               std::unique_ptr<LeasedKey>* claim) {
  const ShardRecord& record = options.record;
  // A data dir the shard failed over from (a replica took its place since
  // it last served) is stale: it must not serve the shard again.
  ASSIGN_OR_RETURN(const ShardGeneration generation,
                   ReadShardGeneration(*store, options.job, record.index));
  ASSIGN_OR_RETURN(const DataDirGeneration own,
                   ReadDataDirGeneration(options.data_dir));
  RETURN_IF_ERROR(
      CheckDataDirMayServe(options.data_dir, record.index, own, generation));
  // Written before the registration: a crash between leaves a data dir
  // that may serve again (nothing was acknowledged: pushes wait for the
  // registration).
  RETURN_IF_ERROR(WriteDataDirGeneration(
      options.data_dir, generation.generation, generation.promotion));
  ASSIGN_OR_RETURN(*registration, RegisterShard(store, options.job, record,
                                                options.lease, generation));
  if (claim != nullptr) claim->reset();
  // Before any push is taken: from now on no push is acknowledged that a
  // replica the record names lacks.
  RETURN_IF_ERROR(shard.RecordInSyncSet());
  LOG(INFO) << "registered in etcd as " << ShardsPrefix(options.job)
            << record.index << " = " << record.address;
  shard.FenceBy(registration->get());
  RETURN_IF_ERROR(shard.JoinJob(options.join_wait));
  return shard.CampaignForCoordinator(record.address, options.lease);
}

}  // namespace ps::cluster
