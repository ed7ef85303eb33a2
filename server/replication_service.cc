// ReplicationService and ReplicaFollower: copies travel as files of a
// RocksDB checkpoint, read in pieces; the feed as batches of entries, each
// Follow acknowledging the batch before.

#include "server/replication_service.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/transient_error.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "net/grpc_status.h"
#include "server/bearer_token.h"

namespace ps::server {

using ::ps::net::FromGrpcStatus;
using ::ps::net::ToGrpcStatus;
namespace {

constexpr uint64_t kDefaultCopyPiece = 1 << 20;
constexpr uint64_t kMaxCopyPiece = 16 << 20;
constexpr uint32_t kDefaultFollowEntries = 256;
constexpr uint64_t kDefaultFollowBytes = 32 << 20;
// A Follow waits at most this long on the primary, whatever it asks.
constexpr absl::Duration kMaxFollowWait = absl::Seconds(1);

constexpr char kTokenNeeded[] =
    "the admin token (ps_server --admin_token_file)";

void AddToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace

ReplicationService::ReplicationService(const ReplicationServiceOptions& options,
                                       embedding::EmbeddingStore* store,
                                       embedding::ReplicationFeed* feed)
    : options_(options), store_(store), feed_(feed) {
  // Copies a process before this one left.
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.data_dir, error)) {
    if (entry.path().filename().string().rfind("replica_copy-", 0) == 0) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
}

ReplicationService::~ReplicationService() {
  absl::MutexLock lock(&mu_);
  while (!copies_.empty()) EndCopyLocked(copies_.begin()->first);
}

grpc::ServerUnaryReactor* ReplicationService::BeginCopy(
    grpc::CallbackServerContext* context, const BeginCopyRequest*,
    BeginCopyResponse* response) {
  absl::Status status =
      CheckBearerToken(*context, options_.admin_token, kTokenNeeded);
  if (status.ok()) status = DoBeginCopy(response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status ReplicationService::DoBeginCopy(BeginCopyResponse* response) {
  absl::MutexLock lock(&mu_);
  ExpireCopiesLocked();
  if (copies_.size() >= kMaxCopies) {
    return MarkTransient(absl::ResourceExhaustedError(absl::StrCat(
        kMaxCopies, " replicas are copying this shard already; retry")));
  }
  const uint64_t copy_id = next_copy_id_++;
  const std::string dir =
      absl::StrCat(options_.data_dir, "/replica_copy-", copy_id);
  const absl::Time began = absl::Now();
  const uint64_t epoch = options_.slot_map_epoch();
  ASSIGN_OR_RETURN(const embedding::StoreReplication::ReplicaCut cut,
                   store_->replication().CheckpointForReplica(dir));
  Copy& copy = copies_[copy_id];
  copy.dir = dir;
  copy.last_read = absl::Now();
  BeginCopyResponse& listing = copy.listing;
  listing.set_copy_id(copy_id);
  listing.set_feed_id(feed_->id());
  listing.set_follower_id(cut.follower);
  listing.set_start_sequence(cut.start_sequence);
  listing.set_ledger(cut.ledger);
  listing.set_shard_index(options_.shard_index);
  listing.set_num_shards(options_.num_shards);
  absl::Status status = options_.write_slot_map(dir);
  // The map went with rows that moved under it: a map that changed around
  // the cut may not match the copy's rows.
  if (status.ok() && options_.slot_map_epoch() != epoch) {
    status = MarkTransient(absl::UnavailableError(
        "the slot map changed while the copy was cut; retry"));
  }
  uint64_t bytes = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(dir, error)) {
    if (!status.ok() || !entry.is_regular_file()) continue;
    CopyFile* file = listing.add_files();
    file->set_path(std::filesystem::relative(entry.path(), dir).string());
    file->set_bytes(entry.file_size());
    bytes += file->bytes();
  }
  if (status.ok() && error) {
    status = absl::InternalError(
        absl::StrCat("listing the copy in ", dir, ": ", error.message()));
  }
  if (!status.ok()) {
    feed_->RemoveFollower(cut.follower);
    EndCopyLocked(copy_id);
    return status;
  }
  LOG(INFO) << "copy " << copy_id << " for a replica: " << listing.files_size()
            << " files, " << bytes << " bytes, cut at feed entry "
            << cut.start_sequence << " in "
            << absl::FormatDuration(absl::Now() - began);
  *response = listing;
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ReplicationService::ReadCopyFile(
    grpc::CallbackServerContext* context, const ReadCopyFileRequest* request,
    ReadCopyFileResponse* response) {
  absl::Status status =
      CheckBearerToken(*context, options_.admin_token, kTokenNeeded);
  if (status.ok()) status = DoReadCopyFile(*request, response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status ReplicationService::DoReadCopyFile(
    const ReadCopyFileRequest& request, ReadCopyFileResponse* response) {
  absl::MutexLock lock(&mu_);
  ExpireCopiesLocked();
  auto copy = copies_.find(request.copy_id());
  if (copy == copies_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("copy ", request.copy_id(),
                     " is not being read (it ended, or was not read for ",
                     absl::FormatDuration(options_.copy_timeout), ")"));
  }
  copy->second.last_read = absl::Now();
  const BeginCopyResponse& listing = copy->second.listing;
  // Only the files the copy listed: never a path of the requester's making.
  const auto listed = std::find_if(
      listing.files().begin(), listing.files().end(),
      [&](const CopyFile& file) { return file.path() == request.path(); });
  if (listed == listing.files().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the copy has no file ", request.path()));
  }
  // Reading the copy keeps its follower registered.
  std::vector<FeedEntry> none;
  absl::Status following =
      feed_->Read(listing.follower_id(), listing.start_sequence(), 0,
                  absl::ZeroDuration(), &none);
  if (absl::IsFailedPrecondition(following)) {
    const uint64_t id = copy->first;
    EndCopyLocked(id);  // its files too, and its place among kMaxCopies
    return CopyDropped(id);
  }
  RETURN_IF_ERROR(following);
  const uint64_t piece = std::min<uint64_t>(
      request.max_bytes() == 0 ? kDefaultCopyPiece : request.max_bytes(),
      kMaxCopyPiece);
  if (request.offset() >= listed->bytes()) return absl::OkStatus();
  const uint64_t size = std::min(piece, listed->bytes() - request.offset());
  std::ifstream in(copy->second.dir + "/" + request.path(), std::ios::binary);
  std::string data(size, '\0');
  in.seekg(static_cast<std::streamoff>(request.offset()));
  in.read(data.data(), static_cast<std::streamsize>(size));
  if (!in) {
    return absl::InternalError(absl::StrCat(
        "reading ", request.path(), " of copy ", copy->first, " failed"));
  }
  response->set_data(std::move(data));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ReplicationService::EndCopy(
    grpc::CallbackServerContext* context, const EndCopyRequest* request,
    EndCopyResponse*) {
  absl::Status status =
      CheckBearerToken(*context, options_.admin_token, kTokenNeeded);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    auto copy = copies_.find(request->copy_id());
    if (copy != copies_.end()) {
      // Said now rather than at the first Follow: the replica copies again
      // before it opens a store that could never follow.
      if (!feed_->HasFollower(copy->second.listing.follower_id()))
        status = CopyDropped(copy->first);
      EndCopyLocked(request->copy_id());
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status ReplicationService::CopyDropped(uint64_t id) {
  return absl::AbortedError(absl::StrCat(
      "copy ", id,
      " was abandoned: the primary's feed dropped its place (it fell more "
      "than the primary's --max_replication_lag_mb behind, or was not read "
      "for its --replica_timeout_ms): copy again"));
}

void ReplicationService::EndCopyLocked(uint64_t id) {
  auto copy = copies_.find(id);
  if (copy == copies_.end()) return;
  std::error_code error;
  std::filesystem::remove_all(copy->second.dir, error);
  if (error) {
    LOG(WARNING) << "removing " << copy->second.dir << ": " << error.message();
  }
  copies_.erase(copy);
}

void ReplicationService::ExpireCopiesLocked() {
  const absl::Time now = absl::Now();
  for (auto it = copies_.begin(); it != copies_.end();) {
    const uint64_t id = it->first;
    const bool expired = now - it->second.last_read > options_.copy_timeout;
    ++it;
    if (expired) {
      LOG(WARNING) << "copy " << id << " was not read for "
                   << absl::FormatDuration(options_.copy_timeout)
                   << ": removed";
      EndCopyLocked(id);
    }
  }
}

grpc::ServerUnaryReactor* ReplicationService::Follow(
    grpc::CallbackServerContext* context, const FollowRequest* request,
    FollowResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status =
      CheckBearerToken(*context, options_.admin_token, kTokenNeeded);
  if (status.ok() && request->feed_id() != feed_->id()) {
    status = absl::FailedPreconditionError(
        "this is not the feed the replica was copied from (the primary "
        "restarted): copy it again");
  }
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  // Answered by the feed when an entry comes (or the wait ends), without
  // holding a gRPC thread meanwhile.
  feed_->WhenReadable(
      request->follower_id(), request->applied_sequence(),
      request->max_entries() == 0 ? kDefaultFollowEntries
                                  : request->max_entries(),
      request->max_bytes() == 0 ? kDefaultFollowBytes : request->max_bytes(),
      absl::Now() +
          std::min(absl::Milliseconds(request->wait_ms()), kMaxFollowWait),
      [this, reactor, response](absl::Status read,
                                std::vector<FeedEntry> entries) {
        if (read.ok()) {
          for (FeedEntry& entry : entries) {
            *response->add_entries() = std::move(entry);
          }
          response->set_head_sequence(feed_->head());
          response->set_slot_map_epoch(options_.slot_map_epoch());
        }
        reactor->Finish(ToGrpcStatus(read));
      });
  return reactor;
}

namespace {

// One copy of the primary's store into `data_dir`; the paths it wrote go to
// `written` as they are made.
absl::StatusOr<ReplicaStart> CopyOnce(Replication::Stub& stub,
                                      const std::string& data_dir,
                                      const CopyOptions& options,
                                      std::vector<std::string>* written) {
  auto context_for_call = [&](absl::Duration timeout) {
    auto context = std::make_unique<grpc::ClientContext>();
    AddToken(*context, options.token);
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return context;
  };
  BeginCopyResponse copy;
  RETURN_IF_ERROR(FromGrpcStatus(
      stub.BeginCopy(context_for_call(options.call_timeout).get(),
                     BeginCopyRequest(), &copy),
      "asking the primary for a copy"));
  ReplicaStart start;
  start.feed_id = copy.feed_id();
  start.follower_id = copy.follower_id();
  start.start_sequence = copy.start_sequence();
  start.ledger = copy.ledger();
  start.shard_index = copy.shard_index();
  start.num_shards = copy.num_shards();
  for (const CopyFile& file : copy.files()) {
    const std::filesystem::path path =
        std::filesystem::path(data_dir) / file.path();
    if (file.path().empty() || file.path().find("..") != std::string::npos ||
        std::filesystem::path(file.path()).is_absolute()) {
      return absl::DataLossError(
          absl::StrCat("the primary listed a file named ", file.path()));
    }
    std::filesystem::create_directories(path.parent_path());
    written->push_back(path.string());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    uint64_t offset = 0;
    while (offset < file.bytes()) {
      ReadCopyFileRequest request;
      request.set_copy_id(copy.copy_id());
      request.set_path(file.path());
      request.set_offset(offset);
      ReadCopyFileResponse piece;
      RETURN_IF_ERROR(FromGrpcStatus(
          stub.ReadCopyFile(
              context_for_call(std::min(options.call_timeout, absl::Minutes(1)))
                  .get(),
              request, &piece),
          absl::StrCat("copying ", file.path(), " from the primary")));
      if (piece.data().empty()) {
        return absl::DataLossError(absl::StrCat(
            file.path(), " ended at ", offset, " of ", file.bytes(), " bytes"));
      }
      out.write(piece.data().data(),
                static_cast<std::streamsize>(piece.data().size()));
      offset += piece.data().size();
    }
    out.close();
    if (!out) {
      return absl::InternalError(absl::StrCat("writing ", path.string()));
    }
    start.bytes_copied += file.bytes();
  }
  EndCopyRequest end;
  end.set_copy_id(copy.copy_id());
  EndCopyResponse ended;
  const absl::Status status = FromGrpcStatus(
      stub.EndCopy(
          context_for_call(std::min(options.call_timeout, absl::Seconds(30)))
              .get(),
          end, &ended),
      "ending the copy");
  // Only an abandoned copy matters here: the primary removes the copy at
  // its next BeginCopy anyway.
  if (absl::IsAborted(status)) return status;
  return start;
}

}  // namespace

absl::StatusOr<ReplicaStart> CopyFromPrimary(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& data_dir,
    const CopyOptions& options) {
  if (std::filesystem::exists(data_dir + "/CURRENT")) {
    return absl::FailedPreconditionError(
        absl::StrCat(data_dir,
                     " holds a store already: a replica copies into an empty "
                     "data dir"));
  }
  auto stub = Replication::NewStub(channel);
  absl::Status status;
  for (int attempt = 1; attempt <= std::max(1, options.attempts); ++attempt) {
    std::vector<std::string> written;
    absl::StatusOr<ReplicaStart> start =
        CopyOnce(*stub, data_dir, options, &written);
    if (start.ok()) return start;
    status = start.status();
    // Abandoned (it fell behind), or refused for now (other replicas
    // copying, the slot map changing): taken again from the start.
    const bool again = absl::IsAborted(status) ||
                       absl::IsResourceExhausted(status) ||
                       absl::IsUnavailable(status);
    if (!again) return status;
    LOG(WARNING) << "copy " << attempt << " of at most " << options.attempts
                 << " failed (" << status.message()
                 << "); deleting it and copying again";
    for (const std::string& path : written) {
      std::error_code error;
      std::filesystem::remove(path, error);
    }
    absl::SleepFor(std::min(absl::Seconds(attempt), absl::Seconds(10)));
  }
  return absl::Status(status.code(), absl::StrCat(options.attempts,
                                                  " copies failed, the last: ",
                                                  status.message()));
}

ReplicaFollower::ReplicaFollower(const ReplicaFollowerOptions& options,
                                 std::shared_ptr<grpc::Channel> channel,
                                 embedding::EmbeddingStore* store,
                                 const ReplicaStart& start)
    : options_(options),
      stub_(Replication::NewStub(channel)),
      store_(store),
      start_(start),
      applied_(start.start_sequence),
      primary_head_(start.start_sequence) {}

ReplicaFollower::~ReplicaFollower() { Stop(); }

void ReplicaFollower::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void ReplicaFollower::Start() {
  thread_ = std::thread([this] { Run(); });
}

absl::Status ReplicaFollower::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void ReplicaFollower::Run() {
  absl::Time failing_since = absl::InfiniteFuture();
  // Since when the primary's slot map epoch has differed from this
  // replica's (InfiniteFuture: it does not).
  absl::Time maps_differ_since = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(10);
  absl::BitGen random;
  while (!stop_.HasBeenNotified()) {
    FollowResponse response;
    const std::optional<grpc::Status> followed = CallFollow(&response);
    if (!followed.has_value()) return;
    // Entries that came are applied even when stopping (for a promotion):
    // the primary may have acknowledged them (async).
    absl::Status status = FromGrpcStatus(
        *followed, absl::StrCat("following the primary ", options_.primary));
    if (!status.ok()) {
      const absl::Time now = absl::Now();
      if (failing_since == absl::InfiniteFuture()) failing_since = now;
      const bool gone = absl::IsFailedPrecondition(status) ||
                        absl::IsInvalidArgument(status) ||
                        absl::IsUnauthenticated(status);
      if (gone || now - failing_since > options_.retry_for) {
        LOG(ERROR) << "this replica stopped following: " << status;
        absl::MutexLock lock(&mu_);
        error_ = status;
        return;
      }
      LOG_EVERY_N(WARNING, 50) << status << "; retrying";
      stop_.WaitForNotificationWithTimeout(backoff *
                                           absl::Uniform(random, 0.5, 1.5));
      backoff = std::min(backoff * 2, absl::Seconds(1));
      continue;
    }
    failing_since = absl::InfiniteFuture();
    backoff = absl::Milliseconds(10);
    primary_head_ = response.head_sequence();
    if (response.slot_map_epoch() == options_.slot_map_epoch()) {
      maps_differ_since = absl::InfiniteFuture();
    } else if (maps_differ_since == absl::InfiniteFuture()) {
      maps_differ_since = absl::Now();
    }
    if (absl::Now() - maps_differ_since > options_.slot_map_mismatch_grace) {
      absl::MutexLock lock(&mu_);
      error_ = absl::FailedPreconditionError(
          absl::StrCat("the primary's slot map is at epoch ",
                       response.slot_map_epoch(), ", this replica's copy at ",
                       options_.slot_map_epoch(), " for more than ",
                       absl::FormatDuration(options_.slot_map_mismatch_grace),
                       " (slots moved since): copy it again"));
      LOG(ERROR) << "this replica stopped following: " << error_;
      return;
    }
    if (status = ApplyEntries(response); !status.ok()) {
      absl::MutexLock lock(&mu_);
      error_ = status;
      return;
    }
  }
}

std::optional<grpc::Status> ReplicaFollower::CallFollow(
    FollowResponse* response) {
  FollowRequest request;
  request.set_feed_id(start_.feed_id);
  request.set_follower_id(start_.follower_id);
  request.set_applied_sequence(applied_.load());
  request.set_max_entries(options_.max_entries);
  request.set_max_bytes(options_.max_bytes);
  request.set_wait_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.follow_wait)));
  grpc::ClientContext context;
  AddToken(context, options_.token);
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.follow_wait +
                                          absl::Seconds(5)));
  {
    absl::MutexLock lock(&mu_);
    if (stop_.HasBeenNotified()) return std::nullopt;
    in_flight_ = &context;
  }
  const grpc::Status followed = stub_->Follow(&context, request, response);
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
  }
  return followed;
}

absl::Status ReplicaFollower::ApplyEntries(const FollowResponse& response) {
  for (const FeedEntry& entry : response.entries()) {
    absl::Status status =
        entry.sequence() != applied_.load() + 1
            ? absl::DataLossError(absl::StrCat("the primary sent feed entry ",
                                               entry.sequence(), " after ",
                                               applied_.load()))
            : store_->replication().ApplyFeedEntry(entry);
    if (!status.ok()) {
      LOG(ERROR) << "this replica stopped following: entry " << entry.sequence()
                 << ": " << status;
      return status;
    }
    applied_ = entry.sequence();
  }
  return absl::OkStatus();
}

}  // namespace ps::server
