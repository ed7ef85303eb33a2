#include "client/shard_channels.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps::client {

absl::StatusOr<std::unique_ptr<ShardChannels>> ShardChannels::Open(
    const std::vector<std::string>& servers, const std::string& coordinator,
    const ChannelOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls));
  auto channels =
      std::unique_ptr<ShardChannels>(new ShardChannels(options, credentials));
  absl::MutexLock lock(&channels->mu_);
  for (size_t s = 0; s < servers.size(); ++s) channels->SetShard(s, servers[s]);
  channels->job_shards_ = servers.size();
  channels->coordinator_address_ = coordinator;
  channels->coordinator_ = channels->Dial(coordinator).stub;
  return channels;
}

void ShardChannels::SetShard(size_t s, const std::string& address) {
  Dialled dialled = Dial(address);
  if (s == shards_.size()) {
    shards_.push_back(std::move(dialled.stub));
    raw_pulls_.push_back(std::move(dialled.raw_pull));
    addresses_.push_back(address);
    return;
  }
  shards_[s] = std::move(dialled.stub);
  raw_pulls_[s] = std::move(dialled.raw_pull);
  addresses_[s] = address;
}

ShardChannels::Dialled ShardChannels::Dial(const std::string& address) const {
  grpc::ChannelArguments args;
  AddTlsChannelArguments(options_.tls, &args);
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  // Reconnect quickly to a shard that restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, credentials_, args);
  return {ParameterServer::NewStub(channel),
          std::make_shared<RawPullStub>(channel)};
}

int ShardChannels::num_shards() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(shards_.size());
}

size_t ShardChannels::job_shards() const {
  absl::ReaderMutexLock lock(&mu_);
  return job_shards_;
}

std::shared_ptr<ParameterServer::Stub> ShardChannels::shard(int i) const {
  absl::ReaderMutexLock lock(&mu_);
  return shards_[i];
}

const std::string& ShardChannels::PullMethod() {
  static const std::string* const method =
      new std::string("/ps.ParameterServer/Pull");
  return *method;
}

std::shared_ptr<ShardChannels::RawPullStub> ShardChannels::raw_pull(
    int i) const {
  absl::ReaderMutexLock lock(&mu_);
  return raw_pulls_[i];
}

std::vector<int> ShardChannels::RecordTable(const TableSpec& spec) {
  absl::MutexLock lock(&mu_);
  auto same_name = [&](const TableSpec& d) { return d.name() == spec.name(); };
  if (auto it = std::find_if(declared_.begin(), declared_.end(), same_name);
      it != declared_.end()) {
    *it = spec;
  } else {
    declared_.push_back(spec);
  }
  std::vector<int> shards;
  for (size_t s = 0; s < job_shards_; ++s)
    shards.push_back(static_cast<int>(s));
  return shards;
}

ShardChannels::TablesToDeclare ShardChannels::MoveShards(
    absl::Span<const std::string> addresses) {
  TablesToDeclare to_declare;
  absl::MutexLock lock(&mu_);
  for (size_t s = 0; s < addresses.size(); ++s) {
    const std::string& address = addresses[s];
    // A shard that left the job and joined again lacks tables declared
    // since, wherever it is.
    if (s < shards_.size() && addresses_[s] == address) {
      if (s >= job_shards_) to_declare.shards.push_back(static_cast<int>(s));
      continue;
    }
    LOG(INFO) << "shard " << s << " is at " << address
              << (s < shards_.size() ? " now (was " + addresses_[s] + ")"
                                     : std::string(" (joined the job)"));
    SetShard(s, address);
    to_declare.shards.push_back(static_cast<int>(s));
  }
  job_shards_ = addresses.size();
  to_declare.tables = declared_;
  return to_declare;
}

std::shared_ptr<ParameterServer::Stub> ShardChannels::coordinator() const {
  absl::ReaderMutexLock lock(&mu_);
  return coordinator_;
}

std::string ShardChannels::coordinator_address() const {
  absl::ReaderMutexLock lock(&mu_);
  return coordinator_address_;
}

bool ShardChannels::MoveCoordinator(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (address == coordinator_address_) return false;
  LOG(INFO) << "the clock coordinator is now " << address << " (was "
            << coordinator_address_ << ")";
  coordinator_address_ = address;
  coordinator_ = Dial(address).stub;
  return true;
}

}  // namespace ps::client
