#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/exit_codes.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "ops/admin_command.h"
#include "ops/slot_mover.h"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {
namespace {

// Ranges shown per shard in text; --json lists them all.
constexpr size_t kRangesShown = 8;

struct ShardMap {
  ShardAnswer answer;
  std::optional<SlotMap> map;
};

// Every shard's map, asked all at once.
std::vector<ShardMap> ReadEveryShardsMap(const Cluster& cluster) {
  std::vector<ShardMap> maps;
  for (size_t i = 0; i < cluster.servers.size(); ++i)
    maps.push_back({ShardAnswer(cluster.servers[i]), std::nullopt});
  cluster.channels->OnEveryShard([&](size_t i) {
    ps::GetSlotMapResponse response;
    ShardMap& shard = maps[i];
    shard.answer.status = cluster.channels->shard(i).GetSlotMap(
        cluster.Context().get(), ps::GetSlotMapRequest(), &response);
    if (!shard.answer.status.ok()) return;
    absl::StatusOr<SlotMap> map = SlotMap::FromSpec(response.slot_map());
    if (!map.ok()) {
      shard.answer.status =
          grpc::Status(grpc::StatusCode::INTERNAL,
                       absl::StrCat("the shard's slot map is not one: ",
                                    map.status().message()));
      return;
    }
    shard.map = *std::move(map);
  });
  return maps;
}

// The map of the newest epoch among `maps`; nullptr if none answered.
const SlotMap* Newest(const std::vector<ShardMap>& maps) {
  const SlotMap* newest = nullptr;
  for (const ShardMap& shard : maps) {
    if (shard.map.has_value() &&
        (newest == nullptr || shard.map->epoch() > newest->epoch())) {
      newest = &*shard.map;
    }
  }
  return newest;
}

uint32_t SlotCount(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  uint32_t slots = 0;
  for (const auto& [first, last] : ranges) slots += last - first + 1;
  return slots;
}

}  // namespace

absl::StatusOr<SlotMap> ReadSlotMap(const Cluster& cluster) {
  std::vector<ShardMap> maps = ReadEveryShardsMap(cluster);
  if (const SlotMap* newest = Newest(maps)) return *newest;
  return absl::UnavailableError(absl::StrCat(
      "no shard answered with its slot map (", maps.front().answer.server, ": ",
      maps.front().answer.status.error_message(), ")"));
}

// `slots`: the slot map as ranges per shard, with its epoch; every shard is
// asked, and shards that route by an older epoch are named.
int Slots(const Cluster& cluster) {
  std::vector<ShardMap> maps = ReadEveryShardsMap(cluster);
  std::vector<ShardAnswer> answers;
  for (const ShardMap& shard : maps) answers.push_back(shard.answer);
  const SlotMap* newest = Newest(maps);
  if (newest == nullptr) return ReportFailures("slots", answers);
  Json shards = Json::array();
  for (size_t i = 0; i < maps.size(); ++i) {
    const auto ranges = newest->RangesOf(static_cast<uint32_t>(i));
    Json pairs = Json::array();
    for (const auto& [first, last] : ranges) pairs.push_back({first, last});
    Json shard = {{"shard", i},
                  {"server", cluster.servers[i]},
                  {"slots", SlotCount(ranges)},
                  {"ranges", std::move(pairs)}};
    if (maps[i].map.has_value()) shard["epoch"] = maps[i].map->epoch();
    shards.push_back(std::move(shard));
  }
  if (cluster.options.json) {
    std::printf("%s\n", Dump({{"epoch", newest->epoch()},
                              {"num_slots", kNumSlots},
                              {"shards", std::move(shards)}})
                            .c_str());
    return ReportFailures("slots", answers);
  }
  std::printf("slot map epoch %llu, %u slots\n",
              static_cast<unsigned long long>(newest->epoch()), kNumSlots);
  for (size_t i = 0; i < maps.size(); ++i) {
    auto ranges = newest->RangesOf(static_cast<uint32_t>(i));
    const size_t count = ranges.size();
    const uint32_t slots = SlotCount(ranges);
    if (count > kRangesShown) ranges.resize(kRangesShown);
    std::string shown = FormatSlotRanges(ranges);
    if (count > kRangesShown) {
      absl::StrAppend(&shown, ",... (", count, " ranges; --json lists all)");
    }
    std::printf("shard %zu %s: %u slots%s%s\n", i, cluster.servers[i].c_str(),
                slots, slots == 0 ? "" : " ", shown.c_str());
    if (maps[i].map.has_value() && maps[i].map->epoch() != newest->epoch()) {
      std::printf("  (this shard still routes by epoch %llu)\n",
                  static_cast<unsigned long long>(maps[i].map->epoch()));
    }
  }
  return ReportFailures("slots", answers);
}

namespace {

// The --move_* flags and the command's timeout and output, in `move`.
void SetMoveFlags(const CommandOptions& options, SlotMoveOptions* move) {
  move->lease = options.move_lease;
  move->rows_per_page = options.move_page_rows;
  move->final_backlog_rows = options.move_final_backlog_rows;
  move->catch_up_rounds = options.move_catch_up_rounds;
  move->call_timeout = std::max(options.timeout, absl::Seconds(60));
  move->progress = !options.json;
}

Json SourceJson(const SlotMoveReport::Source& source) {
  return {{"shard", source.shard},
          {"rows", source.rows},
          {"changed_rows", source.changed_rows},
          {"rounds", source.rounds},
          {"backlog_rows", source.backlog_rows},
          {"seconds", absl::ToDoubleSeconds(source.elapsed)},
          {"paused_seconds", absl::ToDoubleSeconds(source.paused)}};
}

void PrintSource(const SlotMoveReport::Source& source) {
  std::printf(
      "shard %u: %llu rows, then %llu changed meanwhile in %d round%s and "
      "%llu with its pushes to the slots paused %.3f s\n",
      source.shard, static_cast<unsigned long long>(source.rows),
      static_cast<unsigned long long>(source.changed_rows), source.rounds,
      source.rounds == 1 ? "" : "s",
      static_cast<unsigned long long>(source.backlog_rows),
      absl::ToDoubleSeconds(source.paused));
}

// Prints what `moves` did (ps_admin rebalance, drain-shard); the exit code.
// `after`, if set, runs once every move is done, adding to the JSON summary
// (and printing its own lines without --json).
int ReportMoves(
    const Cluster& cluster, const std::string& command,
    const std::vector<SlotMoveOptions>& moves,
    const std::function<absl::Status(Json* summary)>& after = nullptr) {
  // The shards balanced over, before anything moves: one that started
  // but had not registered yet is not among them.
  Json shards = Json::array();
  std::vector<std::string> listed;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    shards.push_back(cluster.servers[i]);
    listed.push_back(absl::StrCat(i, "=", cluster.servers[i]));
  }
  if (!cluster.options.json) {
    std::printf("%s over %zu shard%s: %s\n", command.c_str(),
                cluster.servers.size(), cluster.servers.size() == 1 ? "" : "s",
                absl::StrJoin(listed, " ").c_str());
    std::fflush(stdout);
  }
  std::vector<SlotMoveReport> reports;
  absl::Status moved = RunMoves(*cluster.channels, moves, &reports);
  uint64_t epoch = 0;
  if (reports.empty()) {
    absl::StatusOr<SlotMap> map =
        NewestSlotMap(*cluster.channels, cluster.options.timeout);
    if (map.ok()) epoch = map->epoch();
  }
  // What was done is printed even when a later move failed.
  Json done = Json::array();
  for (size_t i = 0; i < reports.size(); ++i) {
    const SlotMoveReport& report = reports[i];
    epoch = report.epoch;
    const double seconds = absl::ToDoubleSeconds(report.elapsed);
    done.push_back({{"first_slot", moves[i].first_slot},
                    {"last_slot", moves[i].last_slot},
                    {"from_shard", *moves[i].from_shard},
                    {"to_shard", moves[i].to_shard},
                    {"rows", report.rows},
                    {"seconds", seconds},
                    {"sources", Json::array()}});
    for (const SlotMoveReport::Source& source : report.sources)
      done.back()["sources"].push_back(SourceJson(source));
    if (!cluster.options.json) {
      std::printf("slots %u-%u of shard %u to shard %u: %llu rows in %.2f s\n",
                  moves[i].first_slot, moves[i].last_slot, *moves[i].from_shard,
                  moves[i].to_shard,
                  static_cast<unsigned long long>(report.rows), seconds);
      for (const SlotMoveReport::Source& source : report.sources)
        PrintSource(source);
    }
  }
  Json summary = {{"command", command},
                  {"shards", shards},
                  {"moves", done},
                  {"planned", moves.size()},
                  {"epoch", epoch}};
  if (!cluster.options.json) {
    std::printf("%zu of %zu move%s done, slot map epoch %llu\n", reports.size(),
                moves.size(), moves.size() == 1 ? "" : "s",
                static_cast<unsigned long long>(epoch));
  }
  if (moved.ok() && after) moved = after(&summary);
  if (cluster.options.json) std::printf("%s\n", Dump(summary).c_str());
  return moved.ok() ? 0 : Fail(moved);
}

// The newest map and the moves PlanRebalance() makes of it.
absl::StatusOr<std::vector<SlotMoveOptions>> Plan(
    const Cluster& cluster, std::optional<uint32_t> leaving) {
  ASSIGN_OR_RETURN(SlotMap map,
                   NewestSlotMap(*cluster.channels, cluster.options.timeout));
  std::vector<SlotMoveOptions> moves = PlanRebalance(
      map, static_cast<uint32_t>(cluster.servers.size()), leaving);
  for (SlotMoveOptions& move : moves) SetMoveFlags(cluster.options, &move);
  return moves;
}

}  // namespace

// `rebalance`: every shard an equal share of the slots.
int Rebalance(const Cluster& cluster) {
  absl::StatusOr<std::vector<SlotMoveOptions>> moves =
      Plan(cluster, std::nullopt);
  if (!moves.ok()) return Fail(moves.status());
  return ReportMoves(cluster, "rebalance", *moves);
}

// `drain-shard --shard=I`: every slot of shard I to the others, evenly.
int DrainShard(const Cluster& cluster) {
  if (cluster.options.shard >= cluster.servers.size()) {
    return Fail(absl::StrCat("drain-shard needs --shard, one of the ",
                             cluster.servers.size(), " shards"));
  }
  if (cluster.servers.size() < 2) {
    return Fail("drain-shard needs another shard to take the slots");
  }
  absl::StatusOr<std::vector<SlotMoveOptions>> moves =
      Plan(cluster, cluster.options.shard);
  if (!moves.ok()) return Fail(moves.status());
  // Under etcd the job's last shard leaves it once empty: workers stop
  // counting it, and it may stop.
  const bool leaves = cluster.coordinator_elected &&
                      cluster.options.shard + 1 == cluster.servers.size();
  return ReportMoves(
      cluster, "drain-shard", *moves, [&](Json* summary) -> absl::Status {
        if (!leaves) return absl::OkStatus();
        ASSIGN_OR_RETURN(const SlotMap left,
                         LeaveJob(*cluster.channels, cluster.options.shard,
                                  cluster.options.timeout));
        (*summary)["num_shards"] = left.num_shards();
        (*summary)["epoch"] = left.epoch();
        if (!cluster.options.json) {
          std::printf(
              "shard %u left the job, which has %u shards now (slot map "
              "epoch %llu): it may stop\n",
              cluster.options.shard, left.num_shards(),
              static_cast<unsigned long long>(left.epoch()));
        }
        return absl::OkStatus();
      });
}

// `move-slots`: --slots to shard --to while workers train (ops/slot_mover.h),
// or --cancel a move under way.
int MoveSlotsCommand(const Cluster& cluster) {
  const CommandOptions& options = cluster.options;
  if (options.cancel) {
    absl::StatusOr<int> cancelled =
        CancelSlotMoves(*cluster.channels, options.timeout);
    if (!cancelled.ok()) return Fail(cancelled.status());
    if (cluster.options.json) {
      std::printf("%s\n", Dump({{"cancelled", *cancelled}}).c_str());
    } else {
      std::printf("cancelled %d move%s\n", *cancelled,
                  *cancelled == 1 ? "" : "s");
    }
    return 0;
  }
  SlotMoveOptions move;
  move.first_slot = options.first_slot;
  move.last_slot = options.last_slot;
  move.to_shard = options.to_shard;
  SetMoveFlags(options, &move);
  absl::StatusOr<SlotMoveReport> report = MoveSlots(*cluster.channels, move);
  if (!report.ok()) return Fail(report.status());
  const double seconds = absl::ToDoubleSeconds(report->elapsed);
  if (options.json) {
    Json sources = Json::array();
    for (const SlotMoveReport::Source& source : report->sources) {
      sources.push_back(SourceJson(source));
    }
    std::printf("%s\n", Dump({{"first_slot", move.first_slot},
                              {"last_slot", move.last_slot},
                              {"to_shard", move.to_shard},
                              {"rows", report->rows},
                              {"seconds", seconds},
                              {"epoch", report->epoch},
                              {"sources", std::move(sources)}})
                            .c_str());
    return 0;
  }
  for (const SlotMoveReport::Source& source : report->sources)
    PrintSource(source);
  std::printf(
      "slots %u-%u are shard %u's: %llu rows in %.2f s (%.0f rows/s), "
      "slot map epoch %llu\n",
      move.first_slot, move.last_slot, move.to_shard,
      static_cast<unsigned long long>(report->rows), seconds,
      seconds > 0 ? report->rows / seconds : 0.0,
      static_cast<unsigned long long>(report->epoch));
  return 0;
}

}  // namespace ps::ops
