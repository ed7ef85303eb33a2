// The raw Pull handler against a shard on loopback: its reply is a
// PullResponse in protobuf's canonical wire format (what protobuf itself
// would write for the same message), in every wire format and for varints
// of every length, and bad requests get clear errors.

#include "server/data_service.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/wire_format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard_server.h"

namespace ps::server {
namespace {

constexpr int kDim = 3;

class RawPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.store.data_dir = FreshTestDir("raw_pull");
    options.max_message_bytes = 64 << 10;
    auto server = ShardServer::Start(options);
    ASSERT_OK(server);
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = ParameterServer::NewStub(channel_);
    DeclareTableRequest declare;
    declare.mutable_table()->set_name("t");
    declare.mutable_table()->set_dim(kDim);
    declare.mutable_table()->mutable_initializer()->set_kind(
        InitializerSpec::ZEROS);
    declare.mutable_table()->mutable_optimizer()->set_kind(OptimizerSpec::SGD);
    declare.mutable_table()->mutable_optimizer()->set_learning_rate(1.0f);
    DeclareTableResponse declared;
    grpc::ClientContext declare_context;
    ASSERT_TRUE(stub_->DeclareTable(&declare_context, declare, &declared).ok());
    // Rows of 130 floats: dim's varint takes 2 bytes, 40 rows' length 3.
    declare.mutable_table()->set_name("wide");
    declare.mutable_table()->set_dim(130);
    declare.mutable_table()->mutable_initializer()->set_kind(
        InitializerSpec::UNIFORM);
    declare.mutable_table()->mutable_initializer()->set_scale(0.5f);
    grpc::ClientContext wide_context;
    ASSERT_TRUE(stub_->DeclareTable(&wide_context, declare, &declared).ok());
    // Row k holds -gradient: k + 0.5, k + 1.5, k + 2.5.
    std::vector<uint64_t> keys = {1, 2, 40};
    std::vector<float> gradients;
    for (uint64_t key : keys) {
      for (int d = 0; d < kDim; ++d) gradients.push_back(-Expected(key, d));
    }
    PushRequest push;
    push.set_table("t");
    push.set_keys(Pack(keys));
    push.set_gradients(
        std::string(reinterpret_cast<const char*>(gradients.data()),
                    gradients.size() * sizeof(float)));
    PushResponse pushed;
    grpc::ClientContext push_context;
    ASSERT_TRUE(stub_->Push(&push_context, push, &pushed).ok());
  }

  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_OK(server_->Shutdown(absl::ZeroDuration()));
    }
  }

  static float Expected(uint64_t key, int d) {
    return static_cast<float>(key) + 0.5f + static_cast<float>(d);
  }
  static std::string Pack(const std::vector<uint64_t>& keys) {
    return std::string(reinterpret_cast<const char*>(keys.data()),
                       keys.size() * sizeof(uint64_t));
  }

  // The reply's bytes as they came, through a stub that parses nothing.
  grpc::Status RawPull(const std::string& request_bytes, std::string* reply) {
    return RawCall("/ps.ParameterServer/Pull", request_bytes, reply);
  }
  grpc::Status RawCall(const std::string& method,
                       const std::string& request_bytes, std::string* reply) {
    grpc::GenericStub generic(channel_);
    grpc::Slice slice(request_bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    reply->clear();
    std::vector<grpc::Slice> slices;
    if (status.ok() && response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return status;
  }

  std::unique_ptr<ShardServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(RawPullTest, TheReplyIsAPullResponseInCanonicalForm) {
  const std::vector<uint64_t> keys = {40, 1, 7, 2, 40};  // 7 was never pushed
  for (WireFormat format :
       {WireFormat::FP32, WireFormat::FP16, WireFormat::BF16}) {
    PullRequest request;
    request.set_table("t");
    request.set_keys(Pack(keys));
    request.set_format(format);
    std::string reply;
    ASSERT_TRUE(RawPull(request.SerializeAsString(), &reply).ok());
    PullResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(reply)) << format;
    // What protobuf writes for the same message, byte for byte.
    EXPECT_EQ(parsed.SerializeAsString(), reply) << format;
    EXPECT_EQ(parsed.dim(), static_cast<uint32_t>(kDim));
    EXPECT_EQ(parsed.format(), format);
    ASSERT_EQ(parsed.values().size(),
              keys.size() * kDim * WireValueBytes(format));
    std::vector<float> rows(keys.size() * kDim);
    DecodeWireValues(format, parsed.values().data(), absl::MakeSpan(rows));
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int d = 0; d < kDim; ++d) {
        const float expected = keys[i] == 7 ? 0.0f : Expected(keys[i], d);
        // bf16 keeps 8 bits of mantissa: 40.5 -> 40.5, 42.5 -> 42.5.
        EXPECT_NEAR(rows[i * kDim + d], expected, 0.25f)
            << "format " << format << " key " << keys[i] << " float " << d;
      }
    }
    if (format == WireFormat::FP32) {
      EXPECT_EQ(rows[0], 40.5f);  // exactly
      // The generated stub reads the same reply.
      PullResponse through_stub;
      grpc::ClientContext context;
      ASSERT_TRUE(stub_->Pull(&context, request, &through_stub).ok());
      EXPECT_EQ(through_stub.SerializeAsString(), reply);
    }
  }
}

TEST(RawPullReplyTest, WritesEveryFieldAPullResponseHas) {
  // DataService writes dim, values and format by hand: a new field must be
  // written there too (fields 4-6 come only with optimizer state, which are
  // serialized by protobuf ahead of the rows written by hand).
  EXPECT_EQ(PullResponse::descriptor()->field_count(), 6)
      << "PullResponse gained a field: write it in PullReplySlice()";
}

TEST_F(RawPullTest, APullWithStateBringsEachRowsOptimizerState) {
  DeclareTableRequest declare;
  declare.mutable_table()->set_name("adagrad");
  declare.mutable_table()->set_dim(2);
  declare.mutable_table()->mutable_optimizer()->set_kind(
      OptimizerSpec::ADAGRAD);
  declare.mutable_table()->mutable_optimizer()->set_initial_accumulator(0.5f);
  DeclareTableResponse declared;
  grpc::ClientContext declare_context;
  ASSERT_TRUE(stub_->DeclareTable(&declare_context, declare, &declared).ok());
  // Key 5 is pushed twice: its accumulators are 0.5 + 1 + 1 and 0.5 + 4 + 4.
  for (int push_index = 0; push_index < 2; ++push_index) {
    const float gradients[2] = {1.0f, -2.0f};
    PushRequest push;
    push.set_table("adagrad");
    push.set_keys(Pack({5}));
    push.set_gradients(std::string(reinterpret_cast<const char*>(gradients),
                                   sizeof(gradients)));
    PushResponse pushed;
    grpc::ClientContext push_context;
    ASSERT_TRUE(stub_->Push(&push_context, push, &pushed).ok());
  }
  PullRequest request;
  request.set_table("adagrad");
  request.set_keys(Pack({9, 5}));  // 9 was never pushed
  request.set_with_state(true);
  std::string reply;
  ASSERT_TRUE(RawPull(request.SerializeAsString(), &reply).ok());
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(reply));
  EXPECT_EQ(parsed.dim(), 2u);
  EXPECT_EQ(parsed.state_floats(), 2u);
  EXPECT_EQ(parsed.optimizer().kind(), OptimizerSpec::ADAGRAD);
  EXPECT_EQ(parsed.optimizer().learning_rate(), 0.05f);  // the default
  EXPECT_EQ(parsed.optimizer().initial_accumulator(), 0.5f);
  EXPECT_EQ(parsed.learning_rate_multiplier(), 1.0f);
  ASSERT_EQ(parsed.values().size(), 2 * 4 * sizeof(float));
  float rows[8];
  std::memcpy(rows, parsed.values().data(), sizeof(rows));
  EXPECT_EQ(rows[2], 0.5f);  // key 9: fresh state
  EXPECT_EQ(rows[3], 0.5f);
  EXPECT_EQ(rows[6], 2.5f);  // key 5
  EXPECT_EQ(rows[7], 8.5f);
  // The weights are what a plain pull of the same keys answers.
  PullRequest plain = request;
  plain.set_with_state(false);
  PullResponse weights;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Pull(&context, plain, &weights).ok());
  ASSERT_EQ(weights.values().size(), 4 * sizeof(float));
  float pulled[4];
  std::memcpy(pulled, weights.values().data(), sizeof(pulled));
  EXPECT_EQ(rows[0], pulled[0]);
  EXPECT_EQ(rows[1], pulled[1]);
  EXPECT_EQ(rows[4], pulled[2]);
  EXPECT_EQ(rows[5], pulled[3]);
  EXPECT_NE(rows[4], 0.0f);
  // The generated stub's parser reads the reply (two slices, the rows
  // last) as the test's did.
  PullResponse through_stub;
  grpc::ClientContext stub_context;
  ASSERT_TRUE(stub_->Pull(&stub_context, request, &through_stub).ok());
  EXPECT_EQ(through_stub.SerializeAsString(), parsed.SerializeAsString());
  // No keys: the fields, no values.
  PullRequest none = request;
  none.clear_keys();
  ASSERT_TRUE(RawPull(none.SerializeAsString(), &reply).ok());
  PullResponse empty;
  ASSERT_TRUE(empty.ParseFromString(reply));
  EXPECT_EQ(empty.state_floats(), 2u);
  EXPECT_EQ(empty.optimizer().kind(), OptimizerSpec::ADAGRAD);
  EXPECT_TRUE(empty.values().empty());
  // State travels in FP32 only.
  request.set_format(WireFormat::FP16);
  EXPECT_EQ(RawPull(request.SerializeAsString(), &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RawPullTest, LongVarintsAndTinyRepliesAreCanonicalToo) {
  for (auto [table, count] :
       {std::pair<const char*, uint64_t>{"wide", 40}, {"wide", 1}, {"t", 1}}) {
    for (WireFormat format : {WireFormat::FP32, WireFormat::FP16}) {
      std::vector<uint64_t> keys;
      for (uint64_t key = 0; key < count; ++key) keys.push_back(key * 3 + 1);
      PullRequest request;
      request.set_table(table);
      request.set_keys(Pack(keys));
      request.set_format(format);
      std::string reply;
      ASSERT_TRUE(RawPull(request.SerializeAsString(), &reply).ok());
      PullResponse parsed;
      ASSERT_TRUE(parsed.ParseFromString(reply)) << table << " " << count;
      EXPECT_EQ(parsed.SerializeAsString(), reply) << table << " " << count;
      // The same rows through the generated stub.
      PullResponse through_stub;
      grpc::ClientContext context;
      ASSERT_TRUE(stub_->Pull(&context, request, &through_stub).ok());
      EXPECT_EQ(through_stub.values(), parsed.values());
      const uint32_t dim = std::string(table) == "wide" ? 130 : kDim;
      EXPECT_EQ(parsed.values().size(), count * dim * WireValueBytes(format));
    }
  }
}

TEST_F(RawPullTest, AReplyOverTheMessageLimitIsRefused) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 200; ++key) keys.push_back(key);  // 104000 B
  PullRequest request;
  request.set_table("wide");
  request.set_keys(Pack(keys));
  std::string reply;
  grpc::Status status = RawPull(request.SerializeAsString(), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("-byte reply"), std::string::npos)
      << status.error_message();
  // With optimizer state too, saying so.
  request.set_with_state(true);
  status = RawPull(request.SerializeAsString(), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("optimizer state"), std::string::npos)
      << status.error_message();
}

TEST_F(RawPullTest, NoKeysGetADimAndNoValues) {
  PullRequest request;
  request.set_table("t");
  std::string reply;
  ASSERT_TRUE(RawPull(request.SerializeAsString(), &reply).ok());
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(reply));
  EXPECT_EQ(parsed.SerializeAsString(), reply);
  EXPECT_EQ(parsed.dim(), static_cast<uint32_t>(kDim));
  EXPECT_TRUE(parsed.values().empty());
}

TEST_F(RawPullTest, APushIsReadRawAndAnsweredAsAPushResponse) {
  std::string reply;
  grpc::Status garbage = RawCall("/ps.ParameterServer/Push",
                                 std::string("\xff\xff\xff", 3), &reply);
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(garbage.error_message().find("not a ps.PushRequest"),
            std::string::npos)
      << garbage.error_message();

  // Keys 7 and 8, twice each, the second push's keys and gradients sent
  // before its other fields: the rows take both pushes.
  PushRequest push;
  push.set_table("t");
  push.set_keys(Pack({7, 8}));
  const std::vector<float> gradients(2 * kDim, -1.0f);
  push.set_gradients(
      std::string(reinterpret_cast<const char*>(gradients.data()),
                  gradients.size() * sizeof(float)));
  ASSERT_TRUE(
      RawCall("/ps.ParameterServer/Push", push.SerializeAsString(), &reply)
          .ok());
  PushResponse answer;
  ASSERT_TRUE(answer.ParseFromString(reply));
  EXPECT_EQ(answer.rows_updated(), 2u);
  PushRequest bulk_first;
  bulk_first.set_keys(push.keys());
  bulk_first.set_gradients(push.gradients());
  PushRequest table_last;
  table_last.set_table("t");
  ASSERT_TRUE(
      RawCall("/ps.ParameterServer/Push",
              bulk_first.SerializeAsString() + table_last.SerializeAsString(),
              &reply)
          .ok());
  PullRequest pull;
  pull.set_table("t");
  pull.set_keys(Pack({7, 8}));
  ASSERT_TRUE(RawPull(pull.SerializeAsString(), &reply).ok());
  PullResponse pulled;
  ASSERT_TRUE(pulled.ParseFromString(reply));
  const std::vector<float> twice(2 * kDim, 2.0f);  // SGD, rate 1
  ASSERT_EQ(pulled.values().size(), twice.size() * sizeof(float));
  EXPECT_EQ(
      std::memcmp(pulled.values().data(), twice.data(), pulled.values().size()),
      0);
}

TEST_F(RawPullTest, BadRequestsGetClearErrors) {
  std::string reply;
  grpc::Status garbage = RawPull(std::string("\xff\xff\xff", 3), &reply);
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(garbage.error_message().find("not a ps.PullRequest"),
            std::string::npos)
      << garbage.error_message();

  PullRequest unknown_table;
  unknown_table.set_table("nope");
  unknown_table.set_keys(Pack({1}));
  EXPECT_EQ(RawPull(unknown_table.SerializeAsString(), &reply).error_code(),
            grpc::StatusCode::NOT_FOUND);

  PullRequest ragged;
  ragged.set_table("t");
  ragged.set_keys("12345");
  grpc::Status ragged_status = RawPull(ragged.SerializeAsString(), &reply);
  EXPECT_EQ(ragged_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ragged_status.error_message().find("8-byte"), std::string::npos)
      << ragged_status.error_message();

  PullRequest bad_format;
  bad_format.set_table("t");
  bad_format.set_keys(Pack({1}));
  bad_format.set_format(static_cast<WireFormat>(9));
  EXPECT_EQ(RawPull(bad_format.SerializeAsString(), &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace ps::server
