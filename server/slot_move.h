// File: server/slot_move.h
//
// SlotMoveSource is the one slot move out of this shard that may be under
// way (ps_admin move-slots, through the admin API): which slots, to which
// shard, until when. While it lasts, pulls go on, and so do pushes of keys
// in those slots at first: the keys they change are recorded, per table,
// while the rows are read page by page (the first copy), and read again in
// rounds (ReadChanged()) that catch the target up. Then the move pauses
// the slots' pushes (refused as transient: clients retry them) for the
// last round, the backlog, and the map may switch only once paused with
// no changed row left to copy. Past `max_changed_keys` recorded, the
// slots pause at once, which bounds the memory. The move ends by commit (once
// the map gives the slots away, the shard deletes its copies) or by cancel, or
// by itself when no call about it comes within its lease, so that a ps_admin
// that died does not pause the slots for good. While the map switches
// (SetSlotMap asks MayGiveAway() first) the lease does not run, and once the
// map gives the slots away the move can only be committed: End() without commit
// commits it then, and the next Begin() commits it first. A map change that
// gives away slots no move here is copying is refused unless the caller says
// it moves no rows.
//
// Does not own the store or the ownership, which must outlive it.
// Thread-safe.

#ifndef PS_SERVER_SLOT_MOVE_H_
#define PS_SERVER_SLOT_MOVE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/slot_map.h"
#include "cluster/slot_ownership.h"
#include "embedding/embedding_store.h"

namespace ps::server {

class SlotMoveSource {
 public:
  SlotMoveSource(embedding::EmbeddingStore* store,
                 cluster::SlotOwnership* slots, uint32_t shard_index,
                 size_t max_changed_keys = 1 << 20)
      : store_(store),
        slots_(slots),
        shard_index_(shard_index),
        max_changed_keys_(max_changed_keys) {}

  // Starts recording the keys pushes change in the slots of first..last
  // this shard owns (from the pushes after those in flight), writes its
  // rows back, and returns the map the move starts from. FAILED_PRECONDITION
  // while another move is under way or when this shard owns none of the slots;
  // INVALID_ARGUMENT for a range past the slots or a move to this shard itself.
  absl::StatusOr<std::shared_ptr<const SlotMap>> Begin(uint32_t first_slot,
                                                       uint32_t last_slot,
                                                       uint32_t to_shard,
                                                       absl::Duration lease);

  // Up to `max_rows` rows of `table` in the move's slots after `after`
  // (SlotMigration::ReadSlotRows); renews the lease. FAILED_PRECONDITION
  // without a move; ABORTED once its lease ran out.
  absl::StatusOr<std::vector<embedding::SlotRow>> Read(
      const std::string& table, std::optional<uint64_t> after, size_t max_rows,
      bool* done);

  // Up to `max_rows` rows of `table` whose keys were pushed since the last
  // call (or the move's beginning), read after they were applied; those
  // keys are then no longer recorded until pushed again. `pause` first
  // pauses the slots' pushes (after those in flight) for the rest of the
  // move. *left: recorded keys of `table` not returned. An empty `table`
  // only pauses. Renews the lease; errors as Read().
  absl::StatusOr<std::vector<embedding::SlotRow>> ReadChanged(
      const std::string& table, bool pause, size_t max_rows, uint64_t* left);

  // The tables with changed keys still to read (a table declared after
  // the move began has no others).
  std::vector<std::string> ChangedTables() const;

  struct Ended {
    // The move was committed: the map gave its slots away.
    bool committed = false;
    // This shard's rows of the slots, deleted.
    uint64_t rows_deleted = 0;
  };

  // Ends the move: cancelled (pushes of its slots go on here) while the map
  // still gives the slots to this shard, else committed (this shard's rows
  // of the slots the map gave away are deleted; their pushes are refused
  // as moved). `commit` asks for the second: FAILED_PRECONDITION while the
  // map has not switched. FAILED_PRECONDITION without a move; UNAVAILABLE
  // while the map is being switched (retry).
  absl::StatusOr<Ended> End(bool commit);

  // OK if a map change to `next` may take slots of this shard away: those
  // slots go to the move's target and the move's lease holds (it stops
  // running until AfterChange()), or no slot goes, or `without_move` lets
  // slots in no move go (an administrator's change, which moves no rows).
  // FAILED_PRECONDITION for slots in no move without `without_move` (a
  // move's switch retried against a source restarted since its copy, which
  // took pushes the target lacks), and for slots of a move that the change
  // gives to another shard than the move's target; ABORTED for slots of a
  // move whose lease ran out (pushes went on meanwhile, which the target
  // does not have). *switching says whether this change is the move's
  // switch; then AfterChange() must follow it. UNAVAILABLE while another
  // change switches the move.
  absl::Status MayGiveAway(const SlotMap& next, bool without_move,
                           bool* switching);

  // After the switch MayGiveAway() allowed was made or failed: if the map
  // still gives the move's slots to this shard, its lease runs again.
  void AfterChange();

  // Whether a push of `keys` (this shard's) may be applied now: false once
  // the move paused their slots. Then, once it was applied, Record() notes
  // those of `table` in the move's slots for copying again; both with the
  // ownership's push_lock() held (shared) from before Admit() to after
  // Record().
  bool Admit(absl::Span<const uint64_t> keys);
  void Record(const std::string& table, absl::Span<const uint64_t> keys);

  // "slots 0-99 moving to shard 2", for the refusal.
  std::string Describe() const;

 private:
  struct Move {
    uint32_t first_slot = 0;
    uint32_t last_slot = 0;
    uint32_t to_shard = 0;
    absl::Duration lease;
    absl::Time deadline;
    // The map when the move began.
    std::shared_ptr<const SlotMap> from;
    // A map change that gives the slots away is being made: the lease does
    // not run.
    bool switching = false;
    // Pushes of the slots are refused (the last round, or too many keys).
    bool paused = false;
    // Keys pushed since they were last read, by table.
    absl::flat_hash_map<std::string, absl::flat_hash_set<uint64_t>> changed;
    size_t changed_keys = 0;
  };

  // The move, if under way and its lease holds (renewed when `renew`).
  absl::Status CheckLive(bool renew) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `map` gives away a slot of the move that was this shard's.
  bool GivenAway(const Move& move, const SlotMap& map) const;
  // Deletes this shard's rows of the slots of `move` that `map` does not
  // give it.
  absl::StatusOr<uint64_t> DeleteGivenAway(const Move& move,
                                           const SlotMap& map);
  std::string DescribeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A move is under way and its lease holds (or it is switching).
  bool LiveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `key`'s slot is in the move's range. REQUIRES: a move.
  bool MovingLocked(uint64_t key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  embedding::EmbeddingStore* const store_;
  cluster::SlotOwnership* const slots_;
  const uint32_t shard_index_;
  const size_t max_changed_keys_;
  mutable absl::Mutex mu_;
  std::optional<Move> move_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_SLOT_MOVE_H_
