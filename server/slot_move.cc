#include "server/slot_move.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::server {

bool SlotMoveSource::GivenAway(const Move& move, const SlotMap& map) const {
  for (uint32_t slot = move.first_slot; slot <= move.last_slot; ++slot) {
    if (move.from->ShardForSlot(slot) == shard_index_ &&
        map.ShardForSlot(slot) != shard_index_) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<uint64_t> SlotMoveSource::DeleteGivenAway(const Move& move,
                                                         const SlotMap& map) {
  const uint32_t self = shard_index_;
  ASSIGN_OR_RETURN(const uint64_t deleted,
                   store_->slots().DeleteSlotRows([&](uint32_t slot) {
                     return slot >= move.first_slot && slot <= move.last_slot &&
                            move.from->ShardForSlot(slot) == self &&
                            map.ShardForSlot(slot) != self;
                   }));
  LOG(INFO) << "move of slots " << move.first_slot << "-" << move.last_slot
            << " to shard " << move.to_shard << " done: " << deleted
            << " rows deleted here";
  return deleted;
}

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
  std::optional<Move> unfinished;
  {
    // After the pushes in flight; none of the slots' is applied from here.
    absl::WriterMutexLock no_pushes(&slots_->push_lock());
    absl::MutexLock lock(&mu_);
    map = slots_->current();
    if (move_.has_value()) {
      if (move_->switching) {
        return absl::UnavailableError(
            "the slot map is being switched for the move under way; retry");
      }
      if (GivenAway(*move_, *map)) {
        // An earlier move whose map switched but that was never ended: it
        // is committed below, before this one copies anything.
        unfinished = move_;
      } else if (CheckLive(/*renew=*/false).ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "a move of ", DescribeLocked(),
            " is under way (ps_admin move-slots --cancel ends it)"));
      }
    }
    if (map->SlotsOwned(first_slot, last_slot, shard_index_) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", shard_index_, " owns none of slots ", first_slot, "-",
          last_slot, " (slot map epoch ", map->epoch(), ")"));
    }
    move_.emplace(Move());
    move_->first_slot = first_slot;
    move_->last_slot = last_slot;
    move_->to_shard = to_shard;
    move_->lease = lease;
    move_->deadline = absl::Now() + lease;
    move_->from = map;
  }
  if (unfinished.has_value()) {
    if (absl::Status deleted = DeleteGivenAway(*unfinished, *map).status();
        !deleted.ok()) {
      // The new move never began; the unfinished one is still to commit.
      absl::MutexLock lock(&mu_);
      move_ = unfinished;
      return deleted;
    }
  }
  LOG(INFO) << "moving " << Describe()
            << ": their pushes go on, the keys they change recorded";
  // What is on disk is the rows from here on.
  if (absl::Status flushed = store_->Flush(); !flushed.ok()) {
    absl::MutexLock lock(&mu_);
    move_.reset();
    return flushed;
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckLive(/*renew=*/true));
  return map;
}

absl::Status SlotMoveSource::CheckLive(bool renew) {
  if (!move_.has_value()) {
    return absl::FailedPreconditionError("no slot move is under way here");
  }
  if (!move_->switching && absl::Now() > move_->deadline) {
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
  return store_->slots().ReadSlotRows(
      table,
      [&](uint32_t slot) {
        return slot >= first_slot && slot <= last_slot &&
               map->ShardForSlot(slot) == self;
      },
      after, max_rows, done);
}

absl::StatusOr<std::vector<embedding::SlotRow>> SlotMoveSource::ReadChanged(
    const std::string& table, bool pause, size_t max_rows, uint64_t* left) {
  std::vector<uint64_t> keys;
  {
    // After the pushes in flight, whose keys are recorded: what is read
    // below holds them.
    absl::WriterMutexLock no_pushes(&slots_->push_lock());
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckLive(/*renew=*/true));
    if (pause && !move_->paused) {
      LOG(INFO) << DescribeLocked() << ": pushes to them wait for the last "
                << move_->changed_keys << " changed rows";
      move_->paused = true;
    }
    auto it = move_->changed.find(table);
    if (it != move_->changed.end()) {
      absl::flat_hash_set<uint64_t>& changed = it->second;
      // Not begin() each time: after erasures it scans past every one.
      for (auto key = changed.begin();
           key != changed.end() && keys.size() < max_rows;) {
        keys.push_back(*key);
        changed.erase(key++);
      }
      move_->changed_keys -= keys.size();
      *left = changed.size();
      if (changed.empty()) move_->changed.erase(it);
    } else {
      *left = 0;
    }
  }
  if (keys.empty()) return std::vector<embedding::SlotRow>();
  // As they are now, which includes every push recorded above.
  absl::StatusOr<std::vector<embedding::SlotRow>> rows =
      store_->slots().ReadRowsOfKeys(table, keys);
  if (!rows.ok()) {
    // Still to copy: the map must not switch without them.
    absl::MutexLock lock(&mu_);
    if (move_.has_value()) {
      absl::flat_hash_set<uint64_t>& changed = move_->changed[table];
      for (uint64_t key : keys)
        if (changed.insert(key).second) ++move_->changed_keys;
    }
  }
  return rows;
}

absl::StatusOr<SlotMoveSource::Ended> SlotMoveSource::End(bool commit) {
  const std::shared_ptr<const SlotMap> map = slots_->current();
  Move ended;
  {
    absl::MutexLock lock(&mu_);
    if (!move_.has_value()) {
      return absl::FailedPreconditionError("no slot move is under way here");
    }
    const bool given_away = GivenAway(*move_, *map);
    if (commit && !given_away) {
      return absl::FailedPreconditionError(
          absl::StrCat("the slot map (epoch ", map->epoch(),
                       ") still gives the move's slots to this shard: switch "
                       "it before committing"));
    }
    if (move_->switching) {
      return absl::UnavailableError(
          "the slot map is being switched for this move; retry");
    }
    ended = *move_;
    move_.reset();
    commit = given_away;
  }
  if (!commit) {
    LOG(INFO) << "move of slots " << ended.first_slot << "-" << ended.last_slot
              << " cancelled: pushes to them go on here";
    return Ended{false, 0};
  }
  ASSIGN_OR_RETURN(const uint64_t deleted, DeleteGivenAway(ended, *map));
  return Ended{true, deleted};
}

absl::Status SlotMoveSource::MayGiveAway(const SlotMap& next, bool without_move,
                                         bool* switching) {
  *switching = false;
  const std::shared_ptr<const SlotMap> map = slots_->current();
  absl::MutexLock lock(&mu_);
  bool gives_away = false;
  for (uint32_t slot = 0; slot < kNumSlots; ++slot) {
    if (map->ShardForSlot(slot) != shard_index_ ||
        next.ShardForSlot(slot) == shard_index_) {
      continue;
    }
    const bool moving = move_.has_value() && slot >= move_->first_slot &&
                        slot <= move_->last_slot;
    if (!moving) {
      if (without_move) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "the change gives slot ", slot, " of shard ", shard_index_,
          " to shard ", next.ShardForSlot(slot),
          ", but no move of it is under way on this process (one started "
          "before this shard last restarted ended then, and pushes since are "
          "not on the target): move the slots again"));
    }
    if (next.ShardForSlot(slot) != move_->to_shard) {
      return absl::FailedPreconditionError(
          absl::StrCat("slot ", slot, " is moving to shard ", move_->to_shard,
                       ", which holds its rows; the change gives it to shard ",
                       next.ShardForSlot(slot)));
    }
    gives_away = true;
  }
  if (!gives_away) return absl::OkStatus();
  if (move_->switching) {
    return absl::UnavailableError(
        "the slot map is being switched for this move already; retry");
  }
  RETURN_IF_ERROR(CheckLive(/*renew=*/false));
  // The target must hold every update before the slots are its.
  if (!move_->paused || move_->changed_keys > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the move of ", DescribeLocked(), " has ",
                     move_->paused ? "" : "not paused its pushes and has ",
                     move_->changed_keys,
                     " changed rows the target does not have: read them first "
                     "(ReadSlotRows with changed and pause)"));
  }
  move_->switching = true;
  *switching = true;
  return absl::OkStatus();
}

void SlotMoveSource::AfterChange() {
  const std::shared_ptr<const SlotMap> map = slots_->current();
  absl::MutexLock lock(&mu_);
  if (!move_.has_value() || !move_->switching) return;
  move_->switching = false;
  // Not switched after all: the lease runs again, from now.
  if (!GivenAway(*move_, *map)) move_->deadline = absl::Now() + move_->lease;
}

bool SlotMoveSource::Admit(absl::Span<const uint64_t> keys) {
  absl::MutexLock lock(&mu_);
  if (!LiveLocked() || !move_->paused) return true;
  for (uint64_t key : keys) {
    if (MovingLocked(key)) return false;
  }
  return true;
}

void SlotMoveSource::Record(const std::string& table,
                            absl::Span<const uint64_t> keys) {
  absl::MutexLock lock(&mu_);
  if (!LiveLocked()) return;
  absl::flat_hash_set<uint64_t>* changed = nullptr;
  for (uint64_t key : keys) {
    if (!MovingLocked(key)) continue;
    if (changed == nullptr) changed = &move_->changed[table];
    if (changed->insert(key).second) ++move_->changed_keys;
  }
  if (!move_->paused && move_->changed_keys > max_changed_keys_) {
    LOG(WARNING) << DescribeLocked() << ": more than " << max_changed_keys_
                 << " changed rows to copy; pushes to them wait from now";
    move_->paused = true;
  }
}

std::vector<std::string> SlotMoveSource::ChangedTables() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> tables;
  if (move_.has_value()) {
    for (const auto& [table, keys] : move_->changed)
      if (!keys.empty()) tables.push_back(table);
  }
  std::sort(tables.begin(), tables.end());
  return tables;
}

bool SlotMoveSource::LiveLocked() const {
  return move_.has_value() &&
         (move_->switching || absl::Now() <= move_->deadline);
}

bool SlotMoveSource::MovingLocked(uint64_t key) const {
  const uint32_t slot = SlotForKey(key);
  return slot >= move_->first_slot && slot <= move_->last_slot;
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
