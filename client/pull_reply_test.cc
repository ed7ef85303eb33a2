// ReadPullReply() and ForEachPulledRow() against protobuf's own parser, on
// replies cut into slices of every size (rows straddling them), with the
// fields in any order, repeated, or unknown; and refusing what is not a
// PullResponse.
#include "client/pull_reply.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "net/byte_buffer_test_util.h"

namespace ps::client {
namespace {

using ::ps::net::InSlices;

// The rows ForEachPulledRow() hands out, concatenated.
std::string Rows(const grpc::ByteBuffer& reply, const PullReplyFields& fields,
                 size_t row_bytes) {
  std::string rows;
  EXPECT_OK(ForEachPulledRow(
      reply, fields.values_offset, fields.values_bytes / row_bytes, row_bytes,
      [&](size_t first, size_t count, const char* bytes) {
        EXPECT_EQ(rows.size(), first * row_bytes);
        EXPECT_GT(count, 0u);
        rows.append(bytes, count * row_bytes);
      }));
  return rows;
}

// A random reply, each field set or not, as its fields' wire forms: each
// is a message of that field alone (concatenated, they are the reply).
std::vector<std::string> RandomFields(std::mt19937* rng, size_t row_bytes) {
  std::vector<std::string> fields;
  const auto maybe = [&](auto set) {
    if ((*rng)() % 4 == 0) return;  // left at its default
    PullResponse field;
    set(&field);
    fields.push_back(field.SerializeAsString());
  };
  maybe([&](PullResponse* r) { r->set_dim(1 + (*rng)() % 300); });
  maybe([&](PullResponse* r) {
    std::string values(row_bytes * ((*rng)() % 40), '\0');
    for (char& c : values) c = static_cast<char>((*rng)());
    r->set_values(values);
  });
  maybe([&](PullResponse* r) { r->set_format(WireFormat::BF16); });
  maybe([&](PullResponse* r) { r->set_state_floats((*rng)() % 70000); });
  maybe([&](PullResponse* r) {
    r->mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    r->mutable_optimizer()->set_learning_rate(0.25f);
  });
  maybe([&](PullResponse* r) { r->set_learning_rate_multiplier(1.5f); });
  return fields;
}

TEST(PullReplyTest, ReadsWhatProtobufParsesWhateverTheSlicesAndOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t row_bytes = 4 * (1 + rng() % 9);
    std::vector<std::string> fields = RandomFields(&rng, row_bytes);
    std::shuffle(fields.begin(), fields.end(), rng);
    std::string bytes;
    for (const std::string& field : fields) bytes += field;
    PullResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    for (size_t slice :
         {size_t{1}, size_t{3}, size_t{7}, size_t{64}, bytes.size() + 1}) {
      const grpc::ByteBuffer reply = InSlices(bytes, slice);
      absl::StatusOr<PullReplyFields> read = ReadPullReply(reply);
      ASSERT_OK(read) << trial;
      EXPECT_EQ(read->dim, parsed.dim());
      EXPECT_EQ(read->format, parsed.format());
      EXPECT_EQ(read->state_floats, parsed.state_floats());
      EXPECT_EQ(read->has_optimizer, parsed.has_optimizer());
      EXPECT_EQ(read->optimizer.SerializeAsString(),
                parsed.optimizer().SerializeAsString());
      EXPECT_EQ(read->learning_rate_multiplier,
                parsed.learning_rate_multiplier());
      ASSERT_EQ(read->values_bytes, parsed.values().size());
      EXPECT_EQ(Rows(reply, *read, row_bytes), parsed.values())
          << trial << " in slices of " << slice;
    }
  }
}

TEST(PullReplyTest, TheLastOfARepeatedFieldCountsAndUnknownOnesAreSkipped) {
  PullResponse first, second;
  first.set_values("abcdefgh");
  first.set_dim(2);
  first.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  second.set_values("ijkl");
  second.set_dim(1);
  second.mutable_optimizer()->set_learning_rate(0.5f);
  // Fields 15 (a varint) and 16 (bytes): unknown to this reader.
  const std::string unknown =
      std::string("\x78\x05", 2) + std::string("\x82\x01\x03xyz", 6);
  const std::string bytes =
      first.SerializeAsString() + unknown + second.SerializeAsString();
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const grpc::ByteBuffer reply = InSlices(bytes, 2);
  absl::StatusOr<PullReplyFields> read = ReadPullReply(reply);
  ASSERT_OK(read);
  EXPECT_EQ(read->dim, 1u);
  EXPECT_EQ(Rows(reply, *read, 4), "ijkl");
  EXPECT_EQ(parsed.values(), "ijkl");
  // The optimizer's fields merged, as protobuf merges a message field.
  EXPECT_EQ(read->optimizer.SerializeAsString(),
            parsed.optimizer().SerializeAsString());
  EXPECT_EQ(read->optimizer.kind(), OptimizerSpec::ADAGRAD);
  EXPECT_EQ(read->optimizer.learning_rate(), 0.5f);
}

TEST(PullReplyTest, RefusesWhatIsNotAPullResponse) {
  PullResponse response;
  response.set_dim(2);
  response.set_values(std::string(32, 'x'));
  const std::string bytes = response.SerializeAsString();
  // Cut inside the values, field number 0, values of a 2 GiB length (each
  // refused by protobuf's parser too; net/message_bytes_test has the rest).
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() - 1), std::string("\x02\x00", 2),
        std::string("\x12\x80\x80\x80\x80\x08", 6)}) {
    EXPECT_THAT(ReadPullReply(InSlices(bad, 5)),
                StatusIs(absl::StatusCode::kInternal))
        << absl::CEscape(bad);
  }
  // A reply of no bytes, and one never filled, are empty messages.
  for (const grpc::ByteBuffer& empty :
       {grpc::ByteBuffer(nullptr, 0), grpc::ByteBuffer()}) {
    absl::StatusOr<PullReplyFields> read = ReadPullReply(empty);
    ASSERT_OK(read);
    EXPECT_EQ(read->values_bytes, 0u);
    EXPECT_FALSE(read->has_optimizer);
  }
  // Rows past the reply's end: the rows before, then an error.
  size_t handed = 0;
  EXPECT_THAT(ForEachPulledRow(
                  InSlices(bytes, 5), bytes.size() - 8, 3, 4,
                  [&](size_t, size_t count, const char*) { handed += count; }),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(handed, 2u);
}

}  // namespace
}  // namespace ps::client
