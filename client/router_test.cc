#include "client/router.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "net/byte_buffer_test_util.h"

namespace ps::client {
namespace {

using TableRows = TrainingClient::TableRows;
using TableGradients = TrainingClient::TableGradients;

std::vector<uint64_t> Keys(uint64_t count) {
  std::vector<uint64_t> keys(count);
  for (uint64_t i = 0; i < count; ++i) keys[i] = i * 7919 + 3;
  return keys;
}

// The keys packed in a request's bytes.
std::vector<uint64_t> Unpack(const std::string& packed) {
  std::vector<uint64_t> keys(packed.size() / sizeof(uint64_t));
  std::memcpy(keys.data(), packed.data(), packed.size());
  return keys;
}

TEST(RouteTest, EveryKeyOnceToItsShardInChunksInOrder) {
  const SlotMap map = SlotMap::Initial(3);
  const std::vector<uint64_t> keys = Keys(100);
  const std::vector<RoutedChunk> chunks =
      Route(keys, AllPositions(keys.size()), map, /*max_keys=*/7);
  std::multiset<uint32_t> seen;
  std::map<int, uint32_t> last_in_shard;
  int last_shard = -1;
  for (const RoutedChunk& chunk : chunks) {
    EXPECT_LE(chunk.positions.size(), 7u);
    EXPECT_FALSE(chunk.positions.empty());
    EXPECT_GE(chunk.shard, last_shard);  // shard order
    last_shard = chunk.shard;
    for (uint32_t position : chunk.positions) {
      EXPECT_EQ(map.ShardForKey(keys[position]),
                static_cast<uint32_t>(chunk.shard));
      if (last_in_shard.count(chunk.shard) > 0) {
        EXPECT_GT(position, last_in_shard[chunk.shard]);
      }
      last_in_shard[chunk.shard] = position;
      seen.insert(position);
    }
  }
  EXPECT_EQ(seen.size(), keys.size());
  EXPECT_EQ(std::set<uint32_t>(seen.begin(), seen.end()).size(), keys.size());
}

TEST(RouteTest, OnlyTheGivenPositions) {
  const SlotMap map = SlotMap::Initial(2);
  const std::vector<uint64_t> keys = Keys(10);
  const std::vector<uint32_t> positions = {1, 4, 9};
  size_t routed = 0;
  for (const RoutedChunk& chunk : Route(keys, positions, map, 100)) {
    for (uint32_t position : chunk.positions) {
      EXPECT_TRUE(position == 1 || position == 4 || position == 9);
      ++routed;
    }
  }
  EXPECT_EQ(routed, 3u);
}

TEST(AddPullRequestsTest, RequestsCarryTheKeysOfTheirShard) {
  const SlotMap map = SlotMap::Initial(2).WithSlotsMoved(0, 100, 1);
  const std::vector<uint64_t> keys = Keys(50);
  std::vector<float> rows(keys.size() * 4);
  const TableRows pull = {"t", keys, 4, rows.data()};
  PullPlan plan;
  AddPullRequests(pull, AllPositions(keys.size()),
                  {/*max_keys_per_request=*/8, WireFormat::BF16}, map, &plan);
  ASSERT_EQ(plan.requests.size(), plan.shards.size());
  ASSERT_EQ(plan.requests.size(), plan.destinations.size());
  size_t keys_sent = 0;
  for (size_t r = 0; r < plan.requests.size(); ++r) {
    const PullRequest& request = plan.requests[r];
    EXPECT_EQ(request.table(), "t");
    EXPECT_EQ(request.slot_map_epoch(), map.epoch());
    EXPECT_EQ(request.format(), WireFormat::BF16);
    EXPECT_FALSE(request.with_state());
    const std::vector<uint64_t> sent = Unpack(request.keys());
    ASSERT_EQ(sent.size(), plan.destinations[r].positions.size());
    EXPECT_LE(sent.size(), 8u);
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(sent[i], keys[plan.destinations[r].positions[i]]);
      EXPECT_EQ(map.ShardForKey(sent[i]),
                static_cast<uint32_t>(plan.shards[r]));
    }
    EXPECT_EQ(plan.destinations[r].pull, &pull);
    keys_sent += sent.size();
  }
  EXPECT_EQ(keys_sent, keys.size());
}

TEST(AddPullRequestsTest, PullsWithStateAskFewerFp32Rows) {
  const SlotMap map = SlotMap::Initial(1);
  const std::vector<uint64_t> keys = Keys(40);
  std::vector<float> rows(keys.size() * 12);
  TrainingClient::PulledOptimizer optimizer;
  TableRows pull = {"t", keys, 4, rows.data()};
  pull.optimizer = &optimizer;
  pull.state_floats = 8;
  PullPlan plan;
  // 12 keys of 4 floats are as large as 4 keys of 4 + 8.
  AddPullRequests(pull, AllPositions(keys.size()), {12, WireFormat::FP16}, map,
                  &plan);
  ASSERT_EQ(plan.requests.size(), 10u);
  for (const PullRequest& request : plan.requests) {
    EXPECT_TRUE(request.with_state());
    EXPECT_EQ(request.format(), WireFormat::FP32);
    EXPECT_EQ(Unpack(request.keys()).size(), 4u);
  }
}

// `response` as gRPC may hand a reply over: in slices of 5 bytes, so that
// rows straddle them.
grpc::ByteBuffer OnTheWire(const PullResponse& response) {
  return net::InSlices(response.SerializeAsString(), 5);
}

TEST(DeliverPullResponseTest, RowsGoToTheirRowPositions) {
  const std::vector<uint64_t> keys = {10, 20, 30};
  const std::vector<uint32_t> row_positions = {2, 0, 1};
  std::vector<float> rows(6, -1.0f);
  TableRows pull = {"t", keys, 2, rows.data()};
  pull.row_positions = row_positions;
  PullResponse response;
  const std::vector<float> values = {1, 2, 5, 6};  // keys 10 and 30
  response.mutable_values()->assign(
      reinterpret_cast<const char*>(values.data()),
      values.size() * sizeof(float));
  ASSERT_OK(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0, 2}}));
  // Key 10 (position 0) to row 2, key 30 (position 2) to row 1.
  EXPECT_EQ(rows, (std::vector<float>{-1, -1, 5, 6, 1, 2}));
}

TEST(DeliverPullResponseTest, RefusesAReplyOfTheWrongSizeWritingNothing) {
  const std::vector<uint64_t> keys = {10, 20};
  std::vector<float> rows(4, -1.0f);
  const TableRows pull = {"t", keys, 2, rows.data()};
  PullResponse response;
  response.mutable_values()->resize(3 * sizeof(float));
  EXPECT_THAT(DeliverPullResponse(OnTheWire(response), 1, {&pull, {0, 1}}),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(rows, std::vector<float>(4, -1.0f));
}

// A pull of one key's row of dim 1 with 2 floats of optimizer state, into
// rows of -1.
class DeliverPullWithStateTest : public ::testing::Test {
 protected:
  DeliverPullWithStateTest() {
    pull.optimizer = &optimizer;
    pull.state_floats = 2;
  }
  const std::vector<uint64_t> keys = {10};
  std::vector<float> rows = std::vector<float>(3, -1.0f);
  TrainingClient::PulledOptimizer optimizer;
  TableRows pull = {"t", keys, 1, rows.data()};
};

TEST_F(DeliverPullWithStateTest, RefusesAPullWithStateAnsweredWithoutIt) {
  PullResponse response;
  response.mutable_values()->resize(3 * sizeof(float));
  response.set_state_floats(2);
  EXPECT_THAT(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0}}),
              StatusIs(absl::StatusCode::kInternal));  // no optimizer
  response.mutable_optimizer()->set_learning_rate(0.5f);
  response.set_learning_rate_multiplier(2.0f);
  response.set_state_floats(1);  // state of another size
  EXPECT_THAT(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0}}),
              StatusIs(absl::StatusCode::kInternal));
  response.set_state_floats(2);
  response.set_format(WireFormat::BF16);  // state only travels as FP32
  response.mutable_values()->resize(3 * WireValueBytes(WireFormat::BF16));
  EXPECT_THAT(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0}}),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(rows, std::vector<float>(3, -1.0f));
  EXPECT_EQ(optimizer.spec.learning_rate(), 0.0f) << "written by a refusal";
  response.set_format(WireFormat::FP32);
  response.mutable_values()->resize(3 * sizeof(float));
  ASSERT_OK(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0}}));
  EXPECT_EQ(optimizer.spec.learning_rate(), 0.5f);
  EXPECT_EQ(optimizer.learning_rate_multiplier, 2.0f);
}

TEST_F(DeliverPullWithStateTest, RefusesWhatIsNotAReplyWritingNothing) {
  PullResponse response;
  response.mutable_values()->resize(3 * sizeof(float), '\x01');
  response.set_state_floats(2);
  response.mutable_optimizer()->set_learning_rate(0.5f);
  const std::string bytes = response.SerializeAsString();
  // Cut in its last field, or garbage after a whole reply.
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() - 1), bytes + "\xff"}) {
    grpc::Slice slice(bad);
    const absl::Status status =
        DeliverPullResponse(grpc::ByteBuffer(&slice, 1), 3, {&pull, {0}});
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal));
    EXPECT_NE(status.message().find("shard 3"), std::string::npos) << status;
    EXPECT_NE(status.message().find("table t"), std::string::npos) << status;
  }
  EXPECT_EQ(rows, std::vector<float>(3, -1.0f));
  EXPECT_EQ(optimizer.spec.learning_rate(), 0.0f);
}

TEST(DeliverPullResponseTest, DecodesHalfPrecisionReplies) {
  const std::vector<uint64_t> keys = {10, 20};
  const std::vector<float> sent = {1.5f, -2.0f, 0.25f, 3.0f};  // exact
  for (WireFormat format : {WireFormat::BF16, WireFormat::FP16}) {
    std::vector<float> rows(4, -1.0f);
    const TableRows pull = {"t", keys, 2, rows.data()};
    PullResponse response;
    response.set_format(format);
    response.mutable_values()->resize(sent.size() * WireValueBytes(format));
    EncodeWireValues(format, sent, response.mutable_values()->data());
    ASSERT_OK(DeliverPullResponse(OnTheWire(response), 0, {&pull, {0, 1}}));
    EXPECT_EQ(rows, sent) << WireFormat_Name(format);
  }
}

TEST(PushSequencesTest, EachShardCountsOnItsOwn) {
  PushSequences sequences(4);
  EXPECT_EQ(sequences.Next(0), 1u);
  EXPECT_EQ(sequences.Next(0), 2u);
  EXPECT_EQ(sequences.Next(3), 1u);
  EXPECT_EQ(sequences.Next(0), 3u);
}

TEST(AddPushRequestsTest, GradientsTravelWithTheirKeys) {
  const SlotMap map = SlotMap::Initial(3);
  const std::vector<uint64_t> keys = Keys(30);
  std::vector<float> gradients(keys.size() * 2);
  for (size_t i = 0; i < gradients.size(); ++i) gradients[i] = i;
  TableGradients push = {"t", keys, gradients, 2};
  push.learning_rate_scale = 0.5f;
  PushSequences sequences(3);
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  ASSERT_OK(AddPushRequests(push, {/*worker=*/4, /*clock=*/9, 77},
                            {/*max_keys_per_request=*/4}, map, sequences,
                            &requests, &shards));
  ASSERT_EQ(requests.size(), shards.size());
  std::map<int, uint64_t> last_sequence;
  size_t keys_sent = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const PushRequest& request = requests[r];
    EXPECT_EQ(request.worker(), 4u);
    EXPECT_EQ(request.clock(), 9);
    EXPECT_EQ(request.incarnation(), 77u);
    EXPECT_EQ(request.learning_rate_scale(), 0.5f);
    EXPECT_EQ(request.sequence(), ++last_sequence[shards[r]]);
    const std::vector<uint64_t> sent = Unpack(request.keys());
    ASSERT_EQ(request.gradients().size(), sent.size() * 2 * sizeof(float));
    std::vector<float> sent_gradients(sent.size() * 2);
    std::memcpy(sent_gradients.data(), request.gradients().data(),
                request.gradients().size());
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(map.ShardForKey(sent[i]), static_cast<uint32_t>(shards[r]));
      const size_t position = (sent[i] - 3) / 7919;
      EXPECT_EQ(sent_gradients[i * 2], gradients[position * 2]);
      EXPECT_EQ(sent_gradients[i * 2 + 1], gradients[position * 2 + 1]);
    }
    keys_sent += sent.size();
  }
  EXPECT_EQ(keys_sent, keys.size());
}

TEST(AddPushRequestsTest, SmallFp16GradientsAreScaledToKeepTheirBits) {
  const SlotMap map = SlotMap::Initial(1);
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> gradients = {1e-6f, -2e-6f, 3e-7f, 0.0f};
  const TableGradients push = {"t", keys, gradients, 2};
  PushSequences sequences(1);
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  ASSERT_OK(AddPushRequests(push, {}, {16, WireFormat::FP16}, map, sequences,
                            &requests, &shards));
  ASSERT_EQ(requests.size(), 1u);
  const PushRequest& request = requests[0];
  EXPECT_EQ(request.format(), WireFormat::FP16);
  ASSERT_GT(request.gradient_scale(), 1.0f);
  std::vector<float> decoded(4);
  DecodeWireValues(WireFormat::FP16, request.gradients().data(),
                   absl::MakeSpan(decoded), 1.0f / request.gradient_scale());
  for (size_t i = 0; i < decoded.size(); ++i) {
    EXPECT_NEAR(decoded[i], gradients[i], std::fabs(gradients[i]) * 1e-3f);
  }
  // The sequence advanced for the one shard.
  EXPECT_EQ(request.sequence(), 1u);
}

TEST(AddPushRequestsTest, RefusesGradientsOfTheWrongSize) {
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> gradients = {1, 2, 3};
  const TableGradients push = {"t", keys, gradients, 2};
  PushSequences sequences(1);
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  EXPECT_THAT(AddPushRequests(push, {}, {}, SlotMap::Initial(1), sequences,
                              &requests, &shards),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(requests.empty());
  EXPECT_EQ(sequences.Next(0), 1u);  // no sequence number spent
}

TEST(ReroutePushTest, KeysAndGradientsMoveTogetherNamingTheRefusedRequest) {
  const SlotMap before = SlotMap::Initial(2);
  const std::vector<uint64_t> keys = Keys(40);
  std::vector<float> gradients(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) gradients[i] = keys[i] * 0.5f;
  const TableGradients push = {"t", keys, gradients, 1};
  PushSequences sequences(2);
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  ASSERT_OK(AddPushRequests(push, {1, 2, 3}, {1000}, before, sequences,
                            &requests, &shards));
  ASSERT_EQ(requests.size(), 2u);
  ASSERT_EQ(shards[0], 0);
  // Half of shard 0's slots go to shard 1.
  const SlotMap after = before.WithSlotsMovedFrom(0, kNumSlots / 2, 0, 1);
  std::vector<PushRequest> rerouted;
  std::vector<int> rerouted_shards;
  ReroutePush(requests[0], 0, after, sequences, &rerouted, &rerouted_shards);
  ASSERT_EQ(rerouted.size(), 2u);
  size_t keys_moved = 0;
  for (size_t r = 0; r < rerouted.size(); ++r) {
    const PushRequest& part = rerouted[r];
    EXPECT_EQ(part.slot_map_epoch(), after.epoch());
    EXPECT_EQ(part.worker(), 1u);
    EXPECT_EQ(part.incarnation(), 3u);
    // Shard 0 gave sequence 1, shard 1 sequence 1: each part takes the next.
    EXPECT_EQ(part.sequence(), 2u);
    ASSERT_EQ(part.moved_from_size(), 1);
    EXPECT_EQ(part.moved_from(0).shard(), 0u);
    EXPECT_EQ(part.moved_from(0).sequence(), requests[0].sequence());
    const std::vector<uint64_t> sent = Unpack(part.keys());
    std::vector<float> sent_gradients(sent.size());
    ASSERT_EQ(part.gradients().size(), sent.size() * sizeof(float));
    std::memcpy(sent_gradients.data(), part.gradients().data(),
                part.gradients().size());
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(after.ShardForKey(sent[i]),
                static_cast<uint32_t>(rerouted_shards[r]));
      EXPECT_EQ(sent_gradients[i], sent[i] * 0.5f);
    }
    keys_moved += sent.size();
  }
  EXPECT_EQ(keys_moved, Unpack(requests[0].keys()).size());
}

TEST(ReroutePushTest, ASecondMoveKeepsTheFirstAndEveryOtherField) {
  const SlotMap map = SlotMap::Initial(3);
  const std::vector<uint64_t> keys = Keys(60);
  std::vector<float> gradients(keys.size() * 2, 1e-5f);
  TableGradients push = {"t", keys, gradients, 2};
  push.learning_rate_scale = 0.25f;
  PushSequences sequences(3);
  std::vector<PushRequest> requests;
  std::vector<int> shards;
  ASSERT_OK(AddPushRequests(push, {/*worker=*/5, /*clock=*/11, 99},
                            {1000, WireFormat::FP16}, map, sequences, &requests,
                            &shards));
  ASSERT_EQ(shards[0], 0);
  const PushRequest& original = requests[0];
  // Half of shard 0's slots go to shard 1, then on to shard 2.
  const uint32_t last_moved = kNumSlots / 6;
  const SlotMap once = map.WithSlotsMovedFrom(0, last_moved, 0, 1);
  std::vector<PushRequest> first;
  std::vector<int> first_shards;
  ReroutePush(original, 0, once, sequences, &first, &first_shards);
  const auto moved = std::find(first_shards.begin(), first_shards.end(), 1);
  ASSERT_NE(moved, first_shards.end()) << "no key in the slots moved";
  const PushRequest& once_moved = first[moved - first_shards.begin()];
  const SlotMap twice = once.WithSlotsMovedFrom(0, last_moved, 1, 2);
  std::vector<PushRequest> second;
  std::vector<int> second_shards;
  ReroutePush(once_moved, 1, twice, sequences, &second, &second_shards);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second_shards[0], 2);
  const PushRequest& part = second[0];
  ASSERT_EQ(part.moved_from_size(), 2);  // oldest first
  EXPECT_EQ(part.moved_from(0).shard(), 0u);
  EXPECT_EQ(part.moved_from(0).sequence(), original.sequence());
  EXPECT_EQ(part.moved_from(1).shard(), 1u);
  EXPECT_EQ(part.moved_from(1).sequence(), once_moved.sequence());
  EXPECT_EQ(part.slot_map_epoch(), twice.epoch());
  EXPECT_EQ(part.keys(), once_moved.keys());
  EXPECT_EQ(part.gradients(), once_moved.gradients());
  EXPECT_EQ(part.table(), "t");
  EXPECT_EQ(part.worker(), 5u);
  EXPECT_EQ(part.clock(), 11);
  EXPECT_EQ(part.incarnation(), 99u);
  EXPECT_EQ(part.learning_rate_scale(), 0.25f);
  EXPECT_EQ(part.format(), WireFormat::FP16);
  EXPECT_EQ(part.gradient_scale(), original.gradient_scale());
  EXPECT_GT(part.gradient_scale(), 1.0f);
}

}  // namespace
}  // namespace ps::client
