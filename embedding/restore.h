// File: embedding/restore.h
//
// Restores a store from the parts of a checkpoint taken with any number of
// shards (each part a RocksDB checkpoint of one old shard, written by
// StoreSnapshots::Checkpoint()): every row of every part whose key `keep`s
// is copied, weights and optimizer state byte for byte, into a new store.
// The caller's `keep` says which: the keys the new shard owns, each from
// the part of the shard that owned it (by the checkpoint's slot map), so
// that a new shard gets exactly its keys, whatever the old layout was. The
// parts are opened read-only and never changed.

#ifndef PS_EMBEDDING_RESTORE_H_
#define PS_EMBEDDING_RESTORE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/embedding_store.h"
#include "proto/ps.pb.h"

namespace ps::embedding {

struct RestoreOptions {
  // The old shards' parts (directories).
  std::vector<std::string> parts;
  // Every table.
  std::vector<TableSpec> tables;
  // Whether the row of `key` read from parts[part] belongs to the store
  // being made: whether the key is its key, and the part the one that held
  // the key's current row (a part may also hold rows of slots its shard
  // no longer owned when the checkpoint was taken). REQUIRES: set.
  std::function<bool(uint64_t key, size_t part)> keep;
  // The new store: its data_dir (REQUIRES: holds no store; other files,
  // such as the caller's markers, are left alone) and RocksDB's sizes; the
  // rest is unused here.
  StoreOptions store;
};

struct RestoreStats {
  uint64_t rows_read = 0;
  uint64_t rows_kept = 0;
};

// FAILED_PRECONDITION for a data_dir that holds a store; NOT_FOUND for a
// part that does not open; DATA_LOSS for a row of the wrong size.
absl::StatusOr<RestoreStats> RestoreRows(const RestoreOptions& options);

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_RESTORE_H_
