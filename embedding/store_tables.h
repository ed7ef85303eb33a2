// File: embedding/store_tables.h
//
// StoreTables is the part of a shard's store that declares, describes,
// retunes, expires and drops its tables (the admin service's and the data
// service's way to them). EmbeddingStore::tables() gives it; the store
// implements it. Thread-safe.

#ifndef PS_EMBEDDING_STORE_TABLES_H_
#define PS_EMBEDDING_STORE_TABLES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps.pb.h"

namespace ps::embedding {

struct TableStats {
  TableSpec spec;
  // The rate pushes use now: the spec's, or what SetLearningRate() set.
  float learning_rate = 0.0f;
  uint64_t estimated_rows = 0;
  uint64_t disk_bytes = 0;
};

// What Expire() dropped.
struct ExpireOutcome {
  uint64_t rows_in_memory = 0;
  uint64_t rows_on_disk = 0;
};

// How a table applies pushes now: its optimizer (defaults filled in), the
// factor SetLearningRate() puts on each push's learning_rate_scale (1 if
// none), and the floats of optimizer state per row.
struct TableOptimizer {
  OptimizerSpec spec;
  float learning_rate_multiplier = 1.0f;
  int state_floats = 0;
};

class StoreTables {
 public:
  virtual ~StoreTables() = default;

  // Declares a table. Idempotent: returns true when created, false when an
  // identical table (after optimizer defaults) exists. ALREADY_EXISTS when a
  // table of that name differs; INVALID_ARGUMENT for a bad name, dim, or
  // hyper-parameter; RESOURCE_EXHAUSTED past max_dim or max_tables.
  virtual absl::StatusOr<bool> DeclareTable(const TableSpec& spec) = 0;

  // Sets the learning rate (FTRL's alpha) of `table` for every push from
  // the next on, durably. It multiplies each push's rate by `learning_rate`
  // over the declared one, so a push-log record keeps the rate it was
  // applied with; for FTRL, as for a worker's learning-rate schedule, it
  // scales each gradient's step into z rather than alpha itself, which
  // would rescale every stored weight at once. The spec keeps the declared
  // rate (so the table's workers still declare it alike). NOT_FOUND for an
  // unknown table; INVALID_ARGUMENT unless positive and finite.
  virtual absl::Status SetLearningRate(absl::string_view table,
                                       float learning_rate) = 0;

  // Drops `table` with every row, in memory and on disk (its files go when
  // the store closes). Pushes wait meanwhile; later pulls and pushes of it
  // get NOT_FOUND, and declaring it again makes a new, empty table. A pull
  // already running may still answer from the dropped rows. NOT_FOUND if
  // unknown.
  virtual absl::Status DropTable(absl::string_view table) = 0;

  // Drops `table`'s expired rows now (TableSpec.row_ttl_s): from the hot
  // tier, and from disk by compacting the table whole. Expiry also runs by
  // itself: each stripe's expired rows leave memory once per write-back
  // interval, RocksDB drops them as it compacts, and a load treats an
  // expired row as absent. NOT_FOUND for an unknown table;
  // FAILED_PRECONDITION for one without row_ttl_s.
  virtual absl::StatusOr<ExpireOutcome> Expire(absl::string_view table) = 0;

  // The spec of `table` (optimizer defaults filled in). NOT_FOUND if unknown.
  virtual absl::StatusOr<TableSpec> GetTableSpec(
      absl::string_view table) const = 0;

  // How `table` applies pushes now (TableOptimizer). NOT_FOUND if unknown.
  virtual absl::StatusOr<TableOptimizer> GetTableOptimizer(
      absl::string_view table) const = 0;

  // Every table, with its stats.
  virtual std::vector<TableStats> ListTables() = 0;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_STORE_TABLES_H_
