// SplitMessage() and ForEachRun() against protobuf's own parser, on
// messages cut into slices of every size (items straddling them), with the
// fields in any order, repeated, or unknown; and refusing what protobuf
// refuses.
#include "net/message_bytes.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "net/byte_buffer_test_util.h"
#include "proto/ps.pb.h"

namespace ps::net {
namespace {

constexpr int kBulk[] = {PushRequest::kKeysFieldNumber,
                         PushRequest::kGradientsFieldNumber};

// The items ForEachRun() hands out, concatenated.
std::string Items(const grpc::ByteBuffer& message, const FieldBytes& field,
                  size_t item_bytes) {
  std::string items;
  EXPECT_OK(ForEachRun(message, field.offset, field.size / item_bytes,
                       item_bytes,
                       [&](size_t first, size_t count, const char* bytes) {
                         EXPECT_EQ(items.size(), first * item_bytes);
                         EXPECT_GT(count, 0u);
                         items.append(bytes, count * item_bytes);
                       }));
  return items;
}

std::string RandomBytes(std::mt19937* rng, size_t size) {
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>((*rng)());
  return bytes;
}

// A random push, each field set or not, as its fields' wire forms: each is
// a message of that field alone (concatenated, they are the push).
std::vector<std::string> RandomFields(std::mt19937* rng, size_t item_bytes) {
  std::vector<std::string> fields;
  const auto maybe = [&](auto set) {
    if ((*rng)() % 4 == 0) return;  // left at its default
    PushRequest field;
    set(&field);
    fields.push_back(field.SerializeAsString());
  };
  maybe([&](PushRequest* r) { r->set_table("clicks"); });
  maybe([&](PushRequest* r) {
    r->set_keys(RandomBytes(rng, item_bytes * ((*rng)() % 40)));
  });
  maybe([&](PushRequest* r) {
    r->set_gradients(RandomBytes(rng, item_bytes * ((*rng)() % 40)));
  });
  maybe([&](PushRequest* r) { r->set_worker((*rng)()); });
  maybe([&](PushRequest* r) { r->set_clock(uint64_t{(*rng)()} << 20); });
  maybe([&](PushRequest* r) { r->set_incarnation((*rng)() % 9); });
  maybe([&](PushRequest* r) { r->set_sequence((*rng)()); });
  maybe([&](PushRequest* r) { r->set_learning_rate_scale(0.5f); });
  maybe([&](PushRequest* r) { r->set_format(WireFormat::FP16); });
  maybe([&](PushRequest* r) { r->set_gradient_scale(1024.0f); });
  maybe([&](PushRequest* r) { r->set_slot_map_epoch((*rng)() % 5); });
  maybe([&](PushRequest* r) {
    for (int i = 0; i < 3; ++i) {
      PushRequest::MovedFrom* moved = r->add_moved_from();
      moved->set_shard((*rng)() % 4);
      moved->set_sequence((*rng)());
    }
  });
  return fields;
}

TEST(MessageBytesTest, SplitsAsProtobufParsesWhateverTheSlicesAndOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t item_bytes = 1 + rng() % 9;
    std::vector<std::string> fields = RandomFields(&rng, item_bytes);
    std::shuffle(fields.begin(), fields.end(), rng);
    std::string bytes;
    for (const std::string& field : fields) bytes += field;
    PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    for (size_t slice :
         {size_t{1}, size_t{3}, size_t{7}, size_t{64}, bytes.size() + 1}) {
      const grpc::ByteBuffer message = InSlices(bytes, slice);
      FieldBytes bulk[2];
      std::string rest;
      ASSERT_OK(SplitMessage(message, kBulk, absl::MakeSpan(bulk), &rest))
          << trial;
      PushRequest read;
      ASSERT_TRUE(read.ParseFromString(rest)) << trial;
      EXPECT_TRUE(read.keys().empty());
      EXPECT_TRUE(read.gradients().empty());
      ASSERT_EQ(bulk[0].size, parsed.keys().size());
      ASSERT_EQ(bulk[1].size, parsed.gradients().size());
      read.set_keys(Items(message, bulk[0], item_bytes));
      read.set_gradients(Items(message, bulk[1], item_bytes));
      EXPECT_EQ(read.SerializeAsString(), parsed.SerializeAsString())
          << trial << " in slices of " << slice;
    }
  }
}

TEST(MessageBytesTest, TheLastOfABulkFieldCountsAndUnknownFieldsPassOn) {
  PushRequest first, second;
  first.set_keys("abcdefgh");
  first.set_worker(2);
  second.set_keys("ijkl");
  second.set_worker(1);
  // Fields 15 (a varint), 16 (bytes) and 2 (the keys' number) as a varint:
  // unknown to a PushRequest, kept by its parser.
  const std::string unknown = std::string("\x78\x05", 2) +
                              std::string("\x82\x01\x03xyz", 6) +
                              std::string("\x10\x07", 2);
  const std::string bytes =
      first.SerializeAsString() + unknown + second.SerializeAsString();
  PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const grpc::ByteBuffer message = InSlices(bytes, 2);
  FieldBytes bulk[2];
  std::string rest;
  ASSERT_OK(SplitMessage(message, kBulk, absl::MakeSpan(bulk), &rest));
  EXPECT_EQ(Items(message, bulk[0], 4), "ijkl");
  EXPECT_EQ(parsed.keys(), "ijkl");
  EXPECT_EQ(bulk[1].size, 0u);
  PushRequest read;
  ASSERT_TRUE(read.ParseFromString(rest));
  EXPECT_EQ(read.worker(), 1u);
  read.set_keys("ijkl");
  EXPECT_EQ(read.SerializeAsString(), parsed.SerializeAsString());
}

// Groups nested `depth` deep in field 20 (unknown to a PushRequest).
std::string NestedGroups(int depth) {
  std::string bytes;
  for (int i = 0; i < depth; ++i) bytes += "\xa3\x01";  // field 20, START
  bytes += std::string("\x08\x01", 2);                  // field 1 = 1
  for (int i = 0; i < depth; ++i) bytes += "\xa4\x01";  // field 20, END
  return bytes;
}

TEST(MessageBytesTest, TakesWhatProtobufTakesAndRefusesWhatItRefuses) {
  const std::string inputs[] = {
      // Field 4 (a varint) with its tag in 5 bytes, then in 6.
      std::string("\xa0\x80\x80\x80\x00\x07", 6),
      std::string("\xa0\x80\x80\x80\x80\x00\x07", 7),
      // An unknown group holding a varint, a fixed32, bytes and a group.
      std::string("\xa3\x01\x08\x05\x15\x01\x02\x03\x04\x1a\x02hi"
                  "\x23\x24\xa4\x01",
                  16),
      // The keys' field number as a group, holding bytes whose length is
      // spelled in 6 bytes; and in 5.
      std::string("\x13\x0a\x80\x80\x80\x80\x80\x00\x14", 9),
      std::string("\x13\x0a\x81\x80\x80\x80\x00x\x14", 9),
      // A group ended by another field's END; an END with no group; a group
      // never ended; wire types 6 and 7; a tag inside a group of 6 bytes.
      std::string("\xa3\x01\xac\x01", 4), std::string("\xa4\x01", 2),
      std::string("\xa3\x01\x08\x01", 4), std::string("\x0e\x00", 2),
      std::string("\x0f\x00", 2),
      std::string("\xa3\x01\x88\x80\x80\x80\x80\x00\x01\xa4\x01", 11),
      // Field number 0 inside a group.
      std::string("\xa3\x01\x00\x01\xa4\x01", 6),
      // Groups nested as deep as protobuf allows, and deeper.
      NestedGroups(1), NestedGroups(99), NestedGroups(100), NestedGroups(101)};
  for (const std::string& input : inputs) {
    PushRequest parsed;
    const bool protobuf_takes = parsed.ParseFromString(input);
    FieldBytes bulk[2];
    std::string rest;
    const absl::Status split =
        SplitMessage(InSlices(input, 3), kBulk, absl::MakeSpan(bulk), &rest);
    EXPECT_EQ(split.ok(), protobuf_takes)
        << absl::CEscape(input) << " " << split;
    if (!split.ok() || !protobuf_takes) continue;
    PushRequest read;
    ASSERT_TRUE(read.ParseFromString(rest)) << absl::CEscape(input);
    EXPECT_EQ(read.SerializeAsString(), parsed.SerializeAsString())
        << absl::CEscape(input);
  }
}

TEST(MessageBytesTest, RefusesWhatProtobufRefuses) {
  PushRequest request;
  request.set_worker(2);
  request.set_keys(std::string(32, 'x'));
  const std::string bytes = request.SerializeAsString();
  // Cut inside the keys, inside a length, garbage, a tag of 0, field number
  // 0 (bytes of length 0), keys and a table of a length in 6 bytes or of
  // 2 GiB: each refused by protobuf's parser too.
  const std::string bad_messages[] = {
      bytes.substr(0, bytes.size() - 1),
      bytes.substr(0, 3),
      std::string("\xff\xff\xff\xff", 4),
      std::string("\x00\x01", 2),
      std::string("\x02\x00", 2),
      std::string("\x12\x80\x80\x80\x80\x80\x00", 7),
      std::string("\x12\x80\x80\x80\x80\x08", 6),
      std::string("\x0a\x80\x80\x80\x80\x80\x00", 7),
      std::string("\x0a\x80\x80\x80\x80\x08", 6)};
  for (const std::string& bad : bad_messages) {
    PushRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bad)) << absl::CEscape(bad);
    FieldBytes bulk[2];
    std::string rest;
    EXPECT_THAT(
        SplitMessage(InSlices(bad, 5), kBulk, absl::MakeSpan(bulk), &rest),
        StatusIs(absl::StatusCode::kInvalidArgument))
        << absl::CEscape(bad);
  }
  // A message of no bytes, and a buffer never filled, are empty messages.
  for (const grpc::ByteBuffer& empty :
       {grpc::ByteBuffer(nullptr, 0), grpc::ByteBuffer()}) {
    FieldBytes bulk[2] = {{3, 4}, {5, 6}};
    std::string rest;
    ASSERT_OK(SplitMessage(empty, kBulk, absl::MakeSpan(bulk), &rest));
    EXPECT_EQ(bulk[0].size + bulk[1].size + bulk[1].offset, 0u);
    EXPECT_TRUE(rest.empty());
  }
  // Items past the message's end: the items before, then an error.
  size_t handed = 0;
  EXPECT_THAT(
      ForEachRun(InSlices(bytes, 5), bytes.size() - 8, 3, 4,
                 [&](size_t, size_t count, const char*) { handed += count; }),
      StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(handed, 2u);
}

}  // namespace
}  // namespace ps::net
