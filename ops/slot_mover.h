// File: ops/slot_mover.h
//
// Moves a range of slots to another shard while workers train (ps_admin
// move-slots), over the shards' admin API (server/slot_move.h). For each
// shard that owns slots of the range (a source), in turn:
//
//   1. the source starts recording the keys that pushes to its slots of the
//      range change (pushes and pulls go on) and writes its rows back;
//   2. the target purges rows it holds of the source's slots of the range
//      (left by a move that failed);
//   3. its rows are read page by page and written into the target's hot
//      tier (the snapshot);
//   4. the rows changed meanwhile are copied again, in rounds, until a
//      round ends with at most final_backlog_rows changed, or with more than
//      half what the round before left (pushes change rows as fast as they
//      are copied), or after catch_up_rounds; then the source pauses the slots'
//      pushes (clients retry them), the last changed rows are copied, and
//      the target makes every row it was sent durable;
//   5. the map switches: SetSlotMap on the source first (from then on it
//      refuses the slots as moved), then on every other shard (under etcd
//      they follow the job's map themselves);
//   6. the source ends the move, deleting its copies.
//
// A failure before the switch cancels the move on the source (the source
// keeps every update) and purges the target's partial copy; a failed
// switch is read back from the source first (its answer may have been lost
// after the change). A source that dies holds its slots still, and its
// pause ends with its lease. The shards that route by an older map are
// brought to the newest one first, which finishes the switch of a move
// that stopped after its source's; the source commits such a move at its
// next Begin or --cancel.
//
// Pushes to the moving slots wait (clients retry) only from the last round
// to the switch; SlotMoveReport says how long, and how many rows each
// round copied.

#ifndef PS_OPS_SLOT_MOVER_H_
#define PS_OPS_SLOT_MOVER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/slot_map.h"
#include "net/admin_channel.h"

namespace ps {

struct SlotMoveOptions {
  // The slots first_slot..last_slot (inclusive) go to shard to_shard.
  uint32_t first_slot = 0;
  uint32_t last_slot = 0;
  uint32_t to_shard = 0;
  // Only the slots of this shard move (nullopt: every other shard's).
  std::optional<uint32_t> from_shard;
  // A source cancels its move by itself when no call comes for this long.
  // Default: 30 s.
  absl::Duration lease = absl::Seconds(30);
  // Rows per page read from a source and written to the target. Default:
  // 4096.
  uint32_t rows_per_page = 4096;
  // The catch-up rounds stop once one ends with at most this many changed
  // rows left, which are copied with the slots' pushes paused. Default:
  // 2048.
  uint64_t final_backlog_rows = 2048;
  // Most catch-up rounds before pausing whatever is left. Default: 8.
  int catch_up_rounds = 8;
  // Deadline of each call. Default: 60 s.
  absl::Duration call_timeout = absl::Seconds(60);
  // Print what is happening to stderr, every few seconds.
  bool progress = false;
};

struct SlotMoveReport {
  struct Source {
    uint32_t shard = 0;
    // Rows copied in the snapshot.
    uint64_t rows = 0;
    // Rows copied again in the catch-up rounds, and in the last one (with
    // the pushes paused).
    uint64_t changed_rows = 0;
    int rounds = 0;
    uint64_t backlog_rows = 0;
    // The whole move, and the part of it the slots' pushes waited: from
    // the pause to the source's switch (after it they go to the target).
    absl::Duration elapsed;
    absl::Duration paused;
  };
  std::vector<Source> sources;
  uint64_t rows = 0;
  absl::Duration elapsed;
  // The map's epoch once every source switched.
  uint64_t epoch = 0;
};

// INVALID_ARGUMENT for a range past the slots or a target not among
// `shards`; FAILED_PRECONDITION when the target owns every slot of the
// range already, or a move is under way; the shards' errors (each source
// whose move failed cancelled).
absl::StatusOr<SlotMoveReport> MoveSlots(const net::AdminChannels& shards,
                                         const SlotMoveOptions& options);

// The moves that give every shard of `shards` but `leaving` (nullopt:
// none) an equal share of the slots, one contiguous range of one source
// each: ps_admin rebalance (every shard) and drain-shard (all of
// `leaving`'s slots to the others). Empty when the map has them already.
std::vector<SlotMoveOptions> PlanRebalance(const SlotMap& map,
                                           uint32_t num_shards,
                                           std::optional<uint32_t> leaving);

// Runs `moves` in order (each as MoveSlots()), stopping at the first that
// fails: the reports of those done, in `done`, and that failure.
absl::Status RunMoves(const net::AdminChannels& shards,
                      const std::vector<SlotMoveOptions>& moves,
                      std::vector<SlotMoveReport>* done);

// The newest map any of `shards` routes by.
absl::StatusOr<SlotMap> NewestSlotMap(const net::AdminChannels& shards,
                                      absl::Duration call_timeout);

// Under --etcd: the job without its last shard, `shard`, which owns no slot
// (after drain-shard), so that workers stop counting it and it can stop;
// the new map. FAILED_PRECONDITION unless `shard` is the last and owns no
// slot; the shards' errors.
absl::StatusOr<SlotMap> LeaveJob(const net::AdminChannels& shards,
                                 uint32_t shard, absl::Duration call_timeout);

// Ends the moves under way on every shard (ps_admin move-slots --cancel):
// cancelled where the map has not switched (pushes to the slots go on at
// the source), committed where it has. How many shards had one; the first
// error after trying every shard.
absl::StatusOr<int> CancelSlotMoves(const net::AdminChannels& shards,
                                    absl::Duration call_timeout);

}  // namespace ps

#endif  // PS_OPS_SLOT_MOVER_H_
