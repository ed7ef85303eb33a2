#include "embedding/restore.h"

#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "embedding/optimizer.h"
#include "embedding/rocks_store.h"
#include "glog/logging.h"
#include "rocksdb/db.h"

namespace ps::embedding {
namespace {

constexpr char kFamilyPrefix[] = "table.";
constexpr size_t kRowsPerBatch = 4096;

// One old shard's part, open read-only.
class Part {
 public:
  static absl::StatusOr<std::unique_ptr<Part>> Open(const std::string& path) {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    rocksdb::Status listed =
        rocksdb::DB::ListColumnFamilies(options, path, &names);
    if (!listed.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "cannot open the checkpoint part ", path, ": ", listed.ToString()));
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    auto part = std::unique_ptr<Part>(new Part);
    rocksdb::DB* db = nullptr;
    rocksdb::Status opened = rocksdb::DB::OpenForReadOnly(
        options, path, families, &part->handles_, &db);
    if (!opened.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "cannot open the checkpoint part ", path, ": ", opened.ToString()));
    }
    part->db_.reset(db);
    for (size_t i = 0; i < names.size(); ++i)
      part->by_name_[names[i]] = part->handles_[i];
    return part;
  }

  ~Part() {
    for (auto* handle : handles_)
      db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  }

  // The table's rows, or nullptr if the part has no such table.
  std::unique_ptr<rocksdb::Iterator> Rows(const std::string& table) {
    auto it = by_name_.find(kFamilyPrefix + table);
    if (it == by_name_.end()) return nullptr;
    return std::unique_ptr<rocksdb::Iterator>(
        db_->NewIterator(rocksdb::ReadOptions(), it->second));
  }

 private:
  Part() = default;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  absl::flat_hash_map<std::string, rocksdb::ColumnFamilyHandle*> by_name_;
};

}  // namespace

absl::StatusOr<RestoreStats> RestoreRows(const RestoreOptions& options) {
  std::error_code error;
  if (std::filesystem::exists(options.store.data_dir, error) &&
      !std::filesystem::is_empty(options.store.data_dir, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("restoring needs an empty --data_dir; ",
                     options.store.data_dir, " holds something already"));
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
  absl::Time next_progress = start + absl::Seconds(5);
  std::vector<float> row;
  for (const std::string& path : options.parts) {
    ASSIGN_OR_RETURN(std::unique_ptr<Part> part, Part::Open(path));
    for (size_t t = 0; t < options.tables.size(); ++t) {
      std::unique_ptr<rocksdb::Iterator> it =
          part->Rows(options.tables[t].name());
      if (it == nullptr) continue;
      row.resize(row_floats[t]);
      RocksStore::Batch batch = store->NewBatch();
      size_t in_batch = 0;
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        ++stats.rows_read;
        if (it->key().size() != sizeof(uint64_t)) {
          return absl::DataLossError(
              absl::StrCat(path, ": a key of ", it->key().size(),
                           " bytes in table ", options.tables[t].name()));
        }
        uint64_t key = 0;
        std::memcpy(&key, it->key().data(), sizeof(key));
        if (!options.keep(key)) continue;
        LogPosition position;
        if (absl::Status decoded = RocksStore::DecodeRow(
                absl::string_view(it->value().data(), it->value().size()),
                absl::MakeSpan(row), &position);
            !decoded.ok()) {
          return absl::DataLossError(
              absl::StrCat(path, ", table ", options.tables[t].name(), ", key ",
                           key, ": ", decoded.message()));
        }
        // The old store's log positions mean nothing in the new one.
        batch.Put(ids[t], key, row, LogPosition());
        ++stats.rows_kept;
        if (++in_batch == kRowsPerBatch) {
          RETURN_IF_ERROR(store->Write(&batch));
          batch = store->NewBatch();
          in_batch = 0;
        }
        if (absl::Now() > next_progress) {
          LOG(INFO) << "restoring: " << stats.rows_kept << " of "
                    << stats.rows_read << " rows read so far are this shard's";
          next_progress = absl::Now() + absl::Seconds(5);
        }
      }
      if (!it->status().ok()) {
        return absl::DataLossError(
            absl::StrCat("reading ", path, ": ", it->status().ToString()));
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
