#include "ops/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/table_spec.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "net/admin_channel.h"
#include "net/grpc_status.h"
#include "proto/admin.grpc.pb.h"

namespace ps {
namespace {

// Calls `call(i)` for every shard i at once; the first error, if any.
absl::Status OnEveryShard(const net::AdminChannels& channels,
                          const std::function<absl::Status(size_t)>& call) {
  std::vector<absl::Status> results(channels.size());
  channels.OnEveryShard([&](size_t i) { results[i] = call(i); });
  for (const absl::Status& result : results) RETURN_IF_ERROR(result);
  return absl::OkStatus();
}

// The slot map every shard routes by; FAILED_PRECONDITION when they do not
// all route by the same one (a change of the map is under way).
absl::StatusOr<SlotMap> AgreedSlotMap(const net::AdminChannels& channels) {
  std::vector<GetSlotMapResponse> maps(channels.size());
  RETURN_IF_ERROR(OnEveryShard(channels, [&](size_t i) {
    return net::FromGrpcStatus(
        channels.shard(i).GetSlotMap(channels.Context(absl::Seconds(30)).get(),
                                     GetSlotMapRequest(), &maps[i]),
        absl::StrCat("reading the slot map of shard ", i));
  }));
  ASSIGN_OR_RETURN(SlotMap agreed, SlotMap::FromSpec(maps[0].slot_map()));
  for (size_t i = 1; i < maps.size(); ++i) {
    ASSIGN_OR_RETURN(SlotMap map, SlotMap::FromSpec(maps[i].slot_map()));
    if (!(map == agreed)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard 0 routes by slot map epoch ", agreed.epoch(), " and shard ", i,
          " by epoch ", map.epoch(),
          ": the map is being changed; try again once the change is done"));
    }
  }
  return agreed;
}

// AgreedSlotMap() once the parts are written: ABORTED unless it is still
// `before`, the map agreed on before the cut.
absl::StatusOr<SlotMap> SlotMapUnchanged(const net::AdminChannels& channels,
                                         const SlotMap& before) {
  ASSIGN_OR_RETURN(SlotMap after, AgreedSlotMap(channels));
  if (!(after == before)) {
    return absl::AbortedError(absl::StrCat(
        "the slot map changed from epoch ", before.epoch(), " to epoch ",
        after.epoch(), " while the parts were written; take it again"));
  }
  // A shard that joined or left after the shards were looked up: the parts
  // are not the job's.
  if (after.num_shards() != channels.size()) {
    return absl::AbortedError(absl::StrCat(
        "the job has ", after.num_shards(), " shards by its slot map (epoch ",
        after.epoch(), "), but the parts are of ", channels.size(),
        ": a shard joined or left; take it again"));
  }
  return after;
}

// Table specs by name.
std::map<std::string, TableSpec> SortedByName(
    const google::protobuf::RepeatedPtrField<TableSpec>& tables) {
  std::map<std::string, TableSpec> sorted;
  for (const TableSpec& spec : tables) sorted[spec.name()] = spec;
  return sorted;
}

// ": max_values_per_field A against B" where two specs' model cards record
// other seq limits; empty otherwise.
std::string TableDifference(const TableSpec& a, const TableSpec& b) {
  const uint32_t a_limit = a.model().max_values_per_field();
  const uint32_t b_limit = b.model().max_values_per_field();
  if (a_limit == 0 || b_limit == 0 || a_limit == b_limit) return "";
  return absl::StrCat(": max_values_per_field ", a_limit, " against ", b_limit);
}

// Merges `spec`, as shard `shard` holds it, into `merged`, taken from shard
// `*source`: a card that records a seq column's limit replaces one that does
// not (declared by an older build), so every recorded limit must agree, on
// whatever shards the cards lie. FAILED_PRECONDITION if the specs do not
// match (SameTableSpec).
absl::Status MergeSpec(const TableSpec& spec, size_t shard, TableSpec* merged,
                       size_t* source) {
  if (!SameTableSpec(spec, *merged)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard, " holds other tables than shard ", *source, " (table ",
        spec.name(), TableDifference(spec, *merged), ")"));
  }
  if (merged->model().max_values_per_field() == 0 &&
      spec.model().max_values_per_field() > 0) {
    *merged = spec;
    *source = shard;
  }
  return absl::OkStatus();
}

// Merges the tables shard `shard` holds into `tables` (by name, each with
// the shard it was taken from in `source`), which hold the names of shard
// `reference`'s: FAILED_PRECONDITION if the names differ or a spec does not
// match (MergeSpec).
absl::Status MergeTables(
    const google::protobuf::RepeatedPtrField<TableSpec>& held, size_t shard,
    size_t reference, std::map<std::string, TableSpec>* tables,
    std::map<std::string, size_t>* source) {
  const std::map<std::string, TableSpec> sorted = SortedByName(held);
  const bool same_names = std::equal(
      sorted.begin(), sorted.end(), tables->begin(), tables->end(),
      [](const auto& a, const auto& b) { return a.first == b.first; });
  if (!same_names) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", shard, " holds other tables than shard ", reference));
  }
  for (const auto& [name, spec] : sorted) {
    RETURN_IF_ERROR(MergeSpec(spec, shard, &(*tables)[name], &(*source)[name]));
  }
  return absl::OkStatus();
}

// Prints "<what>: <line>" to stderr once the work is 3 s old, at most
// every 2 s, if enabled.
class Progress {
 public:
  Progress(const char* what, bool enabled) : what_(what), enabled_(enabled) {}
  void Say(const std::string& line) {
    const absl::Time now = absl::Now();
    if (!enabled_ || now - start_ < absl::Seconds(3) ||
        now - last_said_ < absl::Seconds(2)) {
      return;
    }
    last_said_ = now;
    std::fprintf(stderr, "%s: %s\n", what_, line.c_str());
  }

 private:
  const char* const what_;
  const bool enabled_;
  const absl::Time start_ = absl::Now();
  absl::Time last_said_ = absl::InfinitePast();
};

// A cut every live worker holds at (see the file comment).
struct Cut {
  int64_t cut = 0;
  uint64_t id = 0;
  double hold_seconds = 0;
  // The last status: every worker's clock and examples.
  CutStatusResponse status;
};

// Ends the cut this client began (`cut`, once set) when it goes out of
// scope, whatever happened; never another client's.
struct CutEnder {
  net::AdminChannels& clients;
  uint64_t id = 0;
  ~CutEnder() {
    if (id == 0) return;
    EndCutRequest request;
    request.set_id(id);
    EndCutResponse ended;
    clients.coordinator()
        .EndCut(clients.Context(absl::Seconds(30)).get(), request, &ended)
        .ok();
  }
};

// Removes what a checkpoint or export wrote into its directory (empty when
// it began) if it was `armed` (once this client's cut began: only one is
// taken at a time, so no other client writes there) and did not succeed.
struct PartsRemover {
  std::string dir;
  bool armed = false;
  bool succeeded = false;
  ~PartsRemover() {
    if (!armed || succeeded) return;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
};

// Begins a cut (arming `ender`, which ends it) and waits until every live
// worker holds at it.
absl::StatusOr<Cut> HoldCut(net::AdminChannels& clients,
                            const CheckpointOptions& options,
                            Progress& progress, CutEnder& ender) {
  const absl::Duration call = absl::Seconds(30);
  const absl::Time hold_start = absl::Now();
  auto abandoned = [&] { return options.abandon && options.abandon(); };
  // A coordinator that cannot be reached fails the checkpoint at once...
  {
    CutStatusResponse status;
    RETURN_IF_ERROR(net::FromGrpcStatus(
        clients.coordinator().CutStatus(clients.Context(call).get(),
                                        CutStatusRequest(), &status),
        "asking the coordinator for its cut"));
  }
  // ...while UNAVAILABLE from one that answers says it just restarted and
  // waits for its workers to report again, or another cut (worker 0's
  // periodic export, say) is being taken: ask again until hold_timeout.
  BeginCutRequest begin;
  begin.set_lease_ms(30000);
  BeginCutResponse begun;
  while (true) {
    absl::Status begin_status =
        net::FromGrpcStatus(clients.coordinator().BeginCut(
                                clients.Context(call).get(), begin, &begun),
                            "starting the cut");
    if (begin_status.ok()) break;
    if (!absl::IsUnavailable(begin_status)) return begin_status;
    if (absl::Now() - hold_start > options.hold_timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("the cut did not start within ",
                       absl::FormatDuration(options.hold_timeout),
                       " (--hold_timeout_s): ", begin_status.message()));
    }
    if (abandoned())
      return absl::CancelledError("the checkpoint was abandoned");
    progress.Say(
        absl::StrCat("waiting to start the cut: ", begin_status.message()));
    absl::SleepFor(absl::Milliseconds(200));
  }
  ender.id = begun.id();
  Cut cut;
  cut.cut = begun.cut();
  cut.id = begun.id();
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    cut.status.Clear();
    RETURN_IF_ERROR(net::FromGrpcStatus(
        clients.coordinator().CutStatus(clients.Context(call).get(),
                                        CutStatusRequest(), &cut.status),
        "asking for the cut"));
    if (cut.status.id() != cut.id) {
      return absl::AbortedError(absl::StrCat(
          "the cut at clock ", cut.cut,
          " ended before every worker reached it (its lease ran out, or the "
          "coordinator restarted)"));
    }
    if (cut.status.ready()) break;
    std::vector<std::string> behind;
    for (const auto& worker : cut.status.workers()) {
      if (worker.live() && worker.clock() < cut.cut)
        behind.push_back(absl::StrCat(worker.worker(), " at ", worker.clock()));
    }
    if (abandoned())
      return absl::CancelledError("the checkpoint was abandoned");
    if (absl::Now() - hold_start > options.hold_timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("workers did not reach the cut at clock ", cut.cut,
                       " within ", absl::FormatDuration(options.hold_timeout),
                       "; still behind: ", absl::StrJoin(behind, ", ")));
    }
    progress.Say(absl::StrCat("waiting for workers to reach clock ", cut.cut,
                              ": ", absl::StrJoin(behind, ", ")));
    absl::SleepFor(pause);
    pause = std::min(2 * pause, absl::Milliseconds(100));
  }
  cut.hold_seconds = absl::ToDoubleSeconds(absl::Now() - hold_start);
  return cut;
}

// Runs `write` (the shards writing their parts) while `cut` holds: renews
// its lease meanwhile, and checks after that it held all along (the same
// cut, and no worker's clock moved), so that no part has a later step.
absl::Status WriteDuringCut(net::AdminChannels& clients, const Cut& cut,
                            Progress& progress,
                            const std::function<absl::Status()>& write) {
  const absl::Time start = absl::Now();
  absl::Notification written;
  std::thread renewer([&] {
    while (!written.WaitForNotificationWithTimeout(absl::Seconds(5))) {
      CutStatusResponse status;
      clients.coordinator()
          .CutStatus(clients.Context(absl::Seconds(5)).get(),
                     CutStatusRequest(), &status)
          .ok();
      progress.Say(absl::StrCat("the shards are writing (",
                                absl::FormatDuration(absl::Trunc(
                                    absl::Now() - start, absl::Seconds(1))),
                                ")"));
    }
  });
  const absl::Status status = write();
  written.Notify();
  renewer.join();
  RETURN_IF_ERROR(status);

  CutStatusResponse after;
  RETURN_IF_ERROR(net::FromGrpcStatus(
      clients.coordinator().CutStatus(clients.Context(absl::Seconds(30)).get(),
                                      CutStatusRequest(), &after),
      "asking for the cut after the shards wrote"));
  if (after.id() != cut.id) {
    return absl::AbortedError(absl::StrCat(
        "the cut at clock ", cut.cut,
        " ended while the shards wrote (its lease ran out, or the coordinator "
        "restarted): the parts may hold later steps"));
  }
  std::map<uint32_t, int64_t> clocks;
  for (const auto& worker : cut.status.workers()) {
    clocks[worker.worker()] = worker.clock();
  }
  for (const auto& worker : after.workers()) {
    auto before = clocks.find(worker.worker());
    if (before != clocks.end() && before->second != worker.clock()) {
      return absl::AbortedError(absl::StrCat(
          "worker ", worker.worker(), " went from clock ", before->second,
          " to ", worker.clock(),
          " while the shards wrote (its lease had lapsed): the parts may "
          "hold part of a step"));
    }
  }
  return absl::OkStatus();
}

// The fields checkpoint and export manifests share; `written` is when the
// manifest is written.
template <typename Manifest>
void SetCommonFields(const Cut& cut, size_t shards, absl::Time written,
                     Manifest* manifest) {
  // 2: the parts' rows are keyed in slot order (embedding/rocks_store.h),
  // which a version that reads only 1 must not restore or serve.
  manifest->set_format_version(2);
  manifest->set_created_at(
      absl::FormatTime(absl::RFC3339_sec, written, absl::UTCTimeZone()));
  manifest->set_cut(cut.cut);
  manifest->set_routing_version(kRoutingVersion);
  manifest->set_num_shards(static_cast<uint32_t>(shards));
}

// Makes `dir`, which must not exist or be empty.
absl::Status PrepareDirectory(const std::string& dir) {
  std::error_code error;
  if (std::filesystem::exists(ManifestPath(dir), error)) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, " holds a checkpoint or export already"));
  }
  if (std::filesystem::exists(dir, error) &&
      !std::filesystem::is_empty(dir, error)) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir,
        " is not empty (an unfinished checkpoint or export?): give a "
        "new directory, or empty it"));
  }
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  return absl::OkStatus();
}

// Checks that servers[i] is shard i of servers.size(), before any cut.
absl::Status CheckShardOrder(net::AdminChannels& clients,
                             const std::vector<std::string>& servers) {
  for (size_t i = 0; i < servers.size(); ++i) {
    ShardStatsResponse stats;
    RETURN_IF_ERROR(net::FromGrpcStatus(
        clients.shard(i).ShardStats(clients.Context(absl::Seconds(30)).get(),
                                    ShardStatsRequest(), &stats),
        absl::StrCat("asking ", servers[i], " which shard it is")));
    if (stats.shard_index() != i || stats.num_shards() != servers.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(servers[i], " is shard ", stats.shard_index(), " of ",
                       stats.num_shards(), ", not shard ", i, " of ",
                       servers.size(), ": give every shard, in shard order"));
    }
  }
  return absl::OkStatus();
}

// The model an export writes: its name, its card, and its tables (the
// sparse tables, then the dense ones).
struct ExportedModel {
  std::string name;
  ModelCard card;
  std::vector<std::string> tables;
};

// The model named `model` (empty: the only one) among the tables' model
// cards (a model's tables are named <model>.<table>), preferring a card that
// records a seq column's limit to one an older build declared. NOT_FOUND
// without such a model, INVALID_ARGUMENT for an empty `model` and several.
absl::StatusOr<ExportedModel> ChooseModel(const ListTablesResponse& listed,
                                          const std::string& model) {
  std::map<std::string, ModelCard> models;  // by name
  for (const TableInfo& table : listed.tables()) {
    if (!table.spec().has_model()) continue;
    const std::string& name = table.spec().name();
    const ModelCard& card = table.spec().model();
    auto [it, added] = models.try_emplace(name.substr(0, name.find('.')), card);
    if (!added && it->second.max_values_per_field() == 0 &&
        card.max_values_per_field() > 0) {
      it->second = card;
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, card] : models) names.push_back(name);
  if (models.empty()) {
    return absl::NotFoundError(
        "the cluster holds no model a ps_worker declared (with a model card)");
  }
  ExportedModel chosen;
  chosen.name = model;
  if (chosen.name.empty()) {
    if (models.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cluster holds several models (",
                       absl::StrJoin(names, ", "), "): name one"));
    }
    chosen.name = models.begin()->first;
  }
  auto found = models.find(chosen.name);
  if (found == models.end()) {
    return absl::NotFoundError(absl::StrCat(
        "no model ", chosen.name, "; there are ", absl::StrJoin(names, ", ")));
  }
  chosen.card = found->second;
  const ModelCard& card = chosen.card;
  if (card.kind() == ModelCard::SPEC) {
    // Tables stored with another name that one's server table again.
    for (const std::string& table : card.sparse_tables()) {
      if (std::find(chosen.tables.begin(), chosen.tables.end(), table) ==
          chosen.tables.end()) {
        chosen.tables.push_back(table);
      }
    }
  } else {
    if (!card.embedding_table().empty()) {
      chosen.tables.push_back(card.embedding_table());
    }
    chosen.tables.push_back(card.wide_table());
  }
  for (const std::string& dense : card.dense_tables()) {
    chosen.tables.push_back(dense);
  }
  return chosen;
}

// Has every shard write `model`'s weights into options.cluster.dir while
// `cut` holds, each the rows of the slots `slot_map` gives it (the map the
// manifest records); returns each shard's answer, by shard.
absl::StatusOr<std::vector<ExportShardResponse>> ExportEveryShard(
    net::AdminChannels& clients, const ExportOptions& options,
    const ExportedModel& model, const SlotMap& slot_map,
    const ExportManifest* predecessor, const Cut& cut, Progress& progress) {
  const CheckpointOptions& cluster = options.cluster;
  std::vector<ExportShardResponse> parts(cluster.servers.size());
  RETURN_IF_ERROR(WriteDuringCut(clients, cut, progress, [&] {
    return OnEveryShard(clients, [&](size_t i) {
      ExportShardRequest request;
      request.set_dir(cluster.dir);
      for (const std::string& table : model.tables) request.add_tables(table);
      request.set_format(options.fp16 ? ExportManifest::FP16
                                      : ExportManifest::FP32);
      *request.mutable_slot_map() = slot_map.ToSpec();
      if (predecessor != nullptr) {
        request.set_delta(true);
        request.set_changed_since_s(predecessor->shard_exported_at_s(i));
        if (static_cast<size_t>(predecessor->shard_clock_instances_size()) >
            i) {
          request.set_changed_since_clock_instance(
              predecessor->shard_clock_instances(i));
        }
      }
      return net::FromGrpcStatus(
          clients.shard(i).ExportShard(clients.Context(absl::Hours(1)).get(),
                                       request, &parts[i]),
          absl::StrCat("export on shard ", i, " (", cluster.servers[i], ")"));
    });
  }));
  return parts;
}

// Adds an entry to `manifest` for each of `model`'s tables: its spec (from
// `listed`), its rows and bytes over all shards, and each shard's part (a
// path relative to `dir`, empty for a shard that wrote none).
void AddExportedTables(const ExportedModel& model,
                       const ListTablesResponse& listed,
                       const std::vector<ExportShardResponse>& parts,
                       const std::string& dir, ExportManifest* manifest) {
  for (const std::string& table : model.tables) {
    ExportManifest::Table* entry = manifest->add_tables();
    for (const TableInfo& info : listed.tables()) {
      if (info.spec().name() == table) *entry->mutable_spec() = info.spec();
    }
    for (const ExportShardResponse& part : parts) {
      std::string relative;
      for (const auto& written : part.tables()) {
        if (written.name() != table) continue;
        if (!written.path().empty()) {
          relative = std::filesystem::relative(written.path(), dir).string();
        }
        entry->set_rows(entry->rows() + written.rows());
        entry->set_bytes(entry->bytes() + written.bytes());
        entry->set_deleted_rows(entry->deleted_rows() + written.deleted_rows());
      }
      entry->add_parts(relative);
    }
  }
}

// The manifest of options.predecessor, checked for a delta of `model`
// over `shards` shards to follow it.
absl::StatusOr<ExportManifest> ReadPredecessor(const ExportOptions& options,
                                               const ExportedModel& model,
                                               size_t shards) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path previous = fs::weakly_canonical(options.predecessor, error);
  const fs::path dir = fs::weakly_canonical(options.cluster.dir, error);
  if (error || previous.parent_path() != dir.parent_path() || previous == dir) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a delta goes beside the export it follows: ", options.cluster.dir,
        " is not beside ", options.predecessor));
  }
  absl::StatusOr<ExportManifest> manifest =
      ReadExportManifest(options.predecessor);
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat("reading the export to follow: ",
                                     manifest.status().message()));
  }
  if (manifest->model_name() != model.name) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.predecessor, " is an export of model ",
                     manifest->model_name(), ", not ", model.name));
  }
  if ((manifest->format() == ExportManifest::FP16) != options.fp16) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.predecessor, " holds ",
        manifest->format() == ExportManifest::FP16 ? "fp16" : "fp32",
        " weights, and so must a delta of it"));
  }
  if (manifest->num_shards() != shards ||
      manifest->shard_exported_at_s_size() != static_cast<int>(shards)) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.predecessor, " was written by ",
                     manifest->num_shards(), " shards",
                     manifest->shard_exported_at_s_size() == 0
                         ? " that did not record their time"
                         : "",
                     "; the cluster has ", shards, ": write a full export"));
  }
  std::vector<std::string> tables;
  for (const auto& table : manifest->tables())
    tables.push_back(table.spec().name());
  if (tables != model.tables) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.predecessor, " holds tables ", absl::StrJoin(tables, ", "),
        ", the model now ", absl::StrJoin(model.tables, ", "),
        ": write a full export"));
  }
  return manifest;
}

}  // namespace

namespace {

// Adds the shards' parts and the tables they hold to `manifest`.
// FAILED_PRECONDITION if two shards that own slots hold other tables.
absl::Status AddShardsAndTables(const std::vector<SnapshotShardResponse>& parts,
                                const SlotMap& slot_map,
                                CheckpointManifest* manifest) {
  const size_t shards = parts.size();
  // The tables of the first shard that owns slots; a shard that owns none
  // may hold none (one that joined, before any slot moved to it).
  size_t reference = 0;
  while (reference + 1 < shards &&
         slot_map.SlotsOwned(0, kNumSlots - 1, reference) == 0)
    ++reference;
  std::map<std::string, TableSpec> tables =
      SortedByName(parts[reference].tables());
  std::map<std::string, size_t> source;  // the shard each spec came from
  for (const auto& [name, spec] : tables) source[name] = reference;
  for (size_t i = 0; i < shards; ++i) {
    const SnapshotShardResponse& part = parts[i];
    const bool empty_newcomer =
        part.tables().empty() && slot_map.SlotsOwned(0, kNumSlots - 1, i) == 0;
    // Workers declare tables on every shard in turn, so two shards may
    // list the same tables in different orders.
    if (!empty_newcomer)
      RETURN_IF_ERROR(
          MergeTables(part.tables(), i, reference, &tables, &source));
    CheckpointManifest::Shard* shard = manifest->add_shards();
    shard->set_index(static_cast<uint32_t>(i));
    shard->set_path(std::filesystem::path(part.path()).filename().string());
    shard->set_bytes(part.bytes());
  }
  for (const auto& [name, spec] : tables) *manifest->add_tables() = spec;
  return absl::OkStatus();
}

// Adds the workers the cut held, with their clocks and input positions.
void AddWorkers(const Cut& cut, CheckpointManifest* manifest) {
  for (const auto& worker : cut.status.workers()) {
    CheckpointManifest::Worker* entry = manifest->add_workers();
    entry->set_worker(worker.worker());
    entry->set_clock(worker.clock());
    entry->set_examples(worker.examples());
    if (worker.has_input_position())
      *entry->mutable_input_position() = worker.input_position();
    entry->set_finished(worker.finished());
    entry->set_live(worker.live());
  }
}

}  // namespace

absl::StatusOr<CheckpointManifest> TakeCheckpoint(
    const CheckpointOptions& options) {
  if (options.servers.empty() || options.dir.empty()) {
    return absl::InvalidArgumentError("a checkpoint needs shards and a dir");
  }
  absl::StatusOr<net::AdminChannels> clients = net::AdminChannels::Connect(
      options.servers, options.coordinator, options.tls, options.token);
  if (!clients.ok()) return clients.status();
  RETURN_IF_ERROR(CheckShardOrder(*clients, options.servers));
  RETURN_IF_ERROR(PrepareDirectory(options.dir));
  PartsRemover remover{options.dir};
  Progress progress("checkpoint", options.progress);

  CutEnder end_cut{*clients};
  // Checked before the cut too, so that a map being changed does not cost
  // a whole snapshot.
  ASSIGN_OR_RETURN(const SlotMap slot_map_before, AgreedSlotMap(*clients));
  ASSIGN_OR_RETURN(const Cut cut,
                   HoldCut(*clients, options, progress, end_cut));
  remover.armed = true;
  // 3. Every shard's part, at once.
  const absl::Time snapshot_start = absl::Now();
  progress.Say("every worker holds; writing the shards' parts");
  const size_t shards = options.servers.size();
  std::vector<SnapshotShardResponse> parts(shards);
  RETURN_IF_ERROR(WriteDuringCut(*clients, cut, progress, [&] {
    return OnEveryShard(*clients, [&](size_t i) {
      SnapshotShardRequest request;
      request.set_dir(options.dir);
      return net::FromGrpcStatus(
          clients->shard(i).SnapshotShard(
              clients->Context(absl::Hours(1)).get(), request, &parts[i]),
          absl::StrCat("snapshot of shard ", i, " (", options.servers[i], ")"));
    });
  }));

  // 4. The manifest, last, while the cut still holds.
  ASSIGN_OR_RETURN(const SlotMap slot_map,
                   SlotMapUnchanged(*clients, slot_map_before));
  CheckpointManifest manifest;
  SetCommonFields(cut, shards, absl::Now(), &manifest);
  *manifest.mutable_slot_map() = slot_map.ToSpec();
  RETURN_IF_ERROR(AddShardsAndTables(parts, slot_map, &manifest));
  AddWorkers(cut, &manifest);
  manifest.set_hold_seconds(cut.hold_seconds);
  manifest.set_snapshot_seconds(
      absl::ToDoubleSeconds(absl::Now() - snapshot_start));
  RETURN_IF_ERROR(WriteManifest(options.dir, manifest));
  remover.succeeded = true;
  return manifest;
}

namespace {

// An export's format version, from how its parts key their rows (every
// shard's way, or none: a cluster halfway through an upgrade), its parts'
// clocks, and, for a delta over `predecessor`, its place in the chain.
absl::Status SetFormatAndChain(const std::vector<ExportShardResponse>& parts,
                               const ExportOptions& options,
                               const ExportManifest* predecessor,
                               ExportManifest* manifest) {
  const uint32_t key_format = parts.front().key_format_version();
  for (const ExportShardResponse& part : parts) {
    if (part.key_format_version() != key_format) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the shards wrote their parts in two key formats (shard ",
          part.shard_index(), " in ", part.key_format_version(),
          ", shard 0 in ", key_format,
          "): upgrade every shard, then export again"));
    }
  }
  manifest->set_format_version(key_format == 0 ? 1 : key_format);
  for (const ExportShardResponse& part : parts) {
    manifest->add_shard_exported_at_s(part.exported_at_s());
    manifest->add_shard_clock_instances(part.clock_instance());
  }
  if (predecessor != nullptr) {
    if (key_format != 2) {
      return absl::FailedPreconditionError(
          "a shard wrote its part in key format 1, which has no deltas: "
          "upgrade every shard");
    }
    // 3: a delta, which a version that reads only full exports refuses.
    manifest->set_format_version(3);
    const std::string name =
        std::filesystem::path(options.predecessor).filename().string();
    manifest->set_predecessor(name);
    manifest->set_predecessor_created_at(predecessor->created_at());
    manifest->set_base(predecessor->delta_index() == 0 ? name
                                                       : predecessor->base());
    manifest->set_delta_index(predecessor->delta_index() + 1);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExportManifest> TakeExport(const ExportOptions& options) {
  const CheckpointOptions& cluster = options.cluster;
  if (cluster.servers.empty() || cluster.dir.empty()) {
    return absl::InvalidArgumentError("an export needs shards and a dir");
  }
  ASSIGN_OR_RETURN(
      net::AdminChannels clients,
      net::AdminChannels::Connect(cluster.servers, cluster.coordinator,
                                  cluster.tls, cluster.token));
  RETURN_IF_ERROR(CheckShardOrder(clients, cluster.servers));
  // The model's card and tables, from every shard's specs, a table's spec
  // from a shard whose card records a seq column's limit where another's
  // (an older build's) does not.
  std::map<std::string, TableSpec> tables;
  std::map<std::string, size_t> source;  // the shard each spec came from
  for (size_t i = 0; i < clients.size(); ++i) {
    ListTablesResponse shard_listed;
    RETURN_IF_ERROR(net::FromGrpcStatus(
        clients.shard(i).ListTables(clients.Context(absl::Seconds(30)).get(),
                                    ListTablesRequest(), &shard_listed),
        absl::StrCat("listing the tables of shard ", i)));
    for (const TableInfo& table : shard_listed.tables()) {
      const std::string& name = table.spec().name();
      auto [merged, added] = tables.try_emplace(name, table.spec());
      auto [from, unused] = source.try_emplace(name, i);
      if (!added) {
        RETURN_IF_ERROR(
            MergeSpec(table.spec(), i, &merged->second, &from->second));
      }
    }
  }
  ListTablesResponse listed;
  for (const auto& [name, spec] : tables)
    *listed.add_tables()->mutable_spec() = spec;
  ASSIGN_OR_RETURN(const ExportedModel model,
                   ChooseModel(listed, options.model));

  std::optional<ExportManifest> predecessor;
  if (!options.predecessor.empty()) {
    ASSIGN_OR_RETURN(predecessor,
                     ReadPredecessor(options, model, cluster.servers.size()));
  }

  RETURN_IF_ERROR(PrepareDirectory(cluster.dir));
  PartsRemover remover{cluster.dir};
  Progress progress("export", cluster.progress);
  CutEnder end_cut{clients};
  ASSIGN_OR_RETURN(const SlotMap slot_map_before, AgreedSlotMap(clients));
  // Slots that moved since the predecessor: a moved row keeps its update
  // time from the shard it left, and the drops that shard recorded are in
  // its part, where a reader no longer looks for them.
  if (predecessor.has_value() &&
      !(RecordedSlotMap(*predecessor) == slot_map_before)) {
    return absl::FailedPreconditionError(
        absl::StrCat("slots moved since ", options.predecessor,
                     " (slot map epoch ", RecordedSlotMap(*predecessor).epoch(),
                     ", now ", slot_map_before.epoch(),
                     "); a full export (without --base) is needed now"));
  }
  ASSIGN_OR_RETURN(const Cut cut, HoldCut(clients, cluster, progress, end_cut));
  remover.armed = true;
  const absl::Time export_start = absl::Now();
  progress.Say("every worker holds; the shards write the model's weights");
  absl::StatusOr<std::vector<ExportShardResponse>> exported = ExportEveryShard(
      clients, options, model, slot_map_before,
      predecessor.has_value() ? &*predecessor : nullptr, cut, progress);
  if (predecessor.has_value() &&
      absl::IsFailedPrecondition(exported.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(exported.status().message(),
                     "; a full export (without --base) is needed now"));
  }
  RETURN_IF_ERROR(exported.status());
  const std::vector<ExportShardResponse>& parts = *exported;

  ASSIGN_OR_RETURN(const SlotMap slot_map,
                   SlotMapUnchanged(clients, slot_map_before));
  ExportManifest manifest;
  const absl::Time written = absl::Now();
  SetCommonFields(cut, cluster.servers.size(), written, &manifest);
  manifest.set_created_at_unix_ms(absl::ToUnixMillis(written));
  manifest.set_job(options.job);
  RETURN_IF_ERROR(SetFormatAndChain(
      parts, options, predecessor.has_value() ? &*predecessor : nullptr,
      &manifest));
  *manifest.mutable_slot_map() = slot_map.ToSpec();
  *manifest.mutable_model() = model.card;
  manifest.set_model_name(model.name);
  manifest.set_format(options.fp16 ? ExportManifest::FP16
                                   : ExportManifest::FP32);
  AddExportedTables(model, listed, parts, cluster.dir, &manifest);
  manifest.set_hold_seconds(cut.hold_seconds);
  manifest.set_export_seconds(
      absl::ToDoubleSeconds(absl::Now() - export_start));
  RETURN_IF_ERROR(WriteManifest(cluster.dir, manifest));
  remover.succeeded = true;
  return manifest;
}

}  // namespace ps
