// ReceivedPush against the PushRequest protobuf parses from the same bytes,
// handed over in slices of every size (keys and values straddling them),
// in each wire format.
#include "server/received_push.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/status_matchers.h"
#include "base/wire_format.h"
#include "gtest/gtest.h"
#include "net/byte_buffer_test_util.h"

namespace ps::server {
namespace {

using ::ps::net::InSlices;

TEST(ReceivedPushTest, ReadsWhatProtobufParsesInEveryFormatAndSlicing) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> gradient(-4.0f, 4.0f);
  for (WireFormat format :
       {WireFormat::FP32, WireFormat::FP16, WireFormat::BF16}) {
    for (size_t keys : {size_t{0}, size_t{1}, size_t{37}}) {
      const size_t dim = 3;
      std::vector<uint64_t> packed_keys(keys);
      for (uint64_t& key : packed_keys) key = (uint64_t{rng()} << 32) | rng();
      std::vector<float> values(keys * dim);
      for (float& value : values) value = gradient(rng);
      PushRequest request;
      request.set_table("clicks");
      request.set_keys(std::string(
          reinterpret_cast<const char*>(packed_keys.data()), keys * 8));
      std::string encoded(values.size() * WireValueBytes(format), '\0');
      EncodeWireValues(format, values, encoded.data());
      request.set_gradients(encoded);
      request.set_format(format);
      request.set_worker(4);
      request.set_sequence(99);
      request.add_moved_from()->set_shard(2);
      const std::string bytes = request.SerializeAsString();
      // What the shard decoded before: from the parsed message's strings.
      std::vector<float> expected(values.size());
      DecodeWireValues(format, request.gradients().data(),
                       absl::MakeSpan(expected), 0.25f);
      for (size_t slice : {size_t{1}, size_t{3}, size_t{5}, bytes.size()}) {
        absl::StatusOr<ReceivedPush> push =
            ReceivedPush::Read(InSlices(bytes, std::max<size_t>(slice, 1)));
        ASSERT_OK(push);
        PushRequest fields = request;
        fields.clear_keys();
        fields.clear_gradients();
        EXPECT_EQ(push->fields().SerializeAsString(),
                  fields.SerializeAsString());
        ASSERT_EQ(push->keys_bytes(), keys * 8);
        ASSERT_EQ(push->gradients_bytes(), encoded.size());
        std::vector<uint64_t> read_keys;
        push->UnpackKeys(&read_keys);
        EXPECT_EQ(read_keys, packed_keys);
        std::vector<float> read(values.size(), -1.0f);
        push->DecodeGradients(format, 0.25f, absl::MakeSpan(read));
        EXPECT_EQ(read, expected) << format << " in slices of " << slice;
      }
    }
  }
}

TEST(ReceivedPushTest, FromRequestReadsItsOwnWireForm) {
  PushRequest request;
  request.set_table("t");
  request.set_keys(std::string(16, '\x01'));
  request.set_gradients(std::string(8, '\0'));
  request.set_incarnation(7);
  const ReceivedPush push = ReceivedPush::FromRequest(request);
  EXPECT_EQ(push.fields().incarnation(), 7u);
  EXPECT_EQ(push.fields().table(), "t");
  EXPECT_EQ(push.keys_bytes(), 16u);
  EXPECT_EQ(push.gradients_bytes(), 8u);
  std::vector<uint64_t> keys;
  push.UnpackKeys(&keys);
  EXPECT_EQ(keys, std::vector<uint64_t>(2, 0x0101010101010101u));
}

TEST(ReceivedPushTest, RefusesWhatIsNotAPushRequest) {
  // A cut field; a table that is not UTF-8 (protobuf refuses a string
  // field's bad UTF-8).
  for (const std::string& bad : {std::string("\x12\x05"
                                             "abc",
                                             5),
                                 std::string("\x0a\x02\xff\xfe", 4)}) {
    PushRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bad));
    EXPECT_THAT(ReceivedPush::Read(InSlices(bad, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

}  // namespace
}  // namespace ps::server
