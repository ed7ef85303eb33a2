// File: model/export_format.h
//
// The rows of an export (proto/checkpoint.proto, ExportManifest), written
// and read here alone: each table's part is one RocksDB SST file whose keys
// are SlotOrderedKey (base/routing.h: by slot, then key; the order a shard
// stores its rows in) and whose values are a row's `dim` weights as float32
// or IEEE half, in host byte order. An empty value is a deletion (a delta's
// row that expired or was dropped since the export before).
//
// ExportTableWriter writes one part (a shard's export, tests' handmade
// exports); ExportedModel (exported_model.h) reads them with
// ExportRowBytes() and DecodeExportRow().

#ifndef PS_MODEL_EXPORT_FORMAT_H_
#define PS_MODEL_EXPORT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rocksdb {
class SstFileWriter;
}  // namespace rocksdb

namespace ps::model {

// The bytes of a stored row of `dim` weights.
inline size_t ExportRowBytes(size_t dim, bool half) {
  return dim * (half ? sizeof(uint16_t) : sizeof(float));
}

// A row's weights as an export stores them, into `value` (replaced).
void EncodeExportRow(absl::Span<const float> row, bool half,
                     std::string* value);

// A stored row into `row` (`dim` floats); `value` must hold
// ExportRowBytes(dim, half) bytes.
void DecodeExportRow(absl::string_view value, bool half, size_t dim,
                     float* row);

// Writes one part of an export table. Rows must come in the store's order
// (SlotOrderedKey's: by slot, then key), each key once. The file (and its
// directory) is created at the first row: a part with none has no file; a
// writer destroyed before Finish() removes its file. Not thread-safe.
class ExportTableWriter {
 public:
  // `half`: weights as IEEE half rather than float32.
  ExportTableWriter(std::string path, bool half);
  ~ExportTableWriter();

  ExportTableWriter(const ExportTableWriter&) = delete;
  ExportTableWriter& operator=(const ExportTableWriter&) = delete;

  // A row, or a deletion. INTERNAL if the file cannot be written;
  // INVALID_ARGUMENT for a key out of the store's order.
  absl::Status Put(uint64_t key, absl::Span<const float> row);
  absl::Status Delete(uint64_t key);

  // Completes the file, if a row was written. Then bytes() is its size.
  absl::Status Finish();

  const std::string& path() const { return path_; }
  // Rows written, deletions included, and of those the deletions.
  uint64_t rows() const { return rows_; }
  uint64_t deleted_rows() const { return deleted_rows_; }
  uint64_t bytes() const { return bytes_; }

 private:
  absl::Status Write(uint64_t key, absl::string_view value);

  const std::string path_;
  const bool half_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  std::string value_;
  uint64_t rows_ = 0;
  uint64_t deleted_rows_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace ps::model

#endif  // PS_MODEL_EXPORT_FORMAT_H_
