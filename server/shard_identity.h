// File: server/shard_identity.h
//
// What a shard's data dir belongs to: the shard index and shard count it was
// created with, and the version of the key routing (base/routing.h) that
// placed its rows there. Kept in <data_dir>/SHARD_IDENTITY, a few lines of
// text written once, when a shard first serves the dir; every later start
// compares its flags with it, so that a dir is never served as another
// shard (which would answer initial values for keys it holds). Pure
// functions of their arguments and the file; thread-compatible.

#ifndef PS_SERVER_SHARD_IDENTITY_H_
#define PS_SERVER_SHARD_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps::server {

struct ShardIdentity {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint32_t routing_version = 0;

  bool operator==(const ShardIdentity& other) const {
    return shard_index == other.shard_index && num_shards == other.num_shards &&
           routing_version == other.routing_version;
  }
};

// The identity recorded in `data_dir`, or NOT_FOUND if none is; DATA_LOSS
// for a file that does not parse.
absl::StatusOr<ShardIdentity> ReadShardIdentity(const std::string& data_dir);

// FAILED_PRECONDITION, naming both, if `data_dir` records an identity other
// than `identity`; OK if it records the same one or none. With
// `compare_count` false the shard counts may differ: under etcd the job's
// slot map holds the count, which changes as shards join and leave, and
// routes every key.
absl::Status CheckShardIdentity(const std::string& data_dir,
                                const ShardIdentity& identity,
                                bool compare_count = true);

// Records `identity` in `data_dir` (whole or not at all, and durably).
absl::Status WriteShardIdentity(const std::string& data_dir,
                                const ShardIdentity& identity);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_IDENTITY_H_
