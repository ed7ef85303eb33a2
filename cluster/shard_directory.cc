#include "cluster/shard_directory.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

std::string InSyncKey(const std::string& job, int index) {
  return absl::StrCat("/ps/", job, "/in_sync/", index);
}

// "<address> <num_shards>".
std::string RecordValue(const ShardRecord& record) {
  return absl::StrCat(record.address, " ", record.num_shards);
}

absl::StatusOr<ShardRecord> ParseRecord(const EtcdValue& kv,
                                        absl::string_view prefix) {
  ShardRecord record;
  const std::vector<std::string> fields =
      absl::StrSplit(kv.value, ' ', absl::SkipEmpty());
  if (!absl::SimpleAtoi(absl::string_view(kv.key).substr(prefix.size()),
                        &record.index) ||
      fields.size() != 2 || !absl::SimpleAtoi(fields[1], &record.num_shards) ||
      record.num_shards < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd key ", kv.key, " holds '", kv.value,
                     "', not a shard's address and shard count"));
  }
  record.address = fields[0];
  return record;
}

}  // namespace

absl::Status CheckJobName(const std::string& job) {
  const bool valid =
      !job.empty() && job.size() <= 64 &&
      job.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") ==
          std::string::npos;
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--job must be 1 to 64 of a-z, 0-9, _ and -, not '", job, "'"));
  }
  return absl::OkStatus();
}

std::string ShardsPrefix(const std::string& job) {
  return absl::StrCat("/ps/", job, "/shards/");
}

absl::StatusOr<std::unique_ptr<LeasedKey>> LeasedKey::Start(
    CoordinationStore* etcd, std::string key, std::string value,
    absl::Duration ttl, bool exclusive,
    std::function<absl::Status()> may_take_again,
    std::vector<EtcdCondition> conditions) {
  auto leased = std::unique_ptr<LeasedKey>(
      new LeasedKey(etcd, std::move(key), std::move(value), ttl, exclusive,
                    std::move(may_take_again), std::move(conditions)));
  RETURN_IF_ERROR(leased->Register());
  LeasedKey* raw = leased.get();
  leased->renewer_ = std::thread([raw] { raw->KeepAlive(); });
  return leased;
}

namespace {

std::string GenerationKey(const std::string& job, int index) {
  return absl::StrCat("/ps/", job, "/generation/", index);
}

}  // namespace

std::string GenerationText(uint64_t generation, const std::string& promotion) {
  if (promotion.empty()) return absl::StrCat(generation);
  return absl::StrCat(generation, " ", promotion);
}

absl::StatusOr<ShardGeneration> ParseGeneration(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  ShardGeneration parsed;
  const size_t space = text.find(' ');
  if (!absl::SimpleAtoi(text.substr(0, space), &parsed.generation) ||
      (space != absl::string_view::npos && space + 1 == text.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a generation"));
  }
  if (space != absl::string_view::npos) {
    parsed.promotion = std::string(text.substr(space + 1));
  }
  return parsed;
}

absl::StatusOr<ShardGeneration> ReadShardGeneration(CoordinationStore& etcd,
                                                    const std::string& job,
                                                    int index) {
  absl::StatusOr<EtcdValue> kv = etcd.Get(GenerationKey(job, index));
  if (absl::IsNotFound(kv.status())) return ShardGeneration();
  RETURN_IF_ERROR(kv.status());
  absl::StatusOr<ShardGeneration> seen = ParseGeneration(kv->value);
  if (!seen.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd key ", kv->key, ": ", seen.status().message()));
  }
  seen->mod_revision = kv->mod_revision;
  return seen;
}

absl::StatusOr<uint64_t> RaiseShardGeneration(
    CoordinationStore& etcd, const std::string& job, int index,
    const ShardGeneration& seen, const std::string& promotion,
    std::optional<int64_t> in_sync_revision) {
  const uint64_t next = seen.generation + 1;
  std::vector<EtcdCondition> conditions = {
      {absl::StrCat(ShardsPrefix(job), index), /*absent*/ 0}};
  if (in_sync_revision.has_value())
    conditions.push_back({InSyncKey(job, index), *in_sync_revision});
  absl::StatusOr<bool> raised =
      etcd.PutIf(GenerationKey(job, index), GenerationText(next, promotion),
                 seen.mod_revision, /*lease=*/0, conditions);
  if (raised.ok() && *raised) return next;
  // Not raised, or no answer: a raise etcd applied whose answer was lost
  // (sent again, it found the generation moved) left this promotion's token.
  if (!promotion.empty()) {
    absl::StatusOr<ShardGeneration> now = ReadShardGeneration(etcd, job, index);
    if (now.ok() && now->generation == next && now->promotion == promotion) {
      return next;
    }
  }
  if (!raised.ok()) return raised.status();
  return absl::AbortedError(absl::StrCat(
      "shard ", index,
      "'s generation changed since it was read, or a process registered "
      "as the shard (another replica was promoted, or the primary came "
      "back, first)",
      in_sync_revision.has_value()
          ? ", or its primary changed its in-sync set since"
          : ""));
}

bool InSyncSet::Holds(uint64_t feed_id, uint64_t follower) const {
  return feed == feed_id && std::find(followers.begin(), followers.end(),
                                      follower) != followers.end();
}

std::string InSyncText(const InSyncSet& set) {
  return absl::StrCat(set.generation, " ", set.feed, " ",
                      absl::StrJoin(set.followers, ","));
}

absl::StatusOr<InSyncSet> ParseInSync(absl::string_view text) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ');
  InSyncSet set;
  if ((parts.size() != 2 && parts.size() != 3) ||
      !absl::SimpleAtoi(parts[0], &set.generation) ||
      !absl::SimpleAtoi(parts[1], &set.feed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not GENERATION FEED IDS"));
  }
  if (parts.size() == 3 && !parts[2].empty()) {
    for (absl::string_view id : absl::StrSplit(parts[2], ',')) {
      uint64_t follower = 0;
      if (!absl::SimpleAtoi(id, &follower)) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", text, "\": \"", id, "\" is not a follower id"));
      }
      set.followers.push_back(follower);
    }
  }
  std::sort(set.followers.begin(), set.followers.end());
  return set;
}

absl::StatusOr<InSyncSet> ReadInSyncSet(CoordinationStore& etcd,
                                        const std::string& job, int index) {
  ASSIGN_OR_RETURN(const EtcdValue kv, etcd.Get(InSyncKey(job, index)));
  absl::StatusOr<InSyncSet> set = ParseInSync(kv.value);
  if (!set.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd key ", kv.key, ": ", set.status().message()));
  }
  set->mod_revision = kv.mod_revision;
  return set;
}

absl::Status WriteInSyncSet(CoordinationStore& etcd, const std::string& job,
                            int index, const ShardGeneration& at,
                            const InSyncSet& set) {
  const std::string key = InSyncKey(job, index);
  absl::StatusOr<EtcdValue> now = etcd.Get(key);
  if (!now.ok() && !absl::IsNotFound(now.status())) return now.status();
  const int64_t revision = now.ok() ? now->mod_revision : 0;
  ASSIGN_OR_RETURN(const bool written,
                   etcd.PutIf(key, InSyncText(set), revision, /*lease=*/0,
                              {{GenerationKey(job, index), at.mod_revision}}));
  if (written) return absl::OkStatus();
  // Not written, or written by an earlier try whose answer was lost: which
  // one the keys say.
  ASSIGN_OR_RETURN(const ShardGeneration generation,
                   ReadShardGeneration(etcd, job, index));
  if (generation.mod_revision != at.mod_revision) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", index, "'s generation moved past ",
                     at.generation, " (a replica was promoted)"));
  }
  absl::StatusOr<EtcdValue> stored = etcd.Get(key);
  if (stored.ok() && stored->value == InSyncText(set)) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "shard ", index, "'s in-sync set changed while it was written; retry"));
}

absl::StatusOr<std::unique_ptr<LeasedKey>> ClaimNewShard(
    CoordinationStore* etcd, const std::string& job, int index,
    absl::Duration ttl) {
  RETURN_IF_ERROR(CheckJobName(job));
  return LeasedKey::Start(
      etcd, absl::StrCat("/ps/", job, "/claims/", index), "claimed", ttl,
      /*exclusive=*/true, /*may_take_again=*/{},
      {{GenerationKey(job, index), /*absent*/ 0},
       {absl::StrCat(ShardsPrefix(job), index), /*absent*/ 0}});
}

absl::StatusOr<ShardRecord> FindShard(CoordinationStore& etcd,
                                      const std::string& job, int index) {
  const std::string prefix = ShardsPrefix(job);
  ASSIGN_OR_RETURN(const EtcdValue kv, etcd.Get(absl::StrCat(prefix, index)));
  return ParseRecord(kv, prefix);
}

absl::StatusOr<std::unique_ptr<LeasedKey>> RegisterShard(
    CoordinationStore* etcd, const std::string& job, const ShardRecord& record,
    absl::Duration ttl, const ShardGeneration& generation) {
  RETURN_IF_ERROR(CheckJobName(job));
  auto may_take_again = [etcd, job, index = record.index,
                         generation]() -> absl::Status {
    ASSIGN_OR_RETURN(const ShardGeneration now,
                     ReadShardGeneration(*etcd, job, index));
    if (now.generation != generation.generation ||
        now.promotion != generation.promotion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", index, " failed over to another process (generation ",
          GenerationText(now.generation, now.promotion), ", this one's ",
          GenerationText(generation.generation, generation.promotion), ")"));
    }
    return absl::OkStatus();
  };
  ShardGeneration at = generation;
  if (at.mod_revision == 0) {
    // The shard's first registration writes its generation 0 first, so
    // that the registration holds on a key that exists, then and after a
    // lapse. A replica promoted meanwhile (from no key) wins.
    RETURN_IF_ERROR(
        etcd->PutIf(GenerationKey(job, record.index), "0", /*absent*/ 0)
            .status());
    ASSIGN_OR_RETURN(at, ReadShardGeneration(*etcd, job, record.index));
    if (at.generation != generation.generation) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", record.index,
                       " failed over to another process (generation ",
                       at.generation, ") as this one registered"));
    }
  }
  return LeasedKey::Start(
      etcd, absl::StrCat(ShardsPrefix(job), record.index), RecordValue(record),
      ttl, /*exclusive=*/true, std::move(may_take_again),
      {{GenerationKey(job, record.index), at.mod_revision}});
}

std::string WorkersPrefix(const std::string& job) {
  return absl::StrCat("/ps/", job, "/workers/");
}

absl::StatusOr<std::unique_ptr<LeasedKey>> RegisterWorker(
    CoordinationStore* etcd, const std::string& job, uint32_t index,
    absl::Duration lease) {
  RETURN_IF_ERROR(CheckJobName(job));
  return LeasedKey::Start(etcd, absl::StrCat(WorkersPrefix(job), index),
                          absl::StrCat(absl::ToInt64Milliseconds(lease)),
                          std::max(lease, absl::Seconds(1)),
                          /*exclusive=*/false);
}

absl::StatusOr<std::vector<RegisteredWorker>> RegisteredWorkers(
    CoordinationStore& etcd, const std::string& job) {
  const std::string prefix = WorkersPrefix(job);
  ASSIGN_OR_RETURN(const std::vector<EtcdValue> values, etcd.GetPrefix(prefix));
  std::vector<RegisteredWorker> workers;
  for (const EtcdValue& kv : values) {
    RegisteredWorker worker;
    int64_t lease_ms = 0;
    if (!absl::SimpleAtoi(absl::string_view(kv.key).substr(prefix.size()),
                          &worker.index) ||
        !absl::SimpleAtoi(kv.value, &lease_ms) || lease_ms <= 0) {
      LOG(WARNING) << "etcd key " << kv.key << " holds '" << kv.value
                   << "', not a worker's lease: left out";
      continue;
    }
    worker.lease = absl::Milliseconds(lease_ms);
    workers.push_back(worker);
  }
  return workers;
}

std::string CoordinatorKey(const std::string& job) {
  return absl::StrCat("/ps/", job, "/coordinator");
}

absl::StatusOr<std::string> FindCoordinator(CoordinationStore& etcd,
                                            const std::string& job,
                                            absl::Duration wait) {
  RETURN_IF_ERROR(CheckJobName(job));
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    absl::StatusOr<EtcdValue> held = etcd.Get(CoordinatorKey(job));
    if (held.ok()) {
      // "<index> <address>"
      const size_t space = held->value.find(' ');
      if (space != std::string::npos && space + 1 < held->value.size())
        return held->value.substr(space + 1);
      return absl::FailedPreconditionError(
          absl::StrCat("etcd key ", held->key, " holds '", held->value,
                       "', not a coordinator's index and address"));
    }
    if (absl::Now() >= deadline) {
      if (absl::IsNotFound(held.status())) {
        return absl::DeadlineExceededError(
            absl::StrCat("no coordinator of job ", job, " is elected in etcd (",
                         CoordinatorKey(job), ")"));
      }
      return held.status();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<bool> LeasedKey::ConditionsHold() const {
  for (const EtcdCondition& condition : conditions_) {
    absl::StatusOr<EtcdValue> now = etcd_->Get(condition.key);
    if (!now.ok() && !absl::IsNotFound(now.status())) return now.status();
    const int64_t revision = now.ok() ? now->mod_revision : 0;
    if (revision != condition.mod_revision) return false;
  }
  return true;
}

int64_t LeasedKey::SteadyNanos() {
  // CLOCK_BOOTTIME: monotonic, and counting while the machine is suspended
  // (as etcd's clock does).
  timespec now;
  clock_gettime(CLOCK_BOOTTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

absl::Status LeasedKey::Register() {
  int64_t asked = SteadyNanos();
  ASSIGN_OR_RETURN(int64_t lease, etcd_->GrantLease(ttl_));
  if (!exclusive_) {
    absl::StatusOr<int64_t> put = etcd_->Put(key_, value_, lease);
    if (!put.ok()) {
      etcd_->RevokeLease(lease, absl::Seconds(1)).IgnoreError();
      return put.status();
    }
    lease_ = lease;
    held_until_ns_ = asked + absl::ToInt64Nanoseconds(ttl_);
    return absl::OkStatus();
  }
  // Only where no live process holds the index. A process of this index
  // that was killed leaves its key until its lease runs out: wait that
  // long before calling the index taken.
  const absl::Time give_up = absl::Now() + ttl_ + absl::Seconds(1);
  bool said = false;
  while (true) {
    if (said) {
      // Waiting as long as a lease lasts: keep this one alive meanwhile.
      const int64_t renewing = SteadyNanos();
      absl::StatusOr<absl::Duration> renewed = etcd_->KeepAlive(lease);
      if (renewed.ok()) {
        asked = renewing;
      } else if (absl::IsNotFound(renewed.status())) {
        asked = SteadyNanos();
        ASSIGN_OR_RETURN(lease, etcd_->GrantLease(ttl_));
      }
    }
    absl::StatusOr<bool> created =
        etcd_->PutIf(key_, value_, 0, lease, conditions_);
    absl::StatusOr<EtcdValue> held = etcd_->Get(key_);
    // A swap that etcd applied but whose answer was lost (and was sent
    // again) leaves the key on this lease.
    if ((created.ok() && *created) || (held.ok() && held->lease == lease)) {
      lease_ = lease;
      held_until_ns_ = asked + absl::ToInt64Nanoseconds(ttl_);
      return absl::OkStatus();
    }
    // Free, yet not written: one of the conditions no longer holds (or the
    // holder let go between the swap and the read: then try again).
    if (created.ok() && !conditions_.empty() &&
        absl::IsNotFound(held.status())) {
      absl::StatusOr<bool> conditions_hold = ConditionsHold();
      if (conditions_hold.ok() && !*conditions_hold) {
        etcd_->RevokeLease(lease, absl::Seconds(1)).IgnoreError();
        return absl::FailedPreconditionError(
            absl::StrCat("etcd's ", key_,
                         " was not written: what it depends on "
                         "changed since it was read"));
      }
    }
    if (absl::Now() >= give_up || (!created.ok() && !held.ok())) {
      etcd_->RevokeLease(lease, absl::Seconds(1)).IgnoreError();
      if (!created.ok()) return created.status();
      return absl::AlreadyExistsError(
          absl::StrCat("etcd's ", key_, " is held by another live process (",
                       held.ok() ? held->value : held.status().ToString(),
                       "): another process took it (this --shard_index "
                       "running twice, or, under --replicas, a replica "
                       "promoted while this one restarted: started again, "
                       "this one follows it)"));
    }
    if (!said) {
      LOG(INFO) << key_ << " is held (" << (held.ok() ? held->value : "?")
                << "): waiting up to " << absl::FormatDuration(ttl_)
                << " for the lease of a process that died to run out";
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

void LeasedKey::KeepAlive() {
  while (!stop_.WaitForNotificationWithTimeout(ttl_ / 3)) {
    const int64_t asked = SteadyNanos();
    absl::StatusOr<absl::Duration> renewed = etcd_->KeepAlive(lease_, ttl_ / 3);
    if (renewed.ok()) {
      const absl::Duration granted =
          *renewed > absl::ZeroDuration() ? std::min(*renewed, ttl_) : ttl_;
      held_until_ns_ = asked + absl::ToInt64Nanoseconds(granted);
      continue;
    }
    if (absl::IsNotFound(renewed.status())) {
      if (may_take_again_) {
        if (absl::Status may = may_take_again_(); !may.ok()) {
          if (absl::IsFailedPrecondition(may)) {
            LOG(ERROR) << key_ << ": the etcd lease lapsed, and "
                       << may.message()
                       << ": not taking the key again (fenced for good)";
            lost_ = true;
            return;
          }
          LOG_EVERY_N(WARNING, 10) << key_ << ": " << may;
          continue;
        }
      }
      LOG(WARNING) << key_ << ": the etcd lease lapsed; registering again";
      const absl::Status again = Register();
      if (!again.ok()) {
        // Workers that look the shards up do not find this one until it is
        // registered again.
        LOG_EVERY_N(ERROR, 10) << key_ << ": not registered in etcd: " << again;
      }
    } else {
      LOG_EVERY_N(WARNING, 10) << key_ << ": renewing: " << renewed.status();
    }
  }
}

LeasedKey::~LeasedKey() {
  stop_.Notify();
  if (renewer_.joinable()) renewer_.join();
  if (lease_ == 0) return;  // never registered
  // Briefly: a shard that stops must not wait on an etcd that is gone.
  if (absl::Status revoked = etcd_->RevokeLease(lease_, absl::Seconds(1));
      !revoked.ok())
    LOG(WARNING) << key_ << ": " << revoked << " (the key goes with its lease)";
}

namespace {

// The addresses of every shard of `job` in `values`, in index order, or
// why there are not all of them. `num_shards`: the job's count by its slot
// map (records beyond it are of shards that left or have not joined yet),
// or 0 before the job has a map, when the records' own count says.
absl::StatusOr<std::vector<std::string>> ShardsIn(
    const std::vector<EtcdValue>& values, const std::string& job,
    absl::string_view prefix, int num_shards) {
  const bool counted_by_map = num_shards != 0;
  std::vector<std::string> addresses(num_shards);
  for (const EtcdValue& kv : values) {
    ASSIGN_OR_RETURN(const ShardRecord record, ParseRecord(kv, prefix));
    if (counted_by_map) {
      if (record.index < num_shards) addresses[record.index] = record.address;
      continue;
    }
    if (num_shards != 0 && record.num_shards != num_shards) {
      return absl::FailedPreconditionError(
          absl::StrCat("the shards of job ", job, " disagree on their count (",
                       num_shards, " and ", record.num_shards, ")"));
    }
    num_shards = record.num_shards;
    if (addresses.size() < static_cast<size_t>(num_shards))
      addresses.resize(num_shards);
    if (record.index >= 0 && record.index < num_shards)
      addresses[record.index] = record.address;
  }
  if (num_shards == 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("no shard of job ", job, " is registered in etcd"));
  }
  std::vector<int> missing;
  for (int i = 0; i < num_shards; ++i) {
    if (addresses[i].empty()) missing.push_back(i);
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "shards ", absl::StrJoin(missing, ", "), " of ", num_shards, " of job ",
        job, " are not registered in etcd"));
  }
  return addresses;
}

}  // namespace

absl::StatusOr<uint32_t> MapShardCount(CoordinationStore& etcd,
                                       const std::string& job) {
  absl::StatusOr<EtcdValue> value = etcd.Get(SlotMapKey(job));
  if (absl::IsNotFound(value.status())) return 0;
  RETURN_IF_ERROR(value.status());
  absl::StatusOr<SlotMap> map = SlotMapFromJson(value->value, 0);
  if (!map.ok()) {
    return absl::DataLossError(
        absl::StrCat("etcd's ", SlotMapKey(job), ": ", map.status().message()));
  }
  return map->num_shards();
}

std::string SlotMapKey(const std::string& job) {
  return absl::StrCat("/ps/", job, "/slot_map");
}

absl::StatusOr<std::vector<std::string>> FindShards(CoordinationStore& etcd,
                                                    const std::string& job,
                                                    absl::Duration wait) {
  RETURN_IF_ERROR(CheckJobName(job));
  const std::string prefix = ShardsPrefix(job);
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    // Whatever is wrong (etcd unreachable, a shard missing, records of an
    // earlier job size that have not expired yet) may mend within the wait.
    absl::StatusOr<uint32_t> num_shards = MapShardCount(etcd, job);
    absl::StatusOr<std::vector<EtcdValue>> values =
        num_shards.ok()
            ? etcd.GetPrefix(prefix)
            : absl::StatusOr<std::vector<EtcdValue>>(num_shards.status());
    absl::StatusOr<std::vector<std::string>> shards =
        values.ok()
            ? ShardsIn(*values, job, prefix, static_cast<int>(*num_shards))
            : absl::StatusOr<std::vector<std::string>>(values.status());
    if (shards.ok() || absl::Now() >= deadline) return shards;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace ps::cluster
