// File: embedding/push_record.h
//
// The records EmbeddingStore keeps in its push log (push_log.h, which
// stores them as opaque bytes): one per push under --durability=wal, and a
// ledger snapshot opening each segment. This file is the format, both ways.
//
// A record starts with a header: kPushRecordMarker and the record's kind
// (uint32 each).
//   kind 1 (push)          the push's origin's worker and the number of
//                          distinct keys it updated (uint32 each), then the
//                          origin's incarnation and sequence (uint64 each):
//                          32 bytes; then one section per stripe the push
//                          touched.
//   kind 3 (scaled push)   a kind 1 header going on with the push's
//                          learning-rate scale (float) and 4 bytes of
//                          zeros: 40 bytes; then the sections.
//   kind 2 (ledger)        the rest is a PushLedger snapshot
//                          (PushLedger::Serialize()).
// A record whose first uint32 is not the marker is sections alone, with no
// origin and a scale of 1: data dirs may hold such records, and a table id
// is never the marker.
//
// A section: the table id, the stripe and the key count (uint32 each), the
// stripe's sequence number for the update (uint64; unaligned, at byte 12),
// the keys (uint64 each), then each key's summed gradient (dim floats, the
// table's dim: a section cannot be read without knowing its table). Host
// byte order throughout.
//
// Decoding never trusts the bytes: a short or inconsistent record is
// DATA_LOSS naming what is wrong, never a read past the end.
//
// Thread-safety: free functions are stateless; a PushRecordWriter is not
// shared between threads.

#ifndef PS_EMBEDDING_PUSH_RECORD_H_
#define PS_EMBEDDING_PUSH_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "embedding/push_ledger.h"

namespace ps::embedding {

// The first uint32 of a record with a header.
inline constexpr uint32_t kPushRecordMarker = 0xFFFFFFFF;

// The kinds of record with a header (the uint32 after the marker).
inline constexpr uint32_t kPushRecordKindPush = 1;
inline constexpr uint32_t kPushRecordKindLedger = 2;
inline constexpr uint32_t kPushRecordKindScaledPush = 3;

inline constexpr size_t kPushRecordHeaderBytes =
    4 * sizeof(uint32_t) + 2 * sizeof(uint64_t);
inline constexpr size_t kScaledPushRecordHeaderBytes =
    kPushRecordHeaderBytes + 2 * sizeof(float);
inline constexpr size_t kPushSectionHeaderBytes =
    3 * sizeof(uint32_t) + sizeof(uint64_t);

// What a record's header says.
struct PushRecordHeader {
  enum class Kind {
    // No header: sections from the first byte.
    kSectionsOnly,
    // A push, scaled (kind 3) or not (kind 1).
    kPush,
    kLedger,
  };
  Kind kind = Kind::kSectionsOnly;
  // kPush: the push's origin (untracked when it named none) and the number
  // of distinct keys it updated.
  PushOrigin origin;
  uint32_t rows_updated = 0;
  // The learning-rate scale the push was applied with: 1 unless scaled.
  float learning_rate_scale = 1.0f;
  // kLedger: the snapshot, pointing into the decoded record.
  absl::string_view ledger;
  // Where the sections begin: 0 for kSectionsOnly, the header's size for
  // kPush, the record's size for kLedger (it has none).
  size_t sections_offset = 0;
};

// Decodes the header of `record`. DATA_LOSS for a record of fewer than 4
// bytes, an unknown kind, a push header cut short, or a scale that is not
// positive and finite.
absl::StatusOr<PushRecordHeader> DecodePushRecordHeader(
    absl::string_view record);

// A ledger record (kind 2) holding `snapshot` (PushLedger::Serialize()).
std::string EncodeLedgerRecord(absl::string_view snapshot);

struct PushSectionHeader {
  uint32_t table_id = 0;
  uint32_t stripe = 0;
  uint32_t count = 0;
  uint64_t sequence = 0;
};

// A section read whole: its header, keys and gradients (header.count * dim
// floats, row i for keys[i]).
struct PushSection {
  PushSectionHeader header;
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
};

// The header of the section `bytes` starts with. DATA_LOSS ("truncated
// section header") if `bytes` is shorter than one.
absl::StatusOr<PushSectionHeader> DecodePushSectionHeader(
    absl::string_view bytes);

// The bytes of a section of `count` keys of `dim` floats each.
uint64_t PushSectionBytes(uint32_t count, size_t dim);

// The bytes of the section `bytes` starts with, whose header is `header`,
// of a table of dim `dim`. DATA_LOSS if it runs past the end of `bytes`.
absl::StatusOr<uint64_t> MeasurePushSection(absl::string_view bytes,
                                            const PushSectionHeader& header,
                                            size_t dim);

// Decodes `bytes`, exactly one section of a table of dim `dim`, into
// `section` (reusing its vectors). DATA_LOSS unless the sizes agree.
absl::Status DecodePushSection(absl::string_view bytes, size_t dim,
                               PushSection* section);

// At most the bytes of a push record whose `keys` keys of dim `dim` lie in
// up to `sections` sections (with the longer, scaled header).
size_t MaxPushRecordBytes(size_t sections, size_t keys, size_t dim);

// Builds the record of one push: the header at construction, then a
// section per stripe. Sections' sequence numbers are 0 until set, so that
// the record can be built before the stripes are locked and numbered under
// their locks.
class PushRecordWriter {
 public:
  // A push record: scaled (kind 3) unless `learning_rate_scale` is 1.
  // `reserve_bytes`: the record's expected size (MaxPushRecordBytes()).
  PushRecordWriter(const PushOrigin& origin, uint32_t rows_updated,
                   float learning_rate_scale, size_t reserve_bytes = 0);

  // Movable (a writer moved from holds an empty record), not copyable.
  PushRecordWriter(PushRecordWriter&& other) noexcept;
  PushRecordWriter& operator=(PushRecordWriter&& other) noexcept;

  // Appends a section of `table_id` for `stripe` holding, for each p in
  // `positions`, keys[p] and its gradient (gradients[p * dim ...], dim
  // floats). Returns the section's index, for SetSequence().
  size_t AddSection(uint32_t table_id, uint32_t stripe, size_t dim,
                    absl::Span<const uint64_t> keys,
                    absl::Span<const float> gradients,
                    absl::Span<const uint32_t> positions);

  // Sets the sequence number of section `section`. REQUIRES: an index
  // AddSection() returned.
  void SetSequence(size_t section, uint64_t sequence);

  size_t num_sections() const { return section_offsets_.size(); }
  // The record: valid until the writer changes or goes.
  absl::string_view record() const { return {bytes_.get(), size_}; }

 private:
  // Grows the record by `bytes` and returns where they go, uninitialized: a
  // record's bytes are written once, so none is zeroed first.
  char* Extend(size_t bytes);
  void Append(const void* data, size_t bytes);

  std::unique_ptr<char[]> bytes_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  // Where each section begins in the record.
  std::vector<size_t> section_offsets_;
};

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_PUSH_RECORD_H_
