// File: cluster/etcd_seen.h
//
// What a shard's data dir remembers of its etcd: the cluster id and the
// newest revision it saw (the ETCD_SEEN file), written at its start and
// every few seconds while it serves. Fencing a replaced primary rests on
// etcd's generation keys; an etcd restored from an older snapshot (or
// another etcd) would lift the fence, so a shard whose etcd went backwards
// refuses to start unless the operator accepts it.

#ifndef PS_CLUSTER_ETCD_SEEN_H_
#define PS_CLUSTER_ETCD_SEEN_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cluster/coordination_store.h"
#include "net/etcd_values.h"

namespace ps::cluster {

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

// At a start: FAILED_PRECONDITION when `store` went backwards since
// `data_dir` last saw it (CheckEtcdWentOn()), unless `accept_rollback`
// (--accept_etcd_rollback: logged, and OK).
absl::Status CheckStoreWentOn(const std::string& data_dir,
                              CoordinationStore& store, bool accept_rollback);

// While serving: records where `store` is in `data_dir`, after checking
// that it went on (unless `unchecked`); a failure is logged, not returned.
void RecordStoreSeen(const std::string& data_dir, CoordinationStore& store,
                     bool unchecked);

}  // namespace ps::cluster

#endif  // PS_CLUSTER_ETCD_SEEN_H_
