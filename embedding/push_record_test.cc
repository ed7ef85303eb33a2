#include "embedding/push_record.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/status_matchers.h"
#include "embedding/push_ledger.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;
using ::testing::HasSubstr;

PushOrigin Origin(uint32_t worker, uint64_t incarnation, uint64_t sequence) {
  PushOrigin origin;
  origin.worker = worker;
  origin.incarnation = incarnation;
  origin.sequence = sequence;
  return origin;
}

template <typename T>
void Append(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T At(absl::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

// Every section of `record` from `offset` on, of tables of dim `dim`.
std::vector<PushSection> Sections(absl::string_view record, size_t offset,
                                  size_t dim) {
  std::vector<PushSection> sections;
  while (offset < record.size()) {
    const absl::string_view rest = record.substr(offset);
    absl::StatusOr<PushSectionHeader> header = DecodePushSectionHeader(rest);
    EXPECT_OK(header);
    if (!header.ok()) break;
    absl::StatusOr<uint64_t> bytes = MeasurePushSection(rest, *header, dim);
    EXPECT_OK(bytes);
    if (!bytes.ok()) break;
    PushSection section;
    EXPECT_OK(DecodePushSection(rest.substr(0, *bytes), dim, &section));
    sections.push_back(section);
    offset += *bytes;
  }
  return sections;
}

// A push of keys {10, 11, 12} (dim 2, gradients 0.5 * position + column)
// from worker 6 (3 rows updated), in two sections: stripe 1 holds keys 12 and
// 10, stripe 4 key 11.
constexpr size_t kDim = 2;
const std::vector<uint64_t> kKeys = {10, 11, 12};
const std::vector<float> kGradients = {0.0f, 1.0f, 0.5f, 1.5f, 1.0f, 2.0f};

PushRecordWriter TwoSectionPush(float learning_rate_scale) {
  PushRecordWriter writer(Origin(6, 1000, 77), 3, learning_rate_scale,
                          MaxPushRecordBytes(2, 3, kDim));
  const std::vector<uint32_t> first = {2, 0}, second = {1};
  EXPECT_EQ(writer.AddSection(5, 1, kDim, kKeys, kGradients, first), 0u);
  EXPECT_EQ(writer.AddSection(5, 4, kDim, kKeys, kGradients, second), 1u);
  writer.SetSequence(0, 41);
  writer.SetSequence(1, 9);
  return writer;
}

TEST(PushRecordTest, APushRoundTripsFieldByField) {
  const PushRecordWriter writer = TwoSectionPush(1.0f);
  EXPECT_EQ(writer.num_sections(), 2u);
  absl::StatusOr<PushRecordHeader> header =
      DecodePushRecordHeader(writer.record());
  ASSERT_OK(header);
  EXPECT_EQ(header->kind, PushRecordHeader::Kind::kPush);
  EXPECT_EQ(header->origin.worker, 6u);
  EXPECT_EQ(header->origin.incarnation, 1000u);
  EXPECT_EQ(header->origin.sequence, 77u);
  EXPECT_TRUE(header->origin.tracked());
  EXPECT_EQ(header->rows_updated, 3u);
  EXPECT_EQ(header->learning_rate_scale, 1.0f);
  EXPECT_EQ(header->sections_offset, kPushRecordHeaderBytes);

  const std::vector<PushSection> sections =
      Sections(writer.record(), header->sections_offset, kDim);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[0].header.table_id, 5u);
  EXPECT_EQ(sections[0].header.stripe, 1u);
  EXPECT_EQ(sections[0].header.count, 2u);
  EXPECT_EQ(sections[0].header.sequence, 41u);
  EXPECT_EQ(sections[0].keys, (std::vector<uint64_t>{12, 10}));
  EXPECT_EQ(sections[0].gradients,
            (std::vector<float>{1.0f, 2.0f, 0.0f, 1.0f}));
  EXPECT_EQ(sections[1].header.table_id, 5u);
  EXPECT_EQ(sections[1].header.stripe, 4u);
  EXPECT_EQ(sections[1].header.count, 1u);
  EXPECT_EQ(sections[1].header.sequence, 9u);
  EXPECT_EQ(sections[1].keys, (std::vector<uint64_t>{11}));
  EXPECT_EQ(sections[1].gradients, (std::vector<float>{0.5f, 1.5f}));
}

TEST(PushRecordTest, AScaledPushCarriesItsScale) {
  const PushRecordWriter writer = TwoSectionPush(0.25f);
  absl::StatusOr<PushRecordHeader> header =
      DecodePushRecordHeader(writer.record());
  ASSERT_OK(header);
  EXPECT_EQ(header->kind, PushRecordHeader::Kind::kPush);
  EXPECT_EQ(header->learning_rate_scale, 0.25f);
  EXPECT_EQ(header->rows_updated, 3u);
  EXPECT_EQ(header->origin.sequence, 77u);
  EXPECT_EQ(header->sections_offset, kScaledPushRecordHeaderBytes);
  const std::vector<PushSection> sections =
      Sections(writer.record(), header->sections_offset, kDim);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[1].keys, (std::vector<uint64_t>{11}));
  // The largest a record of its shape can be: the scaled header, two
  // sections, three keys.
  EXPECT_EQ(writer.record().size(), MaxPushRecordBytes(2, 3, kDim));
}

TEST(PushRecordTest, TheBytesAreTheDataDirsFormat) {
  // Written out by hand: what data dirs hold, which must read the same
  // after any change to the code.
  std::string expected;
  Append<uint32_t>(0xFFFFFFFF, &expected);  // marker
  Append<uint32_t>(3, &expected);           // kind: scaled push
  Append<uint32_t>(6, &expected);           // worker
  Append<uint32_t>(3, &expected);           // rows updated
  Append<uint64_t>(1000, &expected);        // incarnation
  Append<uint64_t>(77, &expected);          // origin's sequence
  Append<float>(0.25f, &expected);          // scale
  Append<float>(0.0f, &expected);           // padding
  Append<uint32_t>(5, &expected);           // section 0: table
  Append<uint32_t>(1, &expected);           //   stripe
  Append<uint32_t>(2, &expected);           //   count
  Append<uint64_t>(41, &expected);          //   sequence
  Append<uint64_t>(12, &expected);
  Append<uint64_t>(10, &expected);
  for (float g : {1.0f, 2.0f, 0.0f, 1.0f}) Append<float>(g, &expected);
  Append<uint32_t>(5, &expected);  // section 1
  Append<uint32_t>(4, &expected);
  Append<uint32_t>(1, &expected);
  Append<uint64_t>(9, &expected);
  Append<uint64_t>(11, &expected);
  for (float g : {0.5f, 1.5f}) Append<float>(g, &expected);
  const PushRecordWriter scaled = TwoSectionPush(0.25f);
  EXPECT_EQ(scaled.record(), expected);

  // Unscaled: kind 1 and no scale or padding.
  const PushRecordWriter unscaled = TwoSectionPush(1.0f);
  EXPECT_EQ(At<uint32_t>(unscaled.record(), 4), 1u);
  EXPECT_EQ(unscaled.record().substr(kPushRecordHeaderBytes),
            absl::string_view(expected).substr(kScaledPushRecordHeaderBytes));
}

TEST(PushRecordTest, ASequenceIsZeroUntilSet) {
  PushRecordWriter writer(PushOrigin(), 1, 1.0f);
  const std::vector<uint32_t> positions = {0};
  writer.AddSection(2, 0, kDim, kKeys, kGradients, positions);
  EXPECT_EQ(At<uint64_t>(writer.record(), kPushRecordHeaderBytes + 12), 0u);
  writer.SetSequence(0, 123456789012345ULL);
  EXPECT_EQ(At<uint64_t>(writer.record(), kPushRecordHeaderBytes + 12),
            123456789012345ULL);
  absl::StatusOr<PushRecordHeader> header =
      DecodePushRecordHeader(writer.record());
  ASSERT_OK(header);
  EXPECT_FALSE(header->origin.tracked());
}

TEST(PushRecordTest, AWriterReservedTooLittleGrowsToTheSameRecord) {
  const PushRecordWriter reserved = TwoSectionPush(0.25f);
  for (size_t reserve : {size_t{0}, kScaledPushRecordHeaderBytes + 1}) {
    PushRecordWriter grown(Origin(6, 1000, 77), 3, 0.25f, reserve);
    const std::vector<uint32_t> first = {2, 0}, second = {1};
    grown.AddSection(5, 1, kDim, kKeys, kGradients, first);
    grown.AddSection(5, 4, kDim, kKeys, kGradients, second);
    grown.SetSequence(0, 41);
    grown.SetSequence(1, 9);
    EXPECT_EQ(grown.record(), reserved.record()) << "reserving " << reserve;
  }
}

TEST(PushRecordTest, AnUnreservedWriterTakesASectionManyTimesItsSize) {
  // One section far larger than twice the header the writer starts with.
  constexpr size_t kWideDim = 64;
  constexpr size_t kCount = 100;
  std::vector<uint64_t> keys(kCount);
  std::vector<float> gradients(kCount * kWideDim);
  std::vector<uint32_t> positions(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    keys[i] = 1000 + i;
    positions[i] = static_cast<uint32_t>(kCount - 1 - i);
    for (size_t d = 0; d < kWideDim; ++d)
      gradients[i * kWideDim + d] = static_cast<float>(i) + 0.25f * d;
  }
  PushRecordWriter writer(Origin(1, 2, 3), kCount, 1.0f);
  writer.AddSection(7, 2, kWideDim, keys, gradients, positions);
  const absl::string_view record = writer.record();
  ASSERT_EQ(record.size(),
            MaxPushRecordBytes(1, kCount, kWideDim) -
                (kScaledPushRecordHeaderBytes - kPushRecordHeaderBytes));
  absl::StatusOr<PushRecordHeader> header = DecodePushRecordHeader(record);
  ASSERT_OK(header);
  PushSection section;
  ASSERT_OK(DecodePushSection(record.substr(header->sections_offset), kWideDim,
                              &section));
  ASSERT_EQ(section.keys.size(), kCount);
  for (size_t i = 0; i < kCount; ++i) {
    const size_t from = positions[i];
    EXPECT_EQ(section.keys[i], keys[from]);
    for (size_t d = 0; d < kWideDim; ++d) {
      ASSERT_EQ(section.gradients[i * kWideDim + d],
                gradients[from * kWideDim + d]);
    }
  }
  // Moved, the record goes along and the writer left behind is empty.
  PushRecordWriter moved = std::move(writer);
  EXPECT_EQ(moved.record(), record);
  EXPECT_EQ(moved.num_sections(), 1u);
  EXPECT_TRUE(writer.record().empty());  // NOLINT: use after move, on purpose
  EXPECT_EQ(writer.num_sections(), 0u);
}

TEST(PushRecordTest, ALedgerRecordHoldsItsSnapshot) {
  const std::string snapshot("ledger\0bytes", 12);
  const std::string record = EncodeLedgerRecord(snapshot);
  EXPECT_EQ(record.size(), 8 + snapshot.size());
  absl::StatusOr<PushRecordHeader> header = DecodePushRecordHeader(record);
  ASSERT_OK(header);
  EXPECT_EQ(header->kind, PushRecordHeader::Kind::kLedger);
  EXPECT_EQ(header->ledger, snapshot);
  EXPECT_EQ(header->sections_offset, record.size());
  EXPECT_FALSE(header->origin.tracked());
  // An empty snapshot is a record of its own.
  absl::StatusOr<PushRecordHeader> empty =
      DecodePushRecordHeader(EncodeLedgerRecord(""));
  ASSERT_OK(empty);
  EXPECT_EQ(empty->kind, PushRecordHeader::Kind::kLedger);
  EXPECT_TRUE(empty->ledger.empty());
}

TEST(PushRecordTest, ARecordWithoutAHeaderIsSectionsAlone) {
  const PushRecordWriter writer = TwoSectionPush(1.0f);
  const absl::string_view sections_only =
      writer.record().substr(kPushRecordHeaderBytes);
  absl::StatusOr<PushRecordHeader> header =
      DecodePushRecordHeader(sections_only);
  ASSERT_OK(header);
  EXPECT_EQ(header->kind, PushRecordHeader::Kind::kSectionsOnly);
  EXPECT_EQ(header->sections_offset, 0u);
  EXPECT_EQ(header->learning_rate_scale, 1.0f);
  EXPECT_FALSE(header->origin.tracked());
  EXPECT_EQ(header->rows_updated, 0u);
  EXPECT_EQ(Sections(sections_only, 0, kDim).size(), 2u);
}

TEST(PushRecordTest, ATruncatedHeaderIsDataLoss) {
  const std::string record(TwoSectionPush(0.25f).record());
  for (size_t size : {0, 1, 3}) {
    EXPECT_THAT(DecodePushRecordHeader(record.substr(0, size)),
                StatusIs(StatusCode::kDataLoss))
        << size;
  }
  EXPECT_THAT(DecodePushRecordHeader("").status().message(),
              HasSubstr("fewer than 4 bytes"));
  // The marker alone, or with a kind cut short: no kind.
  for (size_t size : {4, 7}) {
    const absl::Status status =
        DecodePushRecordHeader(record.substr(0, size)).status();
    EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss)) << size;
    EXPECT_THAT(status.message(), HasSubstr("of kind 0")) << size;
  }
  // A scaled header a byte short, and an unscaled one.
  absl::Status status =
      DecodePushRecordHeader(record.substr(0, kScaledPushRecordHeaderBytes - 1))
          .status();
  EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss));
  EXPECT_THAT(status.message(), HasSubstr("of kind 3 and 39 bytes"));
  const std::string unscaled(TwoSectionPush(1.0f).record());
  status =
      DecodePushRecordHeader(unscaled.substr(0, kPushRecordHeaderBytes - 1))
          .status();
  EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss));
  EXPECT_THAT(status.message(), HasSubstr("of kind 1 and 31 bytes"));
  // Whole headers with no section are valid records.
  EXPECT_OK(DecodePushRecordHeader(record.substr(0, 40)));
  EXPECT_OK(DecodePushRecordHeader(unscaled.substr(0, 32)));
}

TEST(PushRecordTest, AnUnknownKindIsDataLoss) {
  for (uint32_t kind : {0u, 4u, 0xFFFFFFFFu}) {
    std::string record(TwoSectionPush(1.0f).record());
    std::memcpy(&record[4], &kind, sizeof(kind));
    const absl::Status status = DecodePushRecordHeader(record).status();
    EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss)) << kind;
    EXPECT_THAT(status.message(), HasSubstr("of kind " + std::to_string(kind)));
  }
}

TEST(PushRecordTest, AScaleThatIsNotPositiveAndFiniteIsDataLoss) {
  for (float scale : {0.0f, -1.0f, std::nanf(""), INFINITY, -INFINITY}) {
    std::string record(TwoSectionPush(0.5f).record());
    std::memcpy(&record[kPushRecordHeaderBytes], &scale, sizeof(scale));
    const absl::Status status = DecodePushRecordHeader(record).status();
    EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss)) << scale;
    EXPECT_THAT(status.message(), HasSubstr("learning-rate scale")) << scale;
  }
}

TEST(PushRecordTest, ATruncatedSectionIsDataLoss) {
  const PushRecordWriter writer = TwoSectionPush(1.0f);
  const absl::string_view sections =
      writer.record().substr(kPushRecordHeaderBytes);
  // A section header a byte short.
  const absl::Status header_status =
      DecodePushSectionHeader(sections.substr(0, kPushSectionHeaderBytes - 1))
          .status();
  EXPECT_THAT(header_status, StatusIs(StatusCode::kDataLoss));
  EXPECT_EQ(header_status.message(), "truncated section header");
  EXPECT_OK(
      DecodePushSectionHeader(sections.substr(0, kPushSectionHeaderBytes)));
  // The first section (2 keys of dim 2: 20 + 16 + 16 bytes) a byte short.
  absl::StatusOr<PushSectionHeader> header = DecodePushSectionHeader(sections);
  ASSERT_OK(header);
  EXPECT_EQ(PushSectionBytes(header->count, kDim), 52u);
  absl::StatusOr<uint64_t> whole =
      MeasurePushSection(sections.substr(0, 52), *header, kDim);
  ASSERT_OK(whole);
  EXPECT_EQ(*whole, 52u);
  const absl::Status short_status =
      MeasurePushSection(sections.substr(0, 51), *header, kDim).status();
  EXPECT_THAT(short_status, StatusIs(StatusCode::kDataLoss));
  EXPECT_EQ(short_status.message(),
            "a section of 2 keys of dim 2 does not fit");
  // Read as a wider table's, it runs past the record.
  EXPECT_THAT(MeasurePushSection(sections, *header, 64),
              StatusIs(StatusCode::kDataLoss));
}

TEST(PushRecordTest, ASectionDecodesOnlyAtItsExactSize) {
  const PushRecordWriter writer = TwoSectionPush(1.0f);
  const std::string sections(writer.record().substr(kPushRecordHeaderBytes));
  PushSection section;
  EXPECT_OK(DecodePushSection(absl::string_view(sections).substr(0, 52), kDim,
                              &section));
  for (size_t size : {size_t{10}, size_t{51}, size_t{53}}) {
    const absl::Status status = DecodePushSection(
        absl::string_view(sections).substr(0, size), kDim, &section);
    EXPECT_THAT(status, StatusIs(StatusCode::kDataLoss)) << size;
  }
  EXPECT_THAT(DecodePushSection(absl::string_view(sections).substr(0, 51), kDim,
                                &section)
                  .message(),
              HasSubstr("takes 52 bytes, not 51"));
  // A count that claims more keys than there are bytes.
  std::string inflated = sections.substr(0, 52);
  const uint32_t count = 1u << 30;
  std::memcpy(&inflated[8], &count, sizeof(count));
  EXPECT_THAT(DecodePushSection(inflated, kDim, &section),
              StatusIs(StatusCode::kDataLoss));
}

}  // namespace
}  // namespace ps::embedding
