#include "base/checkpoint_client.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "proto/admin.grpc.pb.h"

namespace ps {
namespace {

constexpr char kManifest[] = "/MANIFEST.json";

absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

class AdminClients {
 public:
  static absl::StatusOr<AdminClients> Connect(
      const CheckpointOptions& options) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        ChannelCredentials(options.tls);
    if (!credentials.ok()) return credentials.status();
    AdminClients clients;
    clients.token_ = options.token;
    auto connect = [&](const std::string& address) {
      grpc::ChannelArguments arguments;
      AddTlsChannelArguments(options.tls, &arguments);
      return Admin::NewStub(
          grpc::CreateCustomChannel(address, *credentials, arguments));
    };
    for (const std::string& server : options.servers)
      clients.shards_.push_back(connect(server));
    clients.coordinator_ = connect(
        options.coordinator.empty() ? options.servers[0] : options.coordinator);
    return clients;
  }

  // A context with a deadline and the token.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!token_.empty())
      context->AddMetadata("authorization", "Bearer " + token_);
    return context;
  }

  Admin::Stub& coordinator() { return *coordinator_; }
  Admin::Stub& shard(size_t i) { return *shards_[i]; }

 private:
  std::string token_;
  std::vector<std::unique_ptr<Admin::Stub>> shards_;
  std::unique_ptr<Admin::Stub> coordinator_;
};

// Calls `call(i)` for every shard i at once; the first error, if any.
absl::Status OnEveryShard(size_t shards,
                          const std::function<absl::Status(size_t)>& call) {
  std::vector<absl::Status> results(shards);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < shards; ++i) {
    threads.emplace_back([&, i] { results[i] = call(i); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& result : results) RETURN_IF_ERROR(result);
  return absl::OkStatus();
}

// Table specs by name.
std::map<std::string, TableSpec> SortedByName(
    const google::protobuf::RepeatedPtrField<TableSpec>& tables) {
  std::map<std::string, TableSpec> sorted;
  for (const TableSpec& spec : tables) sorted[spec.name()] = spec;
  return sorted;
}

// Whether two shards hold the same tables, in whatever order.
bool SameTables(const google::protobuf::RepeatedPtrField<TableSpec>& a,
                const google::protobuf::RepeatedPtrField<TableSpec>& b) {
  const std::map<std::string, TableSpec> sorted_a = SortedByName(a);
  const std::map<std::string, TableSpec> sorted_b = SortedByName(b);
  return std::equal(sorted_a.begin(), sorted_a.end(), sorted_b.begin(),
                    sorted_b.end(), [](const auto& x, const auto& y) {
                      return x.first == y.first &&
                             google::protobuf::util::MessageDifferencer::Equals(
                                 x.second, y.second);
                    });
}

// Prints "<what>: <line>" to stderr once `start` is 3 s old, if enabled.
class Progress {
 public:
  Progress(const char* what, bool enabled) : what_(what), enabled_(enabled) {}
  void Say(const std::string& line) {
    if (enabled_ && absl::Now() - start_ > absl::Seconds(3)) {
      std::fprintf(stderr, "%s: %s\n", what_, line.c_str());
    }
  }

 private:
  const char* const what_;
  const bool enabled_;
  const absl::Time start_ = absl::Now();
};

// A cut every live worker holds at (see the file comment).
struct Cut {
  int64_t cut = 0;
  double hold_seconds = 0;
  // The last status: every worker's clock and examples.
  CutStatusResponse status;
};

// Ends the cut when it goes out of scope, whatever happened, if this
// client began it (`began`).
struct CutEnder {
  AdminClients& clients;
  bool began = false;
  ~CutEnder() {
    if (!began) return;
    EndCutResponse ended;
    clients.coordinator()
        .EndCut(clients.Context(absl::Seconds(30)).get(), EndCutRequest(),
                &ended)
        .ok();
  }
};

// Begins a cut (arming `ender`, which ends it) and waits until every live
// worker holds at it.
absl::StatusOr<Cut> HoldCut(AdminClients& clients,
                            const CheckpointOptions& options,
                            Progress& progress, CutEnder& ender) {
  const absl::Duration call = absl::Seconds(30);
  const absl::Time hold_start = absl::Now();
  BeginCutRequest begin;
  begin.set_lease_ms(30000);
  BeginCutResponse begun;
  RETURN_IF_ERROR(FromGrpc(clients.coordinator().BeginCut(
                               clients.Context(call).get(), begin, &begun),
                           "starting the cut"));
  ender.began = true;
  Cut cut;
  cut.cut = begun.cut();
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    cut.status.Clear();
    RETURN_IF_ERROR(FromGrpc(
        clients.coordinator().CutStatus(clients.Context(call).get(),
                                        CutStatusRequest(), &cut.status),
        "asking for the cut"));
    if (cut.status.cut() != cut.cut) {
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

absl::Status WriteManifest(const std::string& dir,
                           const google::protobuf::Message& manifest) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(manifest, &json, print)
           .ok()) {
    return absl::InternalError("cannot write the manifest as JSON");
  }
  const std::string path = dir + kManifest;
  {
    std::ofstream file(path + ".tmp", std::ios::trunc);
    file << json;
    file.flush();
    if (!file) return absl::InternalError("cannot write " + path + ".tmp");
  }
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    return absl::InternalError("cannot rename " + path + ".tmp");
  }
  return absl::OkStatus();
}

// Reads DIR/MANIFEST.json into `manifest`.
absl::Status ReadJson(const std::string& dir,
                      google::protobuf::Message* manifest) {
  std::ifstream file(dir + kManifest);
  if (!file) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no MANIFEST.json: not a checkpoint or export, or one "
        "that was not finished"));
  }
  std::stringstream json;
  json << file.rdbuf();
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(json.str(), manifest, parse)
           .ok()) {
    return absl::DataLossError(absl::StrCat(dir, kManifest, " does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  CheckpointManifest manifest;
  RETURN_IF_ERROR(ReadJson(dir, &manifest));
  if (manifest.format_version() != 1 || manifest.num_shards() == 0 ||
      manifest.shards_size() != static_cast<int>(manifest.num_shards())) {
    return absl::DataLossError(absl::StrCat(
        dir, kManifest, ": format version ", manifest.format_version(),
        " with ", manifest.shards_size(), " of ", manifest.num_shards(),
        " shards is not one this version reads"));
  }
  return manifest;
}

absl::StatusOr<CheckpointManifest> TakeCheckpoint(
    const CheckpointOptions& options) {
  if (options.servers.empty() || options.dir.empty()) {
    return absl::InvalidArgumentError("a checkpoint needs shards and a dir");
  }
  if (std::filesystem::exists(options.dir + kManifest)) {
    return absl::AlreadyExistsError(
        absl::StrCat(options.dir, " holds a checkpoint already"));
  }
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", options.dir, ": ", error.message()));
  }
  absl::StatusOr<AdminClients> clients = AdminClients::Connect(options);
  if (!clients.ok()) return clients.status();
  Progress progress("checkpoint", options.progress);

  CutEnder end_cut{*clients};
  ASSIGN_OR_RETURN(const Cut cut,
                   HoldCut(*clients, options, progress, end_cut));
  // 3. Every shard's part, at once.
  const absl::Time snapshot_start = absl::Now();
  progress.Say("every worker holds; writing the shards' parts");
  const size_t shards = options.servers.size();
  std::vector<SnapshotShardResponse> parts(shards);
  RETURN_IF_ERROR(OnEveryShard(shards, [&](size_t i) {
    SnapshotShardRequest request;
    request.set_dir(options.dir);
    return FromGrpc(
        clients->shard(i).SnapshotShard(clients->Context(absl::Hours(1)).get(),
                                        request, &parts[i]),
        absl::StrCat("snapshot of shard ", i, " (", options.servers[i], ")"));
  }));

  // 4. The manifest, last.
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_created_at(
      absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  manifest.set_cut(cut.cut);
  manifest.set_routing_version(kRoutingVersion);
  manifest.set_num_shards(static_cast<uint32_t>(shards));
  for (size_t i = 0; i < shards; ++i) {
    const SnapshotShardResponse& part = parts[i];
    if (part.shard_index() != i || part.num_shards() != shards) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.servers[i], " is shard ", part.shard_index(),
                       " of ", part.num_shards(), ", not shard ", i, " of ",
                       shards, ": give --servers in shard order"));
    }
    // Workers declare tables on every shard in turn, so two shards may
    // list the same tables in different orders.
    if (!SameTables(part.tables(), parts[0].tables())) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", i, " holds other tables than shard 0"));
    }
    CheckpointManifest::Shard* shard = manifest.add_shards();
    shard->set_index(static_cast<uint32_t>(i));
    shard->set_path(std::filesystem::path(part.path()).filename().string());
    shard->set_bytes(part.bytes());
  }
  for (const auto& [name, spec] : SortedByName(parts[0].tables())) {
    *manifest.add_tables() = spec;
  }
  for (const auto& worker : cut.status.workers()) {
    CheckpointManifest::Worker* entry = manifest.add_workers();
    entry->set_worker(worker.worker());
    entry->set_clock(worker.clock());
    entry->set_examples(worker.examples());
    entry->set_finished(worker.finished());
  }
  manifest.set_hold_seconds(cut.hold_seconds);
  manifest.set_snapshot_seconds(
      absl::ToDoubleSeconds(absl::Now() - snapshot_start));
  if (absl::Status written = WriteManifest(options.dir, manifest);
      !written.ok()) {
    return written;
  }
  progress.Say("done");
  return manifest;
}

absl::StatusOr<ExportManifest> ReadExportManifest(const std::string& dir) {
  ExportManifest manifest;
  RETURN_IF_ERROR(ReadJson(dir, &manifest));
  if (manifest.format_version() != 1 || manifest.num_shards() == 0 ||
      !manifest.has_model()) {
    return absl::DataLossError(
        absl::StrCat(dir, kManifest, " is not an export this version reads"));
  }
  for (const auto& table : manifest.tables()) {
    if (table.parts_size() != static_cast<int>(manifest.num_shards())) {
      return absl::DataLossError(absl::StrCat(
          dir, kManifest, ": table ", table.spec().name(), " has ",
          table.parts_size(), " parts for ", manifest.num_shards(), " shards"));
    }
  }
  return manifest;
}

absl::StatusOr<ExportManifest> TakeExport(const ExportOptions& options) {
  const CheckpointOptions& cluster = options.cluster;
  if (cluster.servers.empty() || cluster.dir.empty()) {
    return absl::InvalidArgumentError("an export needs shards and a dir");
  }
  if (std::filesystem::exists(cluster.dir + kManifest)) {
    return absl::AlreadyExistsError(
        absl::StrCat(cluster.dir, " holds an export already"));
  }
  ASSIGN_OR_RETURN(AdminClients clients, AdminClients::Connect(cluster));
  // The model's card and tables, from shard 0's specs.
  ListTablesResponse listed;
  RETURN_IF_ERROR(FromGrpc(
      clients.shard(0).ListTables(clients.Context(absl::Seconds(30)).get(),
                                  ListTablesRequest(), &listed),
      "listing the tables"));
  std::map<std::string, ModelCard> models;  // by name
  for (const TableInfo& table : listed.tables()) {
    if (!table.spec().has_model()) continue;
    const std::string& wide = table.spec().model().wide_table();
    models[wide.substr(0, wide.rfind(".wide"))] = table.spec().model();
  }
  std::vector<std::string> names;
  for (const auto& [name, card] : models) names.push_back(name);
  if (models.empty()) {
    return absl::NotFoundError(
        "the cluster holds no model a ps_worker declared (with a model card)");
  }
  std::string name = options.model;
  if (name.empty()) {
    if (models.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cluster holds several models (",
                       absl::StrJoin(names, ", "), "): name one"));
    }
    name = models.begin()->first;
  }
  auto model = models.find(name);
  if (model == models.end()) {
    return absl::NotFoundError(absl::StrCat("no model ", name, "; there are ",
                                            absl::StrJoin(names, ", ")));
  }
  const ModelCard& card = model->second;
  std::vector<std::string> tables;
  if (!card.embedding_table().empty()) tables.push_back(card.embedding_table());
  tables.push_back(card.wide_table());
  for (const std::string& dense : card.dense_tables()) tables.push_back(dense);

  std::error_code error;
  std::filesystem::create_directories(cluster.dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", cluster.dir, ": ", error.message()));
  }
  Progress progress("export", cluster.progress);
  CutEnder end_cut{clients};
  ASSIGN_OR_RETURN(const Cut cut, HoldCut(clients, cluster, progress, end_cut));
  const absl::Time export_start = absl::Now();
  progress.Say("every worker holds; the shards write the model's weights");
  const size_t shards = cluster.servers.size();
  std::vector<ExportShardResponse> parts(shards);
  RETURN_IF_ERROR(OnEveryShard(shards, [&](size_t i) {
    ExportShardRequest request;
    request.set_dir(cluster.dir);
    for (const std::string& table : tables) request.add_tables(table);
    request.set_format(options.fp16 ? ExportManifest::FP16
                                    : ExportManifest::FP32);
    return FromGrpc(
        clients.shard(i).ExportShard(clients.Context(absl::Hours(1)).get(),
                                     request, &parts[i]),
        absl::StrCat("export on shard ", i, " (", cluster.servers[i], ")"));
  }));

  ExportManifest manifest;
  manifest.set_format_version(1);
  manifest.set_created_at(
      absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  manifest.set_cut(cut.cut);
  manifest.set_routing_version(kRoutingVersion);
  manifest.set_num_shards(static_cast<uint32_t>(shards));
  *manifest.mutable_model() = card;
  manifest.set_model_name(name);
  manifest.set_format(options.fp16 ? ExportManifest::FP16
                                   : ExportManifest::FP32);
  for (size_t i = 0; i < shards; ++i) {
    if (parts[i].shard_index() != i || parts[i].num_shards() != shards) {
      return absl::FailedPreconditionError(
          absl::StrCat(cluster.servers[i], " is shard ", parts[i].shard_index(),
                       " of ", parts[i].num_shards(), ", not shard ", i, " of ",
                       shards, ": give --servers in shard order"));
    }
  }
  for (const std::string& table : tables) {
    ExportManifest::Table* entry = manifest.add_tables();
    for (const TableInfo& info : listed.tables()) {
      if (info.spec().name() == table) *entry->mutable_spec() = info.spec();
    }
    for (size_t i = 0; i < shards; ++i) {
      std::string relative;
      for (const auto& written : parts[i].tables()) {
        if (written.name() != table) continue;
        if (!written.path().empty()) {
          relative =
              std::filesystem::relative(written.path(), cluster.dir).string();
        }
        entry->set_rows(entry->rows() + written.rows());
        entry->set_bytes(entry->bytes() + written.bytes());
      }
      entry->add_parts(relative);
    }
  }
  manifest.set_hold_seconds(cut.hold_seconds);
  manifest.set_export_seconds(
      absl::ToDoubleSeconds(absl::Now() - export_start));
  RETURN_IF_ERROR(WriteManifest(cluster.dir, manifest));
  progress.Say("done");
  return manifest;
}

}  // namespace ps
