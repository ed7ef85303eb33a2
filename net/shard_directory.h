// File: net/shard_directory.h
//
// Where a job's shards are found under --etcd. Each shard keeps the key
// /ps/<job>/shards/<index> (its address and the job's shard count) alive
// under an etcd lease: a shard that stops revokes it and the key goes at
// once; one that dies stops renewing and the key goes when the lease
// expires. Workers and ps_admin read the keys instead of --servers.
//
// Thread-safe.

#ifndef PS_NET_SHARD_DIRECTORY_H_
#define PS_NET_SHARD_DIRECTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "net/etcd_client.h"

namespace ps::net {

// What a shard says of itself under its key.
struct ShardRecord {
  int index = 0;
  int num_shards = 1;
  // host:port that workers dial.
  std::string address;
};

// INVALID_ARGUMENT unless `job` is 1 to 64 of [a-z0-9_-] (it is part of
// every key).
absl::Status CheckJobName(const std::string& job);

// "/ps/<job>/shards/".
std::string ShardsPrefix(const std::string& job);

// Keeps one shard's record in etcd while it lives.
class ShardRegistration {
 public:
  // Writes `record` under a lease of `ttl` and renews it every third of
  // `ttl` on a thread of its own; a lease that lapsed (etcd unreachable for
  // longer) is granted again and the record written again. A record left by
  // a process of this index that died is waited out (up to `ttl` and a
  // second). Errors: etcd's, and ALREADY_EXISTS when another live process
  // holds the index.
  // `etcd` must outlive the registration.
  static absl::StatusOr<std::unique_ptr<ShardRegistration>> Start(
      EtcdClient* etcd, const std::string& job, const ShardRecord& record,
      absl::Duration ttl);

  // Revokes the lease: the record goes at once.
  ~ShardRegistration();

 private:
  ShardRegistration(EtcdClient* etcd, std::string key, std::string value,
                    absl::Duration ttl)
      : etcd_(etcd),
        key_(std::move(key)),
        value_(std::move(value)),
        ttl_(ttl) {}
  absl::Status Register();
  void KeepAlive();

  EtcdClient* const etcd_;
  const std::string key_, value_;
  const absl::Duration ttl_;
  int64_t lease_ = 0;  // the renewing thread's once started
  absl::Notification stop_;
  std::thread renewer_;
};

// Waits up to `wait` until every shard of `job` is registered (as many as
// their records' shard count, indexes 0 to count - 1, agreeing on the
// count); their addresses in index order. Until the wait is over, whatever
// stands in the way is waited out (etcd unreachable, a shard missing,
// records of an earlier shard count whose leases have not run out); then
// it is the error: DEADLINE_EXCEEDED naming the missing shards,
// FAILED_PRECONDITION for records that disagree, etcd's own.
absl::StatusOr<std::vector<std::string>> FindShards(EtcdClient& etcd,
                                                    const std::string& job,
                                                    absl::Duration wait);

}  // namespace ps::net

#endif  // PS_NET_SHARD_DIRECTORY_H_
