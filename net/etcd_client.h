// File: net/etcd_client.h
//
// EtcdClient talks to an etcd cluster over its v3 gRPC API
// (proto/etcd_rpc.proto): keys, compare-and-swap, leases and watches, which
// is what the cluster's coordination under --etcd needs. Each call goes to
// the endpoint that answered last and moves on to the next one when that is
// unavailable, so a client outlives the loss of a member of the cluster;
// errors come back as absl::Status with the call named.
//
// Thread-safe: many threads may call at once. A Watch runs on a thread of
// its own and calls back from it.

#ifndef PS_NET_ETCD_CLIENT_H_
#define PS_NET_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "net/etcd_values.h"
#include "net/tls_credentials.h"
#include "proto/etcd_rpc.grpc.pb.h"

namespace ps::net {

struct EtcdOptions {
  // host:port of the cluster's members (client URLs without the scheme).
  // REQUIRED: not empty.
  std::vector<std::string> endpoints;
  // Deadline of one call to one member. Default: 5 s.
  absl::Duration call_timeout = absl::Seconds(5);
  // TLS to the members (etcd's https client URLs): the CA that signed
  // their certificates, and this client's certificate and key for etcd's
  // --client-cert-auth. Default: none (plaintext).
  TlsFiles tls;
  // etcd's own authentication (auth enabled): the user and password a
  // token is asked for, at Connect() and again whenever etcd says the token
  // ended. Default: none.
  std::string user;
  std::string password;
};

// A running watch; destroying it (or Cancel()) stops the callbacks.
class EtcdWatch {
 public:
  ~EtcdWatch();
  // Stops the watch and waits for a callback in progress. Idempotent; not
  // from inside the watch's own callback.
  void Cancel();
  // Why the watch ended on its own (OK while it runs or after Cancel()).
  absl::Status status();

 private:
  friend class EtcdClient;
  using Stream = grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                          etcdserverpb::WatchResponse>;
  EtcdWatch() = default;
  // The watch's thread: calls `on_event` for each event `stream` reads
  // until it ends or the watch is cancelled; then records why it ended.
  void ReadEvents(Stream& stream,
                  const std::function<void(const EtcdEvent&)>& on_event);

  grpc::ClientContext context_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex cancel_mu_;
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class EtcdClient {
 public:
  // INVALID_ARGUMENT without endpoints. Connects lazily: a cluster that is
  // down fails the first call, not this.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(
      const EtcdOptions& options);

  // The value at `key`; NOT_FOUND when there is none.
  absl::StatusOr<EtcdValue> Get(absl::string_view key);
  // The cluster and its revision now (a count-only read).
  absl::StatusOr<EtcdPosition> Position();
  // Every key that starts with `prefix`, in key order.
  absl::StatusOr<std::vector<EtcdValue>> GetPrefix(absl::string_view prefix);

  // Sets `key`, attached to `lease` unless it is 0; the revision it made.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease = 0);
  // Compare-and-swap: sets `key` only if its mod revision is
  // `expected_mod_revision` (0: only if the key does not exist), in one
  // transaction, and only if every one of `also` holds too. Whether it did.
  absl::StatusOr<bool> PutIf(absl::string_view key, absl::string_view value,
                             int64_t expected_mod_revision, int64_t lease = 0,
                             const std::vector<EtcdCondition>& also = {});
  // Deletes `key`, or every key under `prefix`; how many went.
  absl::StatusOr<int64_t> Delete(absl::string_view key);
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix);

  // A lease of at least `ttl` (whole seconds, at least 1); its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // Renews `lease` once; the time it has left. NOT_FOUND once it expired
  // (its keys are gone). `timeout` (per member; default: the options')
  // bounds how long a renewal may block.
  absl::StatusOr<absl::Duration> KeepAlive(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration());
  // At most the time `lease` has left without a renewal (etcd answers
  // whole seconds, rounded down: this is that plus one); zero once it
  // expired (or never existed). `timeout` as for KeepAlive().
  absl::StatusOr<absl::Duration> LeaseTimeLeft(
      int64_t lease, absl::Duration timeout = absl::ZeroDuration());
  // Ends `lease` now, deleting its keys; `timeout` as for KeepAlive().
  absl::Status RevokeLease(int64_t lease,
                           absl::Duration timeout = absl::ZeroDuration());

  // Calls `on_event` for every change to a key under `prefix` from
  // `start_revision` on (0: from now), in revision order, until the watch
  // is cancelled or its stream fails (then status() says why). A member
  // that does not confirm the watch within the call timeout fails it;
  // PERMISSION_DENIED when etcd refuses it (keys beyond the user's role).
  absl::StatusOr<std::unique_ptr<EtcdWatch>> WatchPrefix(
      absl::string_view prefix, int64_t start_revision,
      std::function<void(const EtcdEvent&)> on_event);

  // The end of the range of keys that start with `prefix` (etcd's
  // range_end): `prefix` with its last byte that is not 0xff incremented.
  static std::string PrefixEnd(absl::string_view prefix);

 private:
  struct Member {
    std::string endpoint;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };

  explicit EtcdClient(const EtcdOptions& options) : options_(options) {}

  // With a user: asks `member` for a token, which later calls carry.
  absl::Status Authenticate(Member& member);
  // Adds the token, if any, to a call's metadata.
  void AddToken(grpc::ClientContext& context);

  // Runs `call(member, context)` on the member that answered last, then on
  // each other member while the answer is UNAVAILABLE or DEADLINE_EXCEEDED,
  // each with a deadline of `timeout` (zero: options_.call_timeout).
  absl::Status OnSomeMember(
      absl::string_view what,
      const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
      absl::Duration timeout = absl::ZeroDuration());

  const EtcdOptions options_;
  std::vector<Member> members_;
  std::atomic<size_t> current_{0};
  absl::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
};

}  // namespace ps::net

#endif  // PS_NET_ETCD_CLIENT_H_
