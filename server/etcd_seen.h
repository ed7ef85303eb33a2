// File: server/etcd_seen.h
//
// What a shard's data dir remembers of its etcd: the cluster id and the
// newest revision it saw (the ETCD_SEEN file), written at its start and
// every few seconds while it serves. Fencing a replaced primary rests on
// etcd's generation keys; an etcd restored from an older snapshot (or
// another etcd) would lift the fence, so a shard whose etcd went backwards
// refuses to start unless the operator accepts it.

#ifndef PS_SERVER_ETCD_SEEN_H_
#define PS_SERVER_ETCD_SEEN_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "net/etcd_client.h"

namespace ps::server {

// The position `data_dir` recorded; nullopt without one. DATA_LOSS for a
// file that does not parse.
absl::StatusOr<std::optional<net::EtcdPosition>> ReadEtcdSeen(
    const std::string& data_dir);

// Records `now` in `data_dir`.
absl::Status WriteEtcdSeen(const std::string& data_dir,
                           const net::EtcdPosition& now);

// FAILED_PRECONDITION, saying why, when `now` is another cluster than
// `seen`, or its revision is below it: etcd went backwards.
absl::Status CheckEtcdWentOn(const net::EtcdPosition& seen,
                             const net::EtcdPosition& now);

}  // namespace ps::server

#endif  // PS_SERVER_ETCD_SEEN_H_
