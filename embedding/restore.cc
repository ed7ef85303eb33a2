#include "embedding/restore.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "embedding/rocks_store.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

constexpr size_t kRowsPerBatch = 4096;

// A table of the new store: its id and its floats per row (weights and
// optimizer state).
struct NewTable {
  TableId id = 0;
  int row_floats = 0;
};

RocksStoreOptions NewStoreOptions(const StoreOptions& store) {
  RocksStoreOptions rocks_options;
  rocks_options.path = store.data_dir;
  rocks_options.block_cache_bytes = store.rocksdb_block_cache_bytes;
  rocks_options.write_buffer_bytes = store.rocksdb_write_buffer_bytes;
  rocks_options.max_tables = store.max_tables;
  return rocks_options;
}

// Creates every table of `specs` in `store`; returns them in the same order.
absl::StatusOr<std::vector<NewTable>> CreateTables(
    RocksStore& store, const std::vector<TableSpec>& specs) {
  std::vector<NewTable> tables;
  for (const TableSpec& spec : specs) {
    NewTable table;
    ASSIGN_OR_RETURN(table.id, store.CreateTable(spec));
    ASSIGN_OR_RETURN(
        std::unique_ptr<Optimizer> optimizer,
        Optimizer::Create(spec.optimizer(), static_cast<int>(spec.dim())));
    table.row_floats = static_cast<int>(spec.dim()) +
                       optimizer->StateFloats(static_cast<int>(spec.dim()));
    tables.push_back(table);
  }
  return tables;
}

// Copies the rows that options.keep keeps from checkpoint parts into the new
// store, in batches of kRowsPerBatch, counting them and logging progress
// every 5 s.
class RowCopier {
 public:
  // `store` and `options` must outlive the copier; `tables[t]` is the new
  // store's table of options.tables[t].
  RowCopier(const RestoreOptions& options, RocksStore* store,
            std::vector<NewTable> tables)
      : options_(options),
        store_(store),
        tables_(std::move(tables)),
        start_(absl::Now()),
        restored_at_s_(static_cast<uint32_t>(absl::ToUnixSeconds(start_))),
        next_progress_(start_ + absl::Seconds(5)) {}

  // Copies every table of the part at `path` that the new store has.
  // NOT_FOUND for a part that does not open.
  absl::Status CopyPart(const std::string& path, size_t part_index) {
    part_index_ = part_index;
    RocksStoreOptions part_options;
    part_options.path = path;
    part_options.read_only = true;
    part_options.max_tables = options_.store.max_tables;
    absl::StatusOr<std::unique_ptr<RocksStore>> part =
        RocksStore::Open(part_options);
    if (!part.ok()) {
      return absl::NotFoundError(
          absl::StrCat("cannot open the checkpoint part ", path, ": ",
                       part.status().message()));
    }
    const std::vector<StoredTable>& part_tables = (*part)->opened_tables();
    const std::unique_ptr<RocksStore::Snapshot> snapshot =
        (*part)->GetSnapshot();
    for (size_t t = 0; t < options_.tables.size(); ++t) {
      const std::string& name = options_.tables[t].name();
      auto in_part =
          std::find_if(part_tables.begin(), part_tables.end(),
                       [&](const StoredTable& table) {
                         return !table.dropped && table.spec.name() == name;
                       });
      if (in_part == part_tables.end()) continue;
      RETURN_IF_ERROR(CopyTable(path, **part, *snapshot, *in_part, t));
    }
    return absl::OkStatus();
  }

  const RestoreStats& stats() const { return stats_; }
  absl::Time start() const { return start_; }

 private:
  // Copies the rows of `in_part` (of the part `path`) into the new store's
  // table `t`, with the learning rate set over the admin API if there is one.
  absl::Status CopyTable(const std::string& path, RocksStore& part,
                         const RocksStore::Snapshot& snapshot,
                         const StoredTable& in_part, size_t t) {
    const std::string& name = options_.tables[t].name();
    // A rate set over the admin API travels with the rows.
    if (in_part.learning_rate > 0.0f) {
      RETURN_IF_ERROR(store_->SetLearningRate(name, in_part.learning_rate));
    }
    row_.resize(tables_[t].row_floats);
    RocksStore::Batch batch = store_->NewBatch();
    size_t in_batch = 0;
    absl::Status scanned = part.Scan(
        in_part.id, snapshot,
        [&](uint64_t key, absl::string_view value) -> absl::Status {
          return CopyRow(key, value, tables_[t].id, &batch, &in_batch);
        });
    if (!scanned.ok()) {
      return absl::Status(
          scanned.code(),
          absl::StrCat(path, ", table ", name, ": ", scanned.message()));
    }
    return store_->Write(&batch);
  }

  // Adds the row `key` (stored as `value`) to `batch` as a row of table `id`
  // if the new store keeps it, writing the batch once it is full.
  absl::Status CopyRow(uint64_t key, absl::string_view value, TableId id,
                       RocksStore::Batch* batch, size_t* in_batch) {
    ++stats_.rows_read;
    if (!options_.keep(key, part_index_)) return absl::OkStatus();
    LogPosition position;
    RowMeta meta;
    RETURN_IF_ERROR(
        RocksStore::DecodeRow(value, absl::MakeSpan(row_), &position, &meta));
    // The old store's log positions mean nothing in the new one, and a
    // restored row's expiry clock starts at the restore (a checkpoint older
    // than row_ttl_s would expire whole).
    if (meta.updated_at_s != 0) meta.updated_at_s = restored_at_s_;
    batch->Put(id, key, row_, LogPosition(), meta);
    ++stats_.rows_kept;
    if (++*in_batch == kRowsPerBatch) {
      RETURN_IF_ERROR(store_->Write(batch));
      *batch = store_->NewBatch();
      *in_batch = 0;
    }
    if (absl::Now() > next_progress_) {
      LOG(INFO) << "restoring: " << stats_.rows_kept << " of "
                << stats_.rows_read << " rows read so far are this shard's";
      next_progress_ = absl::Now() + absl::Seconds(5);
    }
    return absl::OkStatus();
  }

  const RestoreOptions& options_;
  RocksStore* const store_;
  const std::vector<NewTable> tables_;
  const absl::Time start_;
  // A restored row's update time (RowMeta::updated_at_s).
  const uint32_t restored_at_s_;
  absl::Time next_progress_;
  RestoreStats stats_;
  // The row being copied, and the index of the part it is read from.
  std::vector<float> row_;
  size_t part_index_ = 0;
};

}  // namespace

absl::StatusOr<RestoreStats> RestoreRows(const RestoreOptions& options) {
  std::error_code error;
  if (std::filesystem::exists(options.store.data_dir + "/CURRENT", error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("restoring needs a --data_dir without a store; ",
                     options.store.data_dir, " holds one already"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RocksStore> store,
                   RocksStore::Open(NewStoreOptions(options.store)));
  ASSIGN_OR_RETURN(std::vector<NewTable> tables,
                   CreateTables(*store, options.tables));
  RowCopier copier(options, store.get(), std::move(tables));
  for (size_t p = 0; p < options.parts.size(); ++p) {
    RETURN_IF_ERROR(copier.CopyPart(options.parts[p], p));
  }
  RocksStore::Batch done = store->NewBatch();
  RETURN_IF_ERROR(store->WriteSynced(&done));
  const RestoreStats& stats = copier.stats();
  LOG(INFO) << "restored " << stats.rows_kept << " rows (of " << stats.rows_read
            << " in " << options.parts.size() << " parts) in "
            << absl::ToDoubleSeconds(absl::Now() - copier.start()) << " s";
  return stats;
}

}  // namespace ps::embedding
