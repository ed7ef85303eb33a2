// File: worker/input/tfrecord_file.h
//
// TfRecordFile reads the records of one TFRecord file, plain or gzip: each
// record is its length (8 bytes, little-endian), the masked CRC32C of those
// 8 bytes (4), the data, and the data's masked CRC32C (4), as TensorFlow's
// writers and Spark's write them. The CRC32C is RocksDB's (its file
// checksum, which is the plain CRC32C); the mask is TFRecord's.
//
// A record whose data fails its CRC is a bad record (skipped; the next one
// follows it). A length that fails its CRC, or a file that ends inside a
// record, leaves nothing after it readable: the rest of the file is lost.
// Each says the byte offset the record started at (in the uncompressed
// stream). Not thread-safe; one reader per file.

#ifndef PS_WORKER_INPUT_TFRECORD_FILE_H_
#define PS_WORKER_INPUT_TFRECORD_FILE_H_

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::worker {

// The CRC32C of `data` (Castagnoli; "123456789" gives 0xe3069283), and
// TFRecord's mask of a CRC (rotated right by 15 bits, plus a constant).
uint32_t Crc32c(absl::string_view data);
uint32_t MaskCrc(uint32_t crc);

class TfRecordFile {
 public:
  // NOT_FOUND if the file does not open. `gzip`: the file is gzip'd (the
  // reader detects it from its bytes).
  static absl::StatusOr<std::unique_ptr<TfRecordFile>> Open(
      const std::string& path, bool gzip);
  ~TfRecordFile();

  enum class Outcome {
    kRecord,      // `record` holds the next record's data
    kEnd,         // the file ended between records
    kBadRecord,   // the data failed its CRC: skipped, reading goes on
    kBadFraming,  // a bad length or a truncated record: the rest is lost
  };
  // The next record; for the bad outcomes `why` says what was wrong.
  Outcome Next(std::string* record, std::string* why);

  // Where the record last returned (or found bad) started.
  int64_t record_offset() const { return record_offset_; }

  // DATA_LOSS for a read error (a damaged gzip stream, an I/O error).
  absl::Status status() const;

  // Most bytes a record may hold (a larger length is taken for damage, not
  // a record to allocate). Default: 256 MiB.
  static constexpr uint64_t kMaxRecordBytes = uint64_t{256} << 20;

 private:
  TfRecordFile() = default;
  // Reads up to `size` bytes; how many were read.
  size_t Read(char* data, size_t size);

  std::string path_;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  int64_t offset_ = 0;
  int64_t record_offset_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_INPUT_TFRECORD_FILE_H_
