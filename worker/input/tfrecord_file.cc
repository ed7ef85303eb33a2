#include "worker/input/tfrecord_file.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "rocksdb/file_checksum.h"

namespace ps::worker {
namespace {

uint32_t LittleEndian32(const char* bytes) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

uint64_t LittleEndian64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  static const std::shared_ptr<rocksdb::FileChecksumGenFactory> factory =
      rocksdb::GetFileChecksumGenCrc32cFactory();
  std::unique_ptr<rocksdb::FileChecksumGenerator> generator =
      factory->CreateFileChecksumGenerator(rocksdb::FileChecksumGenContext());
  generator->Update(data.data(), data.size());
  generator->Finalize();
  // Four bytes, big-endian (rocksdb/file_checksum.h).
  const std::string checksum = generator->GetChecksum();
  uint32_t crc = 0;
  for (unsigned char byte : checksum) crc = (crc << 8) | byte;
  return crc;
}

uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

absl::StatusOr<std::unique_ptr<TfRecordFile>> TfRecordFile::Open(
    const std::string& path, bool gzip) {
  auto file = std::unique_ptr<TfRecordFile>(new TfRecordFile());
  file->path_ = path;
  if (gzip) {
    file->gz_ = gzopen(path.c_str(), "rb");
    if (file->gz_ != nullptr) gzbuffer(file->gz_, 1 << 20);
  } else {
    file->file_ = std::fopen(path.c_str(), "rb");
  }
  if (file->gz_ == nullptr && file->file_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  return file;
}

TfRecordFile::~TfRecordFile() {
  if (gz_ != nullptr) gzclose(gz_);
  if (file_ != nullptr) std::fclose(file_);
}

size_t TfRecordFile::Read(char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    size_t got = 0;
    if (gz_ != nullptr) {
      const int read = gzread(gz_, data + done,
                              static_cast<unsigned>(std::min<size_t>(
                                  size - done, size_t{1} << 30)));
      got = read > 0 ? static_cast<size_t>(read) : 0;
    } else {
      got = std::fread(data + done, 1, size - done, file_);
    }
    if (got == 0) break;
    done += got;
  }
  offset_ += static_cast<int64_t>(done);
  return done;
}

TfRecordFile::Outcome TfRecordFile::Next(std::string* record,
                                         std::string* why) {
  record_offset_ = offset_;
  char header[12];
  const size_t got = Read(header, sizeof(header));
  if (got == 0) return Outcome::kEnd;
  if (got < sizeof(header)) {
    *why = absl::StrCat("the file ends inside a record's header (", got,
                        " of 12 bytes)");
    return Outcome::kBadFraming;
  }
  const uint64_t length = LittleEndian64(header);
  if (MaskCrc(Crc32c(absl::string_view(header, 8))) !=
      LittleEndian32(header + 8)) {
    *why = "the record's length fails its CRC";
    return Outcome::kBadFraming;
  }
  if (length > kMaxRecordBytes) {
    *why = absl::StrCat("a record of ", length, " bytes, more than ",
                        kMaxRecordBytes);
    return Outcome::kBadFraming;
  }
  record->resize(length + 4);
  if (Read(record->data(), length + 4) < length + 4) {
    *why = absl::StrCat("the file ends inside a record of ", length, " bytes");
    return Outcome::kBadFraming;
  }
  const uint32_t stored = LittleEndian32(record->data() + length);
  record->resize(length);
  if (MaskCrc(Crc32c(*record)) != stored) {
    *why = "the record's data fails its CRC";
    return Outcome::kBadRecord;
  }
  return Outcome::kRecord;
}

absl::Status TfRecordFile::status() const {
  if (gz_ != nullptr) {
    int error = Z_OK;
    const char* message = gzerror(gz_, &error);
    if (error != Z_OK && error != Z_STREAM_END) {
      return absl::DataLossError(absl::StrCat(path_, ": ", message));
    }
  } else if (std::ferror(file_)) {
    return absl::DataLossError(absl::StrCat(path_, ": read error"));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker
