// File: cluster/data_dir_generation.h
//
// The shard generation (cluster/shard_directory.h) a data dir last served
// at, in its GENERATION file; in a replica's copy, the one its promotion is
// raising to, written before etcd takes the raise. What decides whether a
// data dir may serve its shard: only one at etcd's generation (and
// promotion) holds the shard's newest rows.

#ifndef PS_CLUSTER_DATA_DIR_GENERATION_H_
#define PS_CLUSTER_DATA_DIR_GENERATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

struct DataDirGeneration {
  // Whether the data dir has a GENERATION file: it served (or, a
  // replica's copy, is being promoted).
  bool served = false;
  ShardGeneration at;  // generation 0 when not `served`

  // Whether it is etcd's `now`: the data dir holds the shard's newest rows.
  bool Is(const ShardGeneration& now) const {
    return served && at.generation == now.generation &&
           at.promotion == now.promotion;
  }
};

// Not `served` without a file; DATA_LOSS for one that is not a generation.
absl::StatusOr<DataDirGeneration> ReadDataDirGeneration(
    const std::string& data_dir);
// Writes it durably (the file, then its directory).
absl::Status WriteDataDirGeneration(const std::string& data_dir,
                                    uint64_t generation,
                                    const std::string& promotion);

// Whether `data_dir`, at `own`, may serve shard `index` as its primary
// while etcd's generation is `now`: FAILED_PRECONDITION when a replica took
// the shard since it served (an older generation, or another promotion to
// its own), or when it is newer than etcd (etcd lost its state, or --job
// names another job). Each message says what to do.
absl::Status CheckDataDirMayServe(const std::string& data_dir, int index,
                                  const DataDirGeneration& own,
                                  const ShardGeneration& now);

}  // namespace ps::cluster

#endif  // PS_CLUSTER_DATA_DIR_GENERATION_H_
