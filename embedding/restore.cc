#include "embedding/restore.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/optimizer.h"
#include "base/status_macros.h"
#include "embedding/rocks_store.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

constexpr size_t kRowsPerBatch = 4096;

}  // namespace

absl::StatusOr<RestoreStats> RestoreRows(const RestoreOptions& options) {
  std::error_code error;
  if (std::filesystem::exists(options.store.data_dir + "/CURRENT", error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("restoring needs a --data_dir without a store; ",
                     options.store.data_dir, " holds one already"));
  }
  RocksStoreOptions rocks_options;
  rocks_options.path = options.store.data_dir;
  rocks_options.block_cache_bytes = options.store.rocksdb_block_cache_bytes;
  rocks_options.write_buffer_bytes = options.store.rocksdb_write_buffer_bytes;
  rocks_options.max_tables = options.store.max_tables;
  ASSIGN_OR_RETURN(std::unique_ptr<RocksStore> store,
                   RocksStore::Open(rocks_options));
  std::vector<TableId> ids;
  std::vector<int> row_floats;
  for (const TableSpec& spec : options.tables) {
    ASSIGN_OR_RETURN(TableId id, store->CreateTable(spec));
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                     Optimizer::Create(spec.optimizer()));
    ids.push_back(id);
    row_floats.push_back(static_cast<int>(spec.dim()) +
                         optimizer->StateFloats(static_cast<int>(spec.dim())));
  }

  RestoreStats stats;
  const absl::Time start = absl::Now();
  const uint32_t restored_at_s =
      static_cast<uint32_t>(absl::ToUnixSeconds(start));
  absl::Time next_progress = start + absl::Seconds(5);
  std::vector<float> row;
  for (const std::string& path : options.parts) {
    RocksStoreOptions part_options;
    part_options.path = path;
    part_options.read_only = true;
    part_options.max_tables = options.store.max_tables;
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
    for (size_t t = 0; t < options.tables.size(); ++t) {
      const std::string& name = options.tables[t].name();
      auto in_part =
          std::find_if(part_tables.begin(), part_tables.end(),
                       [&](const StoredTable& table) {
                         return !table.dropped && table.spec.name() == name;
                       });
      if (in_part == part_tables.end()) continue;
      // A rate set over the admin API travels with the rows.
      if (in_part->learning_rate > 0.0f) {
        RETURN_IF_ERROR(store->SetLearningRate(name, in_part->learning_rate));
      }
      row.resize(row_floats[t]);
      RocksStore::Batch batch = store->NewBatch();
      size_t in_batch = 0;
      absl::Status scanned = (*part)->Scan(
          in_part->id, *snapshot,
          [&](uint64_t key, absl::string_view value) -> absl::Status {
            ++stats.rows_read;
            if (!options.keep(key)) return absl::OkStatus();
            LogPosition position;
            RowMeta meta;
            RETURN_IF_ERROR(RocksStore::DecodeRow(value, absl::MakeSpan(row),
                                                  &position, &meta));
            // The old store's log positions mean nothing in the new one,
            // and a restored row's expiry clock starts at the restore (a
            // checkpoint older than row_ttl_s would expire whole).
            if (meta.updated_at_s != 0) meta.updated_at_s = restored_at_s;
            batch.Put(ids[t], key, row, LogPosition(), meta);
            ++stats.rows_kept;
            if (++in_batch == kRowsPerBatch) {
              RETURN_IF_ERROR(store->Write(&batch));
              batch = store->NewBatch();
              in_batch = 0;
            }
            if (absl::Now() > next_progress) {
              LOG(INFO) << "restoring: " << stats.rows_kept << " of "
                        << stats.rows_read
                        << " rows read so far are this shard's";
              next_progress = absl::Now() + absl::Seconds(5);
            }
            return absl::OkStatus();
          });
      if (!scanned.ok()) {
        return absl::Status(
            scanned.code(),
            absl::StrCat(path, ", table ", name, ": ", scanned.message()));
      }
      RETURN_IF_ERROR(store->Write(&batch));
    }
  }
  RocksStore::Batch done = store->NewBatch();
  RETURN_IF_ERROR(store->WriteSynced(&done));
  LOG(INFO) << "restored " << stats.rows_kept << " rows (of " << stats.rows_read
            << " in " << options.parts.size() << " parts) in "
            << absl::ToDoubleSeconds(absl::Now() - start) << " s";
  return stats;
}

}  // namespace ps::embedding
