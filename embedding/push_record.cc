#include "embedding/push_record.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps::embedding {
namespace {

// Where the fields of a push header lie, after the marker and the kind.
constexpr size_t kWorkerOffset = 2 * sizeof(uint32_t);
constexpr size_t kRowsUpdatedOffset = 3 * sizeof(uint32_t);
constexpr size_t kIncarnationOffset = 4 * sizeof(uint32_t);
constexpr size_t kOriginSequenceOffset = kIncarnationOffset + sizeof(uint64_t);
constexpr size_t kScaleOffset = kPushRecordHeaderBytes;
// And those of a section's header.
constexpr size_t kStripeOffset = sizeof(uint32_t);
constexpr size_t kCountOffset = 2 * sizeof(uint32_t);
constexpr size_t kSequenceOffset = 3 * sizeof(uint32_t);

void AppendBytes(const void* data, size_t size, std::string* out) {
  out->append(static_cast<const char*>(data), size);
}

template <typename T>
T ReadAt(absl::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

absl::StatusOr<PushRecordHeader> DecodePushRecordHeader(
    absl::string_view record) {
  if (record.size() < sizeof(uint32_t)) {
    return absl::DataLossError("a push-log record of fewer than 4 bytes");
  }
  PushRecordHeader header;
  if (ReadAt<uint32_t>(record, 0) != kPushRecordMarker) {
    header.kind = PushRecordHeader::Kind::kSectionsOnly;
    header.sections_offset = 0;
    return header;
  }
  const uint32_t kind = record.size() >= 2 * sizeof(uint32_t)
                            ? ReadAt<uint32_t>(record, sizeof(uint32_t))
                            : 0;
  if (kind == kPushRecordKindLedger) {
    header.kind = PushRecordHeader::Kind::kLedger;
    header.ledger = record.substr(2 * sizeof(uint32_t));
    header.sections_offset = record.size();
    return header;
  }
  const bool scaled = kind == kPushRecordKindScaledPush;
  const size_t header_bytes =
      scaled ? kScaledPushRecordHeaderBytes : kPushRecordHeaderBytes;
  if ((kind != kPushRecordKindPush && !scaled) ||
      record.size() < header_bytes) {
    return absl::DataLossError(absl::StrCat("a push-log record of kind ", kind,
                                            " and ", record.size(), " bytes"));
  }
  header.kind = PushRecordHeader::Kind::kPush;
  header.origin.worker = ReadAt<uint32_t>(record, kWorkerOffset);
  header.rows_updated = ReadAt<uint32_t>(record, kRowsUpdatedOffset);
  header.origin.incarnation = ReadAt<uint64_t>(record, kIncarnationOffset);
  header.origin.sequence = ReadAt<uint64_t>(record, kOriginSequenceOffset);
  if (scaled) {
    header.learning_rate_scale = ReadAt<float>(record, kScaleOffset);
    if (!(header.learning_rate_scale > 0.0f) ||
        !std::isfinite(header.learning_rate_scale)) {
      return absl::DataLossError(
          absl::StrCat("a push-log record with a learning-rate scale of ",
                       header.learning_rate_scale));
    }
  }
  header.sections_offset = header_bytes;
  return header;
}

std::string EncodeLedgerRecord(absl::string_view snapshot) {
  std::string record;
  record.reserve(2 * sizeof(uint32_t) + snapshot.size());
  AppendBytes(&kPushRecordMarker, sizeof(kPushRecordMarker), &record);
  AppendBytes(&kPushRecordKindLedger, sizeof(kPushRecordKindLedger), &record);
  record.append(snapshot.data(), snapshot.size());
  return record;
}

absl::StatusOr<PushSectionHeader> DecodePushSectionHeader(
    absl::string_view bytes) {
  if (bytes.size() < kPushSectionHeaderBytes) {
    return absl::DataLossError("truncated section header");
  }
  PushSectionHeader header;
  header.table_id = ReadAt<uint32_t>(bytes, 0);
  header.stripe = ReadAt<uint32_t>(bytes, kStripeOffset);
  header.count = ReadAt<uint32_t>(bytes, kCountOffset);
  header.sequence = ReadAt<uint64_t>(bytes, kSequenceOffset);
  return header;
}

uint64_t PushSectionBytes(uint32_t count, size_t dim) {
  return kPushSectionHeaderBytes +
         uint64_t{count} * (sizeof(uint64_t) + dim * sizeof(float));
}

absl::StatusOr<uint64_t> MeasurePushSection(absl::string_view bytes,
                                            const PushSectionHeader& header,
                                            size_t dim) {
  const uint64_t section_bytes = PushSectionBytes(header.count, dim);
  if (bytes.size() < section_bytes) {
    return absl::DataLossError(absl::StrCat(
        "a section of ", header.count, " keys of dim ", dim, " does not fit"));
  }
  return section_bytes;
}

absl::Status DecodePushSection(absl::string_view bytes, size_t dim,
                               PushSection* section) {
  absl::StatusOr<PushSectionHeader> header = DecodePushSectionHeader(bytes);
  if (!header.ok()) return header.status();
  const uint64_t section_bytes = PushSectionBytes(header->count, dim);
  if (bytes.size() != section_bytes) {
    return absl::DataLossError(
        absl::StrCat("a section of ", header->count, " keys of dim ", dim,
                     " takes ", section_bytes, " bytes, not ", bytes.size()));
  }
  section->header = *header;
  // Copied out so that they are aligned.
  section->keys.resize(header->count);
  std::memcpy(section->keys.data(), bytes.data() + kPushSectionHeaderBytes,
              section->keys.size() * sizeof(uint64_t));
  section->gradients.resize(section->keys.size() * dim);
  std::memcpy(section->gradients.data(),
              bytes.data() + kPushSectionHeaderBytes +
                  section->keys.size() * sizeof(uint64_t),
              section->gradients.size() * sizeof(float));
  return absl::OkStatus();
}

size_t MaxPushRecordBytes(size_t sections, size_t keys, size_t dim) {
  return kScaledPushRecordHeaderBytes + sections * kPushSectionHeaderBytes +
         keys * (sizeof(uint64_t) + dim * sizeof(float));
}

PushRecordWriter::PushRecordWriter(const PushOrigin& origin,
                                   uint32_t rows_updated,
                                   float learning_rate_scale,
                                   size_t reserve_bytes) {
  const bool scaled = learning_rate_scale != 1.0f;
  const uint32_t header[4] = {
      kPushRecordMarker,
      scaled ? kPushRecordKindScaledPush : kPushRecordKindPush, origin.worker,
      rows_updated};
  capacity_ = std::max(reserve_bytes, kScaledPushRecordHeaderBytes);
  bytes_.reset(new char[capacity_]);
  Append(header, sizeof(header));
  Append(&origin.incarnation, sizeof(origin.incarnation));
  Append(&origin.sequence, sizeof(origin.sequence));
  if (scaled) {
    const float scale_and_padding[2] = {learning_rate_scale, 0.0f};
    Append(scale_and_padding, sizeof(scale_and_padding));
  }
}

PushRecordWriter::PushRecordWriter(PushRecordWriter&& other) noexcept
    : bytes_(std::move(other.bytes_)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      section_offsets_(std::move(other.section_offsets_)) {
  other.section_offsets_.clear();
}

PushRecordWriter& PushRecordWriter::operator=(
    PushRecordWriter&& other) noexcept {
  bytes_ = std::move(other.bytes_);
  size_ = std::exchange(other.size_, 0);
  capacity_ = std::exchange(other.capacity_, 0);
  section_offsets_ = std::move(other.section_offsets_);
  other.section_offsets_.clear();
  return *this;
}

char* PushRecordWriter::Extend(size_t bytes) {
  if (size_ + bytes > capacity_) {
    const size_t capacity = std::max(size_ + bytes, 2 * capacity_);
    std::unique_ptr<char[]> grown(new char[capacity]);
    if (size_ > 0) std::memcpy(grown.get(), bytes_.get(), size_);
    bytes_ = std::move(grown);
    capacity_ = capacity;
  }
  char* at = bytes_.get() + size_;
  size_ += bytes;
  return at;
}

void PushRecordWriter::Append(const void* data, size_t bytes) {
  std::memcpy(Extend(bytes), data, bytes);
}

size_t PushRecordWriter::AddSection(uint32_t table_id, uint32_t stripe,
                                    size_t dim, absl::Span<const uint64_t> keys,
                                    absl::Span<const float> gradients,
                                    absl::Span<const uint32_t> positions) {
  section_offsets_.push_back(size_);
  const uint32_t header[3] = {table_id, stripe,
                              static_cast<uint32_t>(positions.size())};
  const uint64_t sequence = 0;  // SetSequence() fills it in
  Append(header, sizeof(header));
  Append(&sequence, sizeof(sequence));
  // Sized once and written in place: an append per key and per gradient
  // (two calls, a capacity check and a copy of 8 bytes each) was most of a
  // record's cost.
  const size_t row_bytes = dim * sizeof(float);
  char* out = Extend(positions.size() * (sizeof(uint64_t) + row_bytes));
  for (uint32_t p : positions) {
    std::memcpy(out, &keys[p], sizeof(uint64_t));
    out += sizeof(uint64_t);
  }
  for (uint32_t p : positions) {
    std::memcpy(out, &gradients[p * dim], row_bytes);
    out += row_bytes;
  }
  return section_offsets_.size() - 1;
}

void PushRecordWriter::SetSequence(size_t section, uint64_t sequence) {
  CHECK_LT(section, section_offsets_.size());
  std::memcpy(bytes_.get() + section_offsets_[section] + kSequenceOffset,
              &sequence, sizeof(sequence));
}

}  // namespace ps::embedding
