#include "base/checkpoint_client.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/routing.h"
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

// Prints to stderr once `start` is 3 s old, if asked.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void Say(const std::string& line) {
    if (enabled_ && absl::Now() - start_ > absl::Seconds(3)) {
      std::fprintf(stderr, "checkpoint: %s\n", line.c_str());
    }
  }

 private:
  const bool enabled_;
  const absl::Time start_ = absl::Now();
};

absl::Status WriteManifest(const std::string& dir,
                           const CheckpointManifest& manifest) {
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

}  // namespace

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  std::ifstream file(dir + kManifest);
  if (!file) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no MANIFEST.json: not a checkpoint, or one that was "
        "not finished"));
  }
  std::stringstream json;
  json << file.rdbuf();
  CheckpointManifest manifest;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(json.str(), &manifest, parse)
           .ok()) {
    return absl::DataLossError(absl::StrCat(dir, kManifest, " does not parse"));
  }
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
  Progress progress(options.progress);
  const absl::Duration call = absl::Seconds(30);

  // 1. The cut.
  const absl::Time hold_start = absl::Now();
  BeginCutRequest begin;
  begin.set_lease_ms(30000);
  BeginCutResponse cut;
  if (absl::Status begun =
          FromGrpc(clients->coordinator().BeginCut(clients->Context(call).get(),
                                                   begin, &cut),
                   "starting the cut");
      !begun.ok()) {
    return begun;
  }
  // From here on the cut ends whatever happens.
  struct EndCut {
    AdminClients& clients;
    ~EndCut() {
      EndCutResponse ended;
      clients.coordinator()
          .EndCut(clients.Context(absl::Seconds(30)).get(), EndCutRequest(),
                  &ended)
          .ok();
    }
  } end_cut{*clients};

  // 2. Every live worker at the cut.
  CutStatusResponse status;
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    status.Clear();
    if (absl::Status asked = FromGrpc(
            clients->coordinator().CutStatus(clients->Context(call).get(),
                                             CutStatusRequest(), &status),
            "asking for the cut");
        !asked.ok()) {
      return asked;
    }
    if (status.cut() != cut.cut()) {
      return absl::AbortedError(absl::StrCat(
          "the cut at clock ", cut.cut(),
          " ended before every worker reached it (its lease ran out, or the "
          "coordinator restarted)"));
    }
    if (status.ready()) break;
    std::vector<std::string> behind;
    for (const auto& worker : status.workers()) {
      if (worker.live() && worker.clock() < cut.cut())
        behind.push_back(absl::StrCat(worker.worker(), " at ", worker.clock()));
    }
    if (absl::Now() - hold_start > options.hold_timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("workers did not reach the cut at clock ", cut.cut(),
                       " within ", absl::FormatDuration(options.hold_timeout),
                       "; still behind: ", absl::StrJoin(behind, ", ")));
    }
    progress.Say(absl::StrCat("waiting for workers to reach clock ", cut.cut(),
                              ": ", absl::StrJoin(behind, ", ")));
    absl::SleepFor(pause);
    pause = std::min(2 * pause, absl::Milliseconds(100));
  }
  const double hold_seconds = absl::ToDoubleSeconds(absl::Now() - hold_start);

  // 3. Every shard's part, at once.
  const absl::Time snapshot_start = absl::Now();
  progress.Say("every worker holds; writing the shards' parts");
  const size_t shards = options.servers.size();
  std::vector<SnapshotShardResponse> parts(shards);
  std::vector<absl::Status> results(shards);
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < shards; ++i) {
      threads.emplace_back([&, i] {
        SnapshotShardRequest request;
        request.set_dir(options.dir);
        results[i] = FromGrpc(
            clients->shard(i).SnapshotShard(
                clients->Context(absl::Hours(1)).get(), request, &parts[i]),
            absl::StrCat("snapshot of shard ", i, " (", options.servers[i],
                         ")"));
      });
    }
    for (auto& thread : threads) thread.join();
  }
  for (const absl::Status& result : results) {
    if (!result.ok()) return result;
  }

  // 4. The manifest, last.
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_created_at(
      absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  manifest.set_cut(cut.cut());
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
    if (part.tables_size() != parts[0].tables_size() ||
        !std::equal(part.tables().begin(), part.tables().end(),
                    parts[0].tables().begin(),
                    [](const TableSpec& a, const TableSpec& b) {
                      return google::protobuf::util::MessageDifferencer::Equals(
                          a, b);
                    })) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", i, " holds other tables than shard 0"));
    }
    CheckpointManifest::Shard* shard = manifest.add_shards();
    shard->set_index(static_cast<uint32_t>(i));
    shard->set_path(std::filesystem::path(part.path()).filename().string());
    shard->set_bytes(part.bytes());
  }
  *manifest.mutable_tables() = parts[0].tables();
  for (const auto& worker : status.workers()) {
    CheckpointManifest::Worker* entry = manifest.add_workers();
    entry->set_worker(worker.worker());
    entry->set_clock(worker.clock());
    entry->set_examples(worker.examples());
    entry->set_finished(worker.finished());
  }
  manifest.set_hold_seconds(hold_seconds);
  manifest.set_snapshot_seconds(
      absl::ToDoubleSeconds(absl::Now() - snapshot_start));
  if (absl::Status written = WriteManifest(options.dir, manifest);
      !written.ok()) {
    return written;
  }
  progress.Say("done");
  return manifest;
}

}  // namespace ps
