#include "ops/slot_mover.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "net/grpc_status.h"
#include "proto/admin.grpc.pb.h"

namespace ps {
namespace {

using net::AdminChannels;
using net::FromGrpcStatus;

absl::StatusOr<SlotMap> ReadMap(const AdminChannels& shards, size_t shard,
                                absl::Duration timeout) {
  GetSlotMapResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(
      shards.shard(shard).GetSlotMap(shards.Context(timeout).get(),
                                     GetSlotMapRequest(), &response),
      absl::StrCat("reading the slot map of shard ", shard)));
  return SlotMap::FromSpec(response.slot_map());
}

// Every shard's map; the newest, with every shard behind it brought to it.
absl::StatusOr<SlotMap> NewestMapEverywhere(const AdminChannels& shards,
                                            absl::Duration timeout) {
  std::vector<SlotMap> maps;
  for (size_t i = 0; i < shards.size(); ++i) {
    ASSIGN_OR_RETURN(SlotMap map, ReadMap(shards, i, timeout));
    maps.push_back(std::move(map));
  }
  size_t newest = 0;
  for (size_t i = 1; i < maps.size(); ++i) {
    if (maps[i].epoch() > maps[newest].epoch()) newest = i;
  }
  for (size_t i = 0; i < maps.size(); ++i) {
    if (maps[i] == maps[newest]) continue;
    SetSlotMapRequest request;
    request.set_expected_slot_map_epoch(maps[i].epoch());
    *request.mutable_slot_map() = maps[newest].ToSpec();
    SetSlotMapResponse response;
    RETURN_IF_ERROR(FromGrpcStatus(
        shards.shard(i).SetSlotMap(shards.Context(timeout).get(), request,
                                   &response),
        absl::StrCat("bringing shard ", i, " from slot map epoch ",
                     maps[i].epoch(), " to ", maps[newest].epoch())));
  }
  return maps[newest];
}

absl::Status SetMap(const AdminChannels& shards, size_t shard,
                    uint64_t expected_epoch, const SlotMap& next,
                    absl::Duration timeout) {
  SetSlotMapRequest request;
  request.set_expected_slot_map_epoch(expected_epoch);
  *request.mutable_slot_map() = next.ToSpec();
  SetSlotMapResponse response;
  return FromGrpcStatus(shards.shard(shard).SetSlotMap(
                            shards.Context(timeout).get(), request, &response),
                        absl::StrCat("switching shard ", shard,
                                     " to slot map epoch ", next.epoch()));
}

// The target's process is the one that answered first (*instance, set by
// the first answer): one restarted between two calls lost the rows it had
// not made durable, and the move must start again.
absl::Status SameTarget(const SlotMoveOptions& options, uint64_t answered,
                        uint64_t* instance) {
  if (*instance == 0) *instance = answered;
  if (answered == *instance) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "shard ", options.to_shard,
      " restarted during the move (the rows it had not written to disk are "
      "gone): run the move again"));
}

// Writes `request` to the target.
absl::Status WriteToTarget(const AdminChannels& shards,
                           const SlotMoveOptions& options,
                           const WriteSlotRowsRequest& request,
                           const std::string& what, uint64_t* instance) {
  WriteSlotRowsResponse written;
  RETURN_IF_ERROR(FromGrpcStatus(
      shards.shard(options.to_shard)
          .WriteSlotRows(shards.Context(options.call_timeout).get(), request,
                         &written),
      what));
  return SameTarget(options, written.instance(), instance);
}

// Deletes the target's rows of the range's slots that its map gives to
// `source` (what a failed copy from it left).
absl::Status Purge(const AdminChannels& shards, uint32_t source,
                   const SlotMoveOptions& options, uint64_t* instance) {
  PurgeSlotsRequest request;
  request.set_first_slot(options.first_slot);
  request.set_last_slot(options.last_slot);
  request.set_source_shard(source);
  PurgeSlotsResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(
      shards.shard(options.to_shard)
          .PurgeSlots(shards.Context(options.call_timeout).get(), request,
                      &response),
      absl::StrCat("purging slots on shard ", options.to_shard)));
  return SameTarget(options, response.instance(), instance);
}

// Ends the move on `source`; whether it was committed (the map had
// switched) rather than cancelled.
absl::StatusOr<bool> EndMove(const AdminChannels& shards, uint32_t source,
                             bool commit, absl::Duration timeout) {
  EndSlotMoveRequest request;
  request.set_commit(commit);
  EndSlotMoveResponse response;
  RETURN_IF_ERROR(
      FromGrpcStatus(shards.shard(source).EndSlotMove(
                         shards.Context(timeout).get(), request, &response),
                     absl::StrCat(commit ? "ending" : "cancelling",
                                  " the move on shard ", source)));
  return response.committed();
}

// Copies every row of `tables` in the move from `source` to the target;
// how many.
absl::StatusOr<uint64_t> CopyRows(const AdminChannels& shards, uint32_t source,
                                  const std::vector<std::string>& tables,
                                  const SlotMoveOptions& options,
                                  absl::Time* next_progress,
                                  uint64_t* instance) {
  uint64_t rows = 0;
  for (const std::string& table : tables) {
    ReadSlotRowsRequest read;
    read.set_table(table);
    read.set_from_start(true);
    read.set_max_rows(options.rows_per_page);
    bool done = false;
    while (!done) {
      ReadSlotRowsResponse page;
      RETURN_IF_ERROR(FromGrpcStatus(
          shards.shard(source).ReadSlotRows(
              shards.Context(options.call_timeout).get(), read, &page),
          absl::StrCat("reading table ", table, " from shard ", source)));
      done = page.done();
      const size_t count = page.rows().keys().size() / sizeof(uint64_t);
      // The first page declares the table on a target that lacks it (one
      // that joined after it was declared), rows or none.
      if (count == 0 && !read.from_start()) continue;
      WriteSlotRowsRequest write;
      *write.mutable_rows() = page.rows();
      // A page of stored rows, one range of slots: one SST file there.
      write.set_ingest(true);
      RETURN_IF_ERROR(WriteToTarget(
          shards, options, write,
          absl::StrCat("writing table ", table, " to shard ", options.to_shard),
          instance));
      rows += count;
      if (count == 0) continue;
      uint64_t last_key = 0;
      std::memcpy(&last_key,
                  page.rows().keys().data() + (count - 1) * sizeof(uint64_t),
                  sizeof(uint64_t));
      read.set_from_start(false);
      read.set_after(last_key);
      if (options.progress && absl::Now() > *next_progress) {
        std::fprintf(stderr, "move-slots: %llu rows from shard %u so far\n",
                     static_cast<unsigned long long>(rows), source);
        *next_progress = absl::Now() + absl::Seconds(5);
      }
    }
  }
  return rows;
}

// Copies the rows of `tables` changed on `source` since they were last
// read, page by page until none is left (a page that says so), pausing the
// slots' pushes first if `pause`. The rows copied; *left: the changed rows
// the last page of each table said were left, summed.
absl::StatusOr<uint64_t> CopyChangedRows(const AdminChannels& shards,
                                         uint32_t source,
                                         const std::vector<std::string>& tables,
                                         const SlotMoveOptions& options,
                                         bool pause, uint64_t* left,
                                         uint64_t* instance) {
  uint64_t rows = 0;
  *left = 0;
  for (const std::string& table : tables) {
    ReadSlotRowsRequest read;
    read.set_table(table);
    read.set_changed(true);
    read.set_pause(pause);
    read.set_max_rows(options.rows_per_page);
    // Pushes add keys while the round reads: it ends after as many pages
    // as there were keys at its start, unless paused.
    uint64_t pages_left = 1;
    bool first = true;
    while (pages_left-- > 0) {
      ReadSlotRowsResponse page;
      RETURN_IF_ERROR(FromGrpcStatus(
          shards.shard(source).ReadSlotRows(
              shards.Context(options.call_timeout).get(), read, &page),
          absl::StrCat("reading changed rows of table ", table, " from shard ",
                       source)));
      if (first || pause) {
        pages_left = (page.changed_left() + options.rows_per_page - 1) /
                     options.rows_per_page;
        first = false;
      }
      const size_t count = page.rows().keys().size() / sizeof(uint64_t);
      if (count > 0) {
        WriteSlotRowsRequest write;
        *write.mutable_rows() = page.rows();
        RETURN_IF_ERROR(
            WriteToTarget(shards, options, write,
                          absl::StrCat("writing changed rows of table ", table,
                                       " to shard ", options.to_shard),
                          instance));
        rows += count;
      }
      if (page.done()) break;
      if (pages_left == 0) *left += page.changed_left();
    }
  }
  return rows;
}

// Writes every row the target holds back to its disk, with the source's
// push ledgers, if given.
absl::Status MakeDurable(
    const AdminChannels& shards, const SlotMoveOptions& options,
    uint64_t* instance,
    const google::protobuf::RepeatedPtrField<MovedLedger>& ledgers = {}) {
  WriteSlotRowsRequest durable;
  durable.set_durable(true);
  *durable.mutable_moved_ledgers() = ledgers;
  return WriteToTarget(
      shards, options, durable,
      absl::StrCat("making the rows durable on shard ", options.to_shard),
      instance);
}

// The catch-up rounds and the last, paused one (see the header): fills the
// report's changed_rows, rounds, backlog_rows and *paused_at.
absl::Status CatchUp(const AdminChannels& shards, uint32_t source,
                     std::vector<std::string> tables,
                     const SlotMoveOptions& options,
                     SlotMoveReport::Source* report, absl::Time* paused_at,
                     uint64_t* instance) {
  uint64_t last_left = std::numeric_limits<uint64_t>::max();
  for (int round = 0; round < options.catch_up_rounds; ++round) {
    uint64_t left = 0;
    ASSIGN_OR_RETURN(const uint64_t rows,
                     CopyChangedRows(shards, source, tables, options,
                                     /*pause=*/false, &left, instance));
    report->changed_rows += rows;
    ++report->rounds;
    if (options.progress) {
      std::fprintf(stderr,
                   "move-slots: shard %u round %d: %llu changed rows copied, "
                   "%llu left\n",
                   source, round + 1, static_cast<unsigned long long>(rows),
                   static_cast<unsigned long long>(left));
    }
    if (left <= options.final_backlog_rows) break;
    // Pushes change rows as fast as a round copies them: more rounds would
    // not shrink the backlog, only delay the pause.
    if (left > last_left / 2) break;
    last_left = left;
  }
  RETURN_IF_ERROR(MakeDurable(shards, options, instance));
  *paused_at = absl::Now();
  // Its ledger: every push of the slots the source applied.
  ReadSlotRowsResponse paused;
  {
    // Paused first, whatever tables there are (none yet, before training).
    ReadSlotRowsRequest pause;
    pause.set_changed(true);
    pause.set_pause(true);
    RETURN_IF_ERROR(FromGrpcStatus(
        shards.shard(source).ReadSlotRows(
            shards.Context(options.call_timeout).get(), pause, &paused),
        absl::StrCat("pausing the move's pushes on shard ", source)));
    // And the tables declared since the move began, whose rows are all
    // changed ones.
    for (const std::string& table : paused.changed_tables()) {
      if (std::find(tables.begin(), tables.end(), table) == tables.end())
        tables.push_back(table);
    }
  }
  uint64_t left = 0;
  ASSIGN_OR_RETURN(report->backlog_rows,
                   CopyChangedRows(shards, source, tables, options,
                                   /*pause=*/true, &left, instance));
  // Every row the target was sent, durable there before the switch: the
  // backlog's few now, the rest before the pause; and the source's ledger.
  return MakeDurable(shards, options, instance, paused.ledgers());
}

// Gives the slots away in the source's map (`next`, over the map of
// `epoch`). An answer lost after the change was made (or etcd's
// compare-and-swap retried after it succeeded) fails a change that
// happened: the same change again is no change then, and answers OK.
absl::Status SwitchSource(const AdminChannels& shards, uint32_t source,
                          uint64_t epoch, const SlotMap& next,
                          absl::Duration call_timeout) {
  absl::Status switched = SetMap(shards, source, epoch, next, call_timeout);
  for (int again = 0; !switched.ok() && again < 3; ++again) {
    absl::SleepFor(absl::Milliseconds(500));
    switched = SetMap(shards, source, epoch, next, call_timeout);
  }
  return switched;
}

// Ends a move whose switch failed (`switched`) the way it went: cancelled
// while the source still owns the slots (it keeps every update, and the
// target's copy goes), and `switched` returned; committed if its map gave
// them away after all, and OK returned.
absl::Status EndFailedMove(const AdminChannels& shards, uint32_t source,
                           const SlotMoveOptions& options,
                           const absl::Status& switched) {
  absl::StatusOr<bool> committed =
      EndMove(shards, source, /*commit=*/false, options.call_timeout);
  if (!committed.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the move from shard ", source, " failed (", switched.message(),
        ") and could not be ended (", committed.status().message(),
        "): run the command again, which finishes or cancels it"));
  }
  if (*committed) return absl::OkStatus();
  uint64_t any = 0;
  Purge(shards, source, options, &any).IgnoreError();
  return switched;
}

// Moves `source`'s slots of the range; on failure before the switch, the
// move is cancelled there and the target's copy purged.
absl::StatusOr<SlotMoveReport::Source> MoveFrom(const AdminChannels& shards,
                                                uint32_t source,
                                                const SlotMoveOptions& options,
                                                uint64_t* epoch) {
  BeginSlotMoveRequest begin;
  begin.set_first_slot(options.first_slot);
  begin.set_last_slot(options.last_slot);
  begin.set_to_shard(options.to_shard);
  begin.set_lease_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options.lease)));
  BeginSlotMoveResponse begun;
  RETURN_IF_ERROR(FromGrpcStatus(
      shards.shard(source).BeginSlotMove(
          shards.Context(options.call_timeout).get(), begin, &begun),
      absl::StrCat("beginning the move on shard ", source)));
  const absl::Time began = absl::Now();
  absl::Time next_progress = began + absl::Seconds(3);
  SlotMoveReport::Source report;
  report.shard = source;
  absl::Time paused = absl::InfiniteFuture();
  std::vector<std::string> tables(begun.tables().begin(), begun.tables().end());
  absl::StatusOr<SlotMap> from = SlotMap::FromSpec(begun.slot_map());
  // Copies an earlier failed move from this source left on the target.
  absl::Status copied = from.status();
  // The target's process: the same from the purge to the last write.
  uint64_t instance = 0;
  if (copied.ok()) copied = Purge(shards, source, options, &instance);
  absl::StatusOr<uint64_t> rows =
      copied.ok()
          ? CopyRows(shards, source, tables, options, &next_progress, &instance)
          : copied;
  absl::Status switched = rows.status();
  if (switched.ok()) {
    report.rows = *rows;
    switched =
        CatchUp(shards, source, tables, options, &report, &paused, &instance);
  }
  SlotMap next = from.ok() ? from->WithSlotsMovedFrom(options.first_slot,
                                                      options.last_slot, source,
                                                      options.to_shard)
                           : SlotMap::Initial(1);
  if (switched.ok()) {
    switched =
        SwitchSource(shards, source, from->epoch(), next, options.call_timeout);
  }
  if (!switched.ok()) {
    RETURN_IF_ERROR(EndFailedMove(shards, source, options, switched));
  }
  // The source refuses the slots now (its pushes go to the target: the
  // pause is over); the others follow.
  const absl::Time switched_at = absl::Now();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i == source) continue;
    RETURN_IF_ERROR(
        SetMap(shards, i, from->epoch(), next, options.call_timeout));
  }
  if (switched.ok()) {
    RETURN_IF_ERROR(
        EndMove(shards, source, /*commit=*/true, options.call_timeout)
            .status());
  }
  *epoch = next.epoch();
  report.elapsed = absl::Now() - began;
  report.paused = switched_at - paused;
  return report;
}

}  // namespace

absl::StatusOr<SlotMoveReport> MoveSlots(const AdminChannels& shards,
                                         const SlotMoveOptions& options) {
  if (options.first_slot > options.last_slot ||
      options.last_slot >= kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slots=", options.first_slot, "-", options.last_slot,
                     " is not a range of 0-", kNumSlots - 1));
  }
  if (options.to_shard >= shards.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--to=", options.to_shard,
                                                   " is not one of the ",
                                                   shards.size(), " shards"));
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(SlotMap map,
                   NewestMapEverywhere(shards, options.call_timeout));
  SlotMoveReport report;
  report.epoch = map.epoch();
  for (uint32_t source = 0; source < shards.size(); ++source) {
    if (source == options.to_shard ||
        (options.from_shard.has_value() && source != *options.from_shard) ||
        map.SlotsOwned(options.first_slot, options.last_slot, source) == 0) {
      continue;
    }
    ASSIGN_OR_RETURN(SlotMoveReport::Source moved,
                     MoveFrom(shards, source, options, &report.epoch));
    report.rows += moved.rows;
    report.sources.push_back(moved);
  }
  if (report.sources.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options.to_shard, " owns every slot of ", options.first_slot,
        "-", options.last_slot, " already (slot map epoch ", map.epoch(), ")"));
  }
  report.elapsed = absl::Now() - start;
  return report;
}

std::vector<SlotMoveOptions> PlanRebalance(const SlotMap& map,
                                           uint32_t num_shards,
                                           std::optional<uint32_t> leaving) {
  // Each staying shard's share: kNumSlots split as evenly as can be.
  std::vector<uint32_t> staying;
  for (uint32_t shard = 0; shard < num_shards; ++shard) {
    if (shard != leaving) staying.push_back(shard);
  }
  // The slots left over after an even split go to the shards that hold
  // the most already, so that a balanced map plans no move.
  std::stable_sort(staying.begin(), staying.end(), [&](uint32_t a, uint32_t b) {
    return map.SlotsOwned(0, kNumSlots - 1, a) >
           map.SlotsOwned(0, kNumSlots - 1, b);
  });
  std::vector<int64_t> want(num_shards, 0);
  for (size_t i = 0; i < staying.size(); ++i) {
    want[staying[i]] =
        kNumSlots / staying.size() + (i < kNumSlots % staying.size() ? 1 : 0);
  }
  std::vector<int64_t> excess(num_shards, 0);
  for (uint32_t shard = 0; shard < num_shards; ++shard)
    excess[shard] = map.SlotsOwned(0, kNumSlots - 1, shard) - want[shard];
  // Each shard with too many gives, from its lowest slots up, ranges that
  // hold what each shard with too few lacks.
  std::vector<SlotMoveOptions> moves;
  uint32_t taker = 0;
  for (uint32_t giver = 0; giver < num_shards; ++giver) {
    uint32_t slot = 0;
    while (excess[giver] > 0) {
      while (taker < num_shards && excess[taker] >= 0) ++taker;
      if (taker == num_shards) break;
      const int64_t count = std::min(excess[giver], -excess[taker]);
      // The range from `slot` holding `count` of the giver's slots.
      const uint32_t first = slot;
      int64_t found = 0;
      while (found < count) {
        if (map.ShardForSlot(slot) == giver) ++found;
        ++slot;
      }
      SlotMoveOptions move;
      move.first_slot = first;
      move.last_slot = slot - 1;
      move.to_shard = taker;
      move.from_shard = giver;
      moves.push_back(move);
      excess[giver] -= count;
      excess[taker] += count;
    }
  }
  return moves;
}

absl::Status RunMoves(const AdminChannels& shards,
                      const std::vector<SlotMoveOptions>& moves,
                      std::vector<SlotMoveReport>* done) {
  for (const SlotMoveOptions& move : moves) {
    ASSIGN_OR_RETURN(SlotMoveReport report, MoveSlots(shards, move));
    done->push_back(std::move(report));
  }
  return absl::OkStatus();
}

absl::StatusOr<SlotMap> NewestSlotMap(const AdminChannels& shards,
                                      absl::Duration call_timeout) {
  return NewestMapEverywhere(shards, call_timeout);
}

absl::StatusOr<SlotMap> LeaveJob(const AdminChannels& shards, uint32_t shard,
                                 absl::Duration call_timeout) {
  ASSIGN_OR_RETURN(const SlotMap map,
                   NewestMapEverywhere(shards, call_timeout));
  if (shard + 1 != map.num_shards() || shard == 0 ||
      map.SlotsOwned(0, kNumSlots - 1, shard) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard, " cannot leave the job: only the last of its ",
        map.num_shards(), " shards leaves, once it owns no slot"));
  }
  const SlotMap next = map.WithNumShards(shard);
  RETURN_IF_ERROR(SetMap(shards, 0, map.epoch(), next, call_timeout));
  return next;
}

absl::StatusOr<int> CancelSlotMoves(const AdminChannels& shards,
                                    absl::Duration call_timeout) {
  int cancelled = 0;
  absl::Status failed;
  for (size_t i = 0; i < shards.size(); ++i) {
    const absl::Status ended = EndMove(shards, static_cast<uint32_t>(i),
                                       /*commit=*/false, call_timeout)
                                   .status();
    if (ended.ok()) {
      ++cancelled;
    } else if (!absl::IsFailedPrecondition(ended)) {  // none there
      failed.Update(ended);
    }
  }
  RETURN_IF_ERROR(failed);
  return cancelled;
}

}  // namespace ps
