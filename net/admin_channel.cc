#include "net/admin_channel.h"

#include <thread>

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps::net {

absl::StatusOr<AdminChannels> AdminChannels::Connect(
    const std::vector<std::string>& servers, const std::string& coordinator,
    const TlsFiles& tls, const std::string& token) {
  if (servers.empty()) {
    return absl::InvalidArgumentError("no shard to talk to");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  AdminChannels channels;
  channels.servers_ = servers;
  channels.coordinator_address_ =
      coordinator.empty() ? servers[0] : coordinator;
  std::vector<std::string> addresses = servers;
  addresses.push_back(channels.coordinator_address_);
  if (absl::Status private_token =
          CheckTokenStaysPrivate(token, tls, addresses);
      !private_token.ok()) {
    return private_token;
  }
  channels.token_ = token;
  auto connect = [&](const std::string& address) {
    grpc::ChannelArguments arguments;
    AddTlsChannelArguments(tls, &arguments);
    // A move's pause answers with the source's push ledgers (up to about
    // 12 MiB for 4096 workers), beyond gRPC's 4 MiB default.
    arguments.SetMaxReceiveMessageSize(256 << 20);
    // A failed connection attempt is retried after 100 ms rather than
    // gRPC's 1 s (AwaitConnected()).
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    channels.channels_.push_back(
        grpc::CreateCustomChannel(address, *credentials, arguments));
    return Admin::NewStub(channels.channels_.back());
  };
  for (const std::string& server : servers)
    channels.shards_.push_back(connect(server));
  channels.coordinator_ = connect(channels.coordinator_address_);
  return channels;
}

std::unique_ptr<grpc::ClientContext> AdminChannels::Context(
    absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!token_.empty())
    context->AddMetadata("authorization", "Bearer " + token_);
  return context;
}

void AdminChannels::AwaitConnected(absl::Duration grace) const {
  const auto deadline = absl::ToChronoTime(absl::Now() + grace);
  std::vector<std::thread> threads;
  threads.reserve(channels_.size());
  for (const std::shared_ptr<grpc::Channel>& channel : channels_) {
    threads.emplace_back(
        [&channel, deadline] { channel->WaitForConnected(deadline); });
  }
  for (std::thread& thread : threads) thread.join();
}

void AdminChannels::OnEveryShard(
    const std::function<void(size_t)>& call) const {
  std::vector<std::thread> threads;
  threads.reserve(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    threads.emplace_back([&call, i] { call(i); });
  for (std::thread& thread : threads) thread.join();
}

}  // namespace ps::net
