#include "server/slot_move.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::server {

absl::StatusOr<std::shared_ptr<const SlotMap>> SlotMoveSource::Begin(
    uint32_t first_slot, uint32_t last_slot, uint32_t to_shard,
    absl::Duration lease) {
  if (first_slot > last_slot || last_slot >= kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots ", first_slot, "-", last_slot,
                     " are not a range of 0-", kNumSlots - 1));
  }
  if (to_shard == shard_index_ || to_shard >= slots_->num_shards()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot move slots from shard ", shard_index_,
                     " to shard ", to_shard, " of ", slots_->num_shards()));
  }
  std::shared_ptr<const SlotMap> map;
  {
    // After the pushes in flight; none of the slots' is applied from here.
    absl::WriterMutexLock no_pushes(&slots_->push_lock());
    absl::MutexLock lock(&mu_);
    if (move_.has_value() && CheckLive(/*renew=*/false).ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("a move of ", DescribeLocked(),
                       " is under way (ps_admin move-slots --cancel ends it)"));
    }
    map = slots_->current();
    if (map->SlotsOwned(first_slot, last_slot, shard_index_) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", shard_index_, " owns none of slots ", first_slot, "-",
          last_slot, " (slot map epoch ", map->epoch(), ")"));
    }
    move_ = Move{first_slot, last_slot,           to_shard,
                 lease,      absl::Now() + lease, false};
  }
  LOG(INFO) << "moving " << Describe() << ": pushes to them wait";
  // What is on disk is the rows from here on.
  if (absl::Status flushed = store_->Flush(); !flushed.ok()) {
    absl::MutexLock lock(&mu_);
    move_.reset();
    return flushed;
  }
  return map;
}

absl::Status SlotMoveSource::CheckLive(bool renew) {
  if (!move_.has_value()) {
    return absl::FailedPreconditionError("no slot move is under way here");
  }
  if (!move_->switched && absl::Now() > move_->deadline) {
    return absl::AbortedError(absl::StrCat(
        "the move of slots ", move_->first_slot, "-", move_->last_slot,
        " was not heard from for its lease; pushes to the slots went on "
        "here: start it again"));
  }
  if (renew) move_->deadline = absl::Now() + move_->lease;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<embedding::SlotRow>> SlotMoveSource::Read(
    const std::string& table, std::optional<uint64_t> after, size_t max_rows,
    bool* done) {
  uint32_t first_slot = 0;
  uint32_t last_slot = 0;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckLive(/*renew=*/true));
    first_slot = move_->first_slot;
    last_slot = move_->last_slot;
  }
  const std::shared_ptr<const SlotMap> map = slots_->current();
  const uint32_t self = shard_index_;
  return store_->ReadSlotRows(
      table,
      [&](uint32_t slot) {
        return slot >= first_slot && slot <= last_slot &&
               map->ShardForSlot(slot) == self;
      },
      after, max_rows, done);
}

absl::StatusOr<uint64_t> SlotMoveSource::End(bool commit) {
  Move ended;
  {
    absl::MutexLock lock(&mu_);
    if (!move_.has_value()) {
      return absl::FailedPreconditionError("no slot move is under way here");
    }
    ended = *move_;
    move_.reset();
  }
  if (!commit) {
    LOG(INFO) << "move of slots " << ended.first_slot << "-" << ended.last_slot
              << " cancelled: pushes to them go on here";
    return 0;
  }
  const std::shared_ptr<const SlotMap> map = slots_->current();
  const uint32_t self = shard_index_;
  ASSIGN_OR_RETURN(
      const uint64_t deleted, store_->DeleteSlotRows([&](uint32_t slot) {
        return slot >= ended.first_slot && slot <= ended.last_slot &&
               map->ShardForSlot(slot) != self;
      }));
  LOG(INFO) << "move of slots " << ended.first_slot << "-" << ended.last_slot
            << " to shard " << ended.to_shard << " done: " << deleted
            << " rows deleted here";
  return deleted;
}

absl::Status SlotMoveSource::MayGiveAway(const SlotMap& next) {
  const std::shared_ptr<const SlotMap> map = slots_->current();
  absl::MutexLock lock(&mu_);
  if (!move_.has_value()) return absl::OkStatus();
  for (uint32_t slot = move_->first_slot; slot <= move_->last_slot; ++slot) {
    if (map->ShardForSlot(slot) == shard_index_ &&
        next.ShardForSlot(slot) != shard_index_) {
      RETURN_IF_ERROR(CheckLive(/*renew=*/false));
      move_->switched = true;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

bool SlotMoveSource::Pauses(absl::Span<const uint64_t> keys) const {
  absl::MutexLock lock(&mu_);
  if (!move_.has_value() ||
      (!move_->switched && absl::Now() > move_->deadline)) {
    return false;
  }
  for (uint64_t key : keys) {
    const uint32_t slot = SlotForKey(key);
    if (slot >= move_->first_slot && slot <= move_->last_slot) return true;
  }
  return false;
}

std::string SlotMoveSource::Describe() const {
  absl::MutexLock lock(&mu_);
  return DescribeLocked();
}

std::string SlotMoveSource::DescribeLocked() const {
  if (!move_.has_value()) return "no slots";
  return absl::StrCat("slots ", move_->first_slot, "-", move_->last_slot,
                      " moving to shard ", move_->to_shard);
}

}  // namespace ps::server
