#include "model/export_format.h"

#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/routing.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"

namespace ps::model {

void EncodeExportRow(absl::Span<const float> row, bool half,
                     std::string* value) {
  value->resize(ExportRowBytes(row.size(), half));
  if (!half) {
    std::memcpy(value->data(), row.data(), value->size());
    return;
  }
  for (size_t d = 0; d < row.size(); ++d) {
    const uint16_t bits = FloatToHalf(row[d]);
    std::memcpy(value->data() + sizeof(bits) * d, &bits, sizeof(bits));
  }
}

void DecodeExportRow(absl::string_view value, bool half, size_t dim,
                     float* row) {
  if (!half) {
    std::memcpy(row, value.data(), dim * sizeof(float));
    return;
  }
  for (size_t d = 0; d < dim; ++d) {
    uint16_t bits;
    std::memcpy(&bits, value.data() + sizeof(bits) * d, sizeof(bits));
    row[d] = HalfToFloat(bits);
  }
}

ExportTableWriter::ExportTableWriter(std::string path, bool half)
    : path_(std::move(path)), half_(half) {}

ExportTableWriter::~ExportTableWriter() {
  if (writer_ == nullptr) return;
  // Opened and never finished (the export failed): no half-written part.
  writer_.reset();
  std::error_code error;
  std::filesystem::remove(path_, error);
}

absl::Status ExportTableWriter::Put(uint64_t key, absl::Span<const float> row) {
  EncodeExportRow(row, half_, &value_);
  return Write(key, value_);
}

absl::Status ExportTableWriter::Delete(uint64_t key) {
  absl::Status written = Write(key, "");
  if (written.ok()) ++deleted_rows_;
  return written;
}

absl::Status ExportTableWriter::Write(uint64_t key, absl::string_view value) {
  if (writer_ == nullptr) {
    std::error_code error;
    std::filesystem::create_directories(
        std::filesystem::path(path_).parent_path(), error);
    writer_ = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(),
                                                       rocksdb::Options());
    rocksdb::Status opened = writer_->Open(path_);
    if (!opened.ok()) {
      writer_.reset();
      return absl::InternalError(
          absl::StrCat("creating ", path_, ": ", opened.ToString()));
    }
  }
  const SlotOrderedKey ordered(key);
  rocksdb::Status put =
      writer_->Put(rocksdb::Slice(ordered.data(), ordered.size()),
                   rocksdb::Slice(value.data(), value.size()));
  if (!put.ok()) {
    // RocksDB refuses a key at or below the one before as InvalidArgument.
    const std::string message =
        absl::StrCat("writing ", path_, ": ", put.ToString());
    return put.IsInvalidArgument() ? absl::InvalidArgumentError(message)
                                   : absl::InternalError(message);
  }
  ++rows_;
  return absl::OkStatus();
}

absl::Status ExportTableWriter::Finish() {
  if (writer_ == nullptr) return absl::OkStatus();
  rocksdb::ExternalSstFileInfo info;
  rocksdb::Status finished = writer_->Finish(&info);
  writer_.reset();
  if (!finished.ok()) {
    return absl::InternalError(
        absl::StrCat("finishing ", path_, ": ", finished.ToString()));
  }
  bytes_ = info.file_size;
  return absl::OkStatus();
}

}  // namespace ps::model
