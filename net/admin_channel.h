// File: net/admin_channel.h
//
// AdminChannels: the Admin stubs of a cluster's shards and of its clock
// coordinator, over the credentials of the --tls_* files, and call contexts
// that carry the admin token. What ps_admin and the cluster operations of
// ops/ talk to the shards through.
//
// Owns its stubs; a stub is thread-safe, so OnEveryShard() calls them all at
// once.

#ifndef PS_NET_ADMIN_CHANNEL_H_
#define PS_NET_ADMIN_CHANNEL_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "net/tls_credentials.h"
#include "proto/admin.grpc.pb.h"

namespace ps::net {

class AdminChannels {
 public:
  // Shard i is servers[i]; the coordinator is `coordinator`, or servers[0]
  // when that is empty. `token` (empty: none) goes with every call.
  // INVALID_ARGUMENT for no servers; the TLS files' errors;
  // FAILED_PRECONDITION when the token would leave loopback in plaintext.
  static absl::StatusOr<AdminChannels> Connect(
      const std::vector<std::string>& servers, const std::string& coordinator,
      const TlsFiles& tls, const std::string& token);

  size_t size() const { return shards_.size(); }
  const std::string& address(size_t i) const { return servers_[i]; }
  const std::string& coordinator_address() const {
    return coordinator_address_;
  }
  Admin::Stub& shard(size_t i) const { return *shards_[i]; }
  Admin::Stub& coordinator() const { return *coordinator_; }

  // A context whose deadline is `timeout` from now, with the token.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  // Runs `call(i)` for every shard i, all at once; returns once all have.
  void OnEveryShard(const std::function<void(size_t)>& call) const;

  // Waits up to `grace` for every channel (the shards' and the
  // coordinator's) to connect, reconnecting as often as a failed attempt
  // allows (every 100 ms at first). Calls are fail-fast: one failed
  // connection attempt, as a loopback handshake that fails once, would
  // otherwise fail a command against a shard that is up. A shard that is
  // down costs the grace, then calls to it fail as before.
  void AwaitConnected(absl::Duration grace) const;

 private:
  AdminChannels() = default;

  std::vector<std::string> servers_;
  std::string coordinator_address_;
  std::string token_;
  std::vector<std::unique_ptr<Admin::Stub>> shards_;
  std::unique_ptr<Admin::Stub> coordinator_;
  // Every channel, the coordinator's last (AwaitConnected()).
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
};

}  // namespace ps::net

#endif  // PS_NET_ADMIN_CHANNEL_H_
