// EmbeddingStore's copies of itself: checkpoints (RocksDB's, of every table
// with optimizer state) and exports (one SST file of weights per table),
// each taken at the push gate so that it holds every push whole or not at
// all.

#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/routing.h"
#include "base/status_macros.h"
#include "embedding/embedding_store.h"
#include "rocksdb/sst_file_writer.h"

namespace ps::embedding {
namespace {

// A row's first `dim` weights as an export holds them: float32 or IEEE half,
// in host byte order.
void EncodeWeights(absl::Span<const float> row, int dim, bool half,
                   std::string* value) {
  value->clear();
  for (int d = 0; d < dim; ++d) {
    if (half) {
      const uint16_t h = FloatToHalf(row[d]);
      value->append(reinterpret_cast<const char*>(&h), sizeof(h));
    } else {
      value->append(reinterpret_cast<const char*>(&row[d]), sizeof(float));
    }
  }
}

// An SST file writer open on `path`, its directory created if missing.
absl::StatusOr<std::unique_ptr<rocksdb::SstFileWriter>> OpenSstFile(
    const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      error);
  auto writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(),
                                                         rocksdb::Options());
  rocksdb::Status opened = writer->Open(path);
  if (!opened.ok()) {
    return absl::InternalError(
        absl::StrCat("creating ", path, ": ", opened.ToString()));
  }
  return writer;
}

}  // namespace

absl::Status EmbeddingStore::Checkpoint(const std::string& dir) {
  absl::WriterMutexLock gate(&push_gate_);
  RETURN_IF_ERROR(Flush());
  return rocks_->CreateCheckpoint(dir);
}

absl::Status EmbeddingStore::Export(std::vector<ExportTarget>* targets,
                                    bool half) {
  std::vector<const Table*> tables;
  for (const ExportTarget& target : *targets) {
    ASSIGN_OR_RETURN(const Table* table, FindTable(target.table));
    tables.push_back(table);
  }
  std::unique_ptr<RocksStore::Snapshot> snapshot;
  {
    absl::WriterMutexLock gate(&push_gate_);
    RETURN_IF_ERROR(Flush());
    snapshot = rocks_->GetSnapshot();
  }
  for (size_t t = 0; t < targets->size(); ++t) {
    RETURN_IF_ERROR(ExportTable(*tables[t], *snapshot, half, &(*targets)[t]));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::ExportTable(const Table& table,
                                         const RocksStore::Snapshot& snapshot,
                                         bool half, ExportTarget* target) {
  std::vector<float> row(table.row_floats);
  std::string value;
  // Opened at the first row, so that a table with none has no file.
  std::unique_ptr<rocksdb::SstFileWriter> writer;
  const uint32_t now_s = NowSeconds();
  auto write = [&](uint64_t key, absl::string_view stored) -> absl::Status {
    LogPosition position;
    RowMeta meta;
    RETURN_IF_ERROR(
        RocksStore::DecodeRow(stored, absl::MakeSpan(row), &position, &meta));
    // Expired, not yet compacted away: not part of the model.
    if (table.expiry.Expired(meta, now_s)) return absl::OkStatus();
    EncodeWeights(row, table.dim, half, &value);
    if (writer == nullptr) {
      ASSIGN_OR_RETURN(writer, OpenSstFile(target->path));
    }
    // In the store's order (by slot, then key), which the export's keys
    // follow (proto/checkpoint.proto).
    const SlotOrderedKey export_key(key);
    rocksdb::Status put = writer->Put(
        rocksdb::Slice(export_key.data(), export_key.size()), value);
    if (!put.ok()) {
      return absl::InternalError(
          absl::StrCat("writing ", target->path, ": ", put.ToString()));
    }
    ++target->rows;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(rocks_->Scan(table.id, snapshot, write));
  if (writer == nullptr) return absl::OkStatus();
  rocksdb::ExternalSstFileInfo info;
  rocksdb::Status finished = writer->Finish(&info);
  if (!finished.ok()) {
    return absl::InternalError(
        absl::StrCat("finishing ", target->path, ": ", finished.ToString()));
  }
  target->bytes = info.file_size;
  return absl::OkStatus();
}

}  // namespace ps::embedding
