// File: client/shard_channels.h
//
// ShardChannels is where a client's calls go: a stub per shard it knows
// (the job's first job_shards(), then any that left the job), and one for
// pulls whose replies are read raw, redialled when
// a shard is found at a new address; the tables every shard of the job must
// have declared, so that a shard that joins (or comes back elsewhere) is
// declared them; and the clock coordinator's stub. Channels reconnect on
// their own, quickly, to a shard that restarts at the same address.
// Thread-safe. A shard redialled while calls to it are in flight does not
// pull the channel from under them: each call's grpc::ClientContext holds
// its channel until the call ends.

#ifndef PS_CLIENT_SHARD_CHANNELS_H_
#define PS_CLIENT_SHARD_CHANNELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "net/tls_credentials.h"
#include "proto/ps.grpc.pb.h"

namespace ps::client {

struct ChannelOptions {
  // TLS to the shards (net/tls_credentials.h). Default: plaintext.
  TlsFiles tls;
  // Largest message either way. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
};

class ShardChannels {
 public:
  // Shard i at servers[i], the coordinator at `coordinator`. The TLS
  // files' errors. REQUIRES: servers not empty.
  static absl::StatusOr<std::unique_ptr<ShardChannels>> Open(
      const std::vector<std::string>& servers, const std::string& coordinator,
      const ChannelOptions& options);

  // The shards known: the job's and those that left it.
  int num_shards() const;
  // How many shards the job has, as last looked up.
  size_t job_shards() const;
  // Shard i's stub. REQUIRES: i < num_shards().
  std::shared_ptr<ParameterServer::Stub> shard(int i) const;
  // Pull on shard i with the reply left in gRPC's buffers (the method's
  // name is PullMethod()), for PsClient to read rows from in place.
  // REQUIRES: i < num_shards().
  using RawPullStub = grpc::TemplatedGenericStub<PullRequest, grpc::ByteBuffer>;
  std::shared_ptr<RawPullStub> raw_pull(int i) const;
  // "/ps.ParameterServer/Pull", living as long as the process (a call's
  // grpc::ClientContext keeps a pointer to its method's name).
  static const std::string& PullMethod();

  // Records `spec` as declared (replacing a spec of its name) and returns
  // the job's shards to declare it on, together: a shard that joins after
  // this is given the spec by MoveShards().
  std::vector<int> RecordTable(const TableSpec& spec);

  // What the shards found at new addresses, or back in the job, lack.
  struct TablesToDeclare {
    std::vector<int> shards;
    std::vector<TableSpec> tables;
  };
  // Shards 0 to addresses.size() - 1 are the job's now, at `addresses`: a
  // shard at a new address is redialled, a shard past the job's old end
  // (it joined, or joined again) kept if its address is the same. Returns
  // those shards and every table recorded, to declare there.
  TablesToDeclare MoveShards(absl::Span<const std::string> addresses);

  std::shared_ptr<ParameterServer::Stub> coordinator() const;
  std::string coordinator_address() const;
  // Points the coordinator's stub at `address`; false if it already was.
  bool MoveCoordinator(const std::string& address);

 private:
  ShardChannels(const ChannelOptions& options,
                std::shared_ptr<grpc::ChannelCredentials> credentials)
      : options_(options), credentials_(std::move(credentials)) {}
  struct Dialled {
    std::shared_ptr<ParameterServer::Stub> stub;
    std::shared_ptr<RawPullStub> raw_pull;
  };
  Dialled Dial(const std::string& address) const;
  // Sets shard s (one past the last: adds it) to `address`.
  void SetShard(size_t s, const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ChannelOptions options_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<ParameterServer::Stub>> shards_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<RawPullStub>> raw_pulls_ ABSL_GUARDED_BY(mu_);
  // Where each of shards_ was dialled.
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  size_t job_shards_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TableSpec> declared_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ParameterServer::Stub> coordinator_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client

#endif  // PS_CLIENT_SHARD_CHANNELS_H_
