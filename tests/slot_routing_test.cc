// The slot map in a running cluster: two shards served in this process,
// their maps changed over the admin API, and a real PsClient that routed by
// an older map. A key is applied exactly once, on the shard the newest map
// names; a shard behind the client's map makes it wait; a retry of a push
// applied before its slot moved is answered as a duplicate; checkpoints
// record the map and restores keep it; ps_admin slots prints it.

#include "absl/strings/str_split.h"
#include "tests/ps_admin_run.h"
#include "tests/slot_routing_fixture.h"

namespace ps {
namespace {

TEST_F(SlotRoutingTest, APushRoutedByAnOldMapIsRedirectedAndAppliedOnce) {
  std::unique_ptr<client::PsClient> client = ConnectAndDeclare();
  ASSERT_NE(client, nullptr);
  // Half of shard 0's slots go to shard 1, and some of shard 1's to 0.
  const SlotMap moved = SlotMap::Initial(2)
                            .WithSlotsMoved(0, 8191, 1)
                            .WithSlotsMoved(16000, 16383, 0);
  SetMapOnEveryShard(moved);
  const std::vector<uint64_t> keys = Keys(2000);
  ASSERT_OK(PushOnce(*client, keys));
  ExpectAppliedOnceWhere(moved, keys);
  // Pulls follow the same map.
  absl::StatusOr<std::vector<float>> rows = PullFirstColumn(*client, keys);
  ASSERT_OK(rows);
  EXPECT_EQ(*rows, std::vector<float>(keys.size(), 1.0f));
}

// A push refused as moved is sent where its keys are with the origin it
// had on the shard that refused it, and the shard there answers it from
// that shard's ledger, which a move brought: a push applied on the first
// shard (its answer lost) is not applied again.
TEST_F(SlotRoutingTest, APushRedirectedCarriesItsFirstOriginToTheLedger) {
  std::unique_ptr<client::PsClient> client = ConnectAndDeclare();
  ASSERT_NE(client, nullptr);
  // Shard 1 holds shard 0's ledger, which says shard 0 applied this
  // client's first push to it (incarnation 7, sequence 1).
  embedding::PushLedger source;
  embedding::PushOrigin first{/*worker=*/0, /*incarnation=*/7, /*sequence=*/1};
  ASSERT_OK(source.Begin(first).status());
  source.Finish(first, /*applied=*/true, /*rows_updated=*/123);
  WriteSlotRowsRequest ledger;
  MovedLedger* moved = ledger.add_moved_ledgers();
  moved->set_shard(0);
  moved->set_ledger(source.Serialize());
  WriteSlotRowsResponse written;
  grpc::ClientContext context;
  ASSERT_TRUE(admins_[1]->WriteSlotRows(&context, ledger, &written).ok());

  // Every slot is shard 1's; the client still routes by the first map.
  SetMapOnEveryShard(SlotMap::Initial(2).WithSlotsMoved(0, kNumSlots - 1, 1));
  const std::vector<uint64_t> keys = Keys(2000);
  ASSERT_OK(PushOnce(*client, keys));
  // The keys the client sent to shard 0 were answered from its ledger on
  // shard 1; the others, sent to shard 1, were applied.
  const SlotMap first_map = SlotMap::Initial(2);
  int answered = 0;
  for (uint64_t key : keys) {
    bool stored = false;
    const std::vector<float> row = Row(1, key, &stored);
    if (first_map.ShardForKey(key) == 0) {
      EXPECT_FALSE(stored) << key;
      ++answered;
    } else {
      EXPECT_EQ(row, std::vector<float>(kDim, 1.0f)) << key;
    }
  }
  EXPECT_GT(answered, 500);
}

TEST_F(SlotRoutingTest, APullRoutedByAnOldMapIsRedirected) {
  std::unique_ptr<client::PsClient> client = ConnectAndDeclare();
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> keys = Keys(500);
  ASSERT_OK(PushOnce(*client, keys));  // by the initial map
  // A second client routes by the initial map; the map changes under it
  // while no row moves, so the rows it reads where the map sends it are
  // initial values (zeros) for the slots that moved, and 1 for the others.
  std::unique_ptr<client::PsClient> reader = Connect();
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(0, 4095, 0);
  SetMapOnEveryShard(moved);
  absl::StatusOr<std::vector<float>> rows = PullFirstColumn(*reader, keys);
  ASSERT_OK(rows);
  int moved_keys = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool slot_moved =
        ShardForKey(keys[i], 2) != moved.ShardForKey(keys[i]);
    moved_keys += slot_moved;
    EXPECT_EQ((*rows)[i], slot_moved ? 0.0f : 1.0f) << keys[i];
  }
  EXPECT_GT(moved_keys, 0);
}

TEST_F(SlotRoutingTest, AShardBehindTheClientsMapMakesItRetryUntilItCatchesUp) {
  std::unique_ptr<client::PsClient> client = ConnectAndDeclare();
  ASSERT_NE(client, nullptr);
  // Shard 0 gives half its slots to shard 1, which does not know yet: the
  // client learns epoch 2 from shard 0 and must wait for shard 1.
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(0, 8191, 1);
  ASSERT_TRUE(SetMap(0, 1, moved).ok());
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(500));
    EXPECT_TRUE(SetMap(1, 1, moved).ok());
  });
  const std::vector<uint64_t> keys = Keys(1000);
  const absl::Status pushed = PushOnce(*client, keys);
  late.join();
  ASSERT_OK(pushed);
  ExpectAppliedOnceWhere(moved, keys);
  bool retried_unavailable = false;
  for (const auto& [code, count] : client->retries())
    retried_unavailable |= code == "UNAVAILABLE" && count > 0;
  EXPECT_TRUE(retried_unavailable);
}

// The raw data plane, without PsClient's rerouting.
TEST_F(SlotRoutingTest, AShardRefusesKeysItDoesNotOwnButAnswersRetries) {
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(servers_[0], grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(DeclareOnShard(servers_[0], Table()).ok());
  uint64_t key = 0;
  while (ShardForKey(key, 2) != 0) ++key;
  PushRequest push;
  push.set_table(kTable);
  push.set_keys(Pack<uint64_t>(std::vector<uint64_t>{key}));
  const std::vector<float> gradient(kDim, -1.0f);
  push.set_gradients(std::string(reinterpret_cast<const char*>(gradient.data()),
                                 kDim * sizeof(float)));
  push.set_worker(3);
  push.set_incarnation(11);
  push.set_sequence(1);
  push.set_slot_map_epoch(1);
  {
    PushResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Push(&context, push, &response).ok());
    EXPECT_FALSE(response.duplicate());
  }
  // The key's slot moves to shard 1.
  const uint32_t slot = SlotForKey(key);
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(slot, slot, 1);
  ASSERT_TRUE(SetMap(0, 1, moved).ok());
  {
    // The retry of the push shard 0 applied (its answer lost) is answered.
    PushResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Push(&context, push, &response).ok());
    EXPECT_TRUE(response.duplicate());
    EXPECT_EQ(response.rows_updated(), 1u);
  }
  {
    // A new push of that key is refused, naming the epoch.
    push.set_sequence(2);
    PushResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Push(&context, push, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    const auto& trailers = context.GetServerTrailingMetadata();
    ASSERT_EQ(trailers.count(kMovedMetadata), 1u);
    EXPECT_EQ(std::string(trailers.find(kMovedMetadata)->second.data(),
                          trailers.find(kMovedMetadata)->second.size()),
              "2");
  }
  {
    PullRequest pull;
    pull.set_table(kTable);
    pull.set_keys(push.keys());
    PullResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Pull(&context, pull, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(context.GetServerTrailingMetadata().count(kMovedMetadata), 1u);
  }
  {
    // A client ahead of the shard is asked to retry, transiently.
    PullRequest pull;
    pull.set_table(kTable);
    pull.set_keys(Pack<uint64_t>(std::vector<uint64_t>{}));
    pull.set_slot_map_epoch(3);
    PullResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Pull(&context, pull, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(context.GetServerTrailingMetadata().count(kTransientMetadata),
              1u);
  }
  {
    GetSlotMapResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub->GetSlotMap(&context, GetSlotMapRequest(), &response).ok());
    absl::StatusOr<SlotMap> map = SlotMap::FromSpec(response.slot_map());
    ASSERT_OK(map);
    EXPECT_TRUE(*map == moved);
  }
}

TEST_F(SlotRoutingTest, SetSlotMapIsACompareAndSwapAndStatsShowIt) {
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(0, 99, 1);
  EXPECT_EQ(SetMap(0, 2, moved).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(SetMap(0, 1, moved).ok());
  EXPECT_EQ(SetMap(0, 1, moved.WithSlotsMoved(5, 5, 0)).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // No shard 2: a job's shard count changes only under etcd.
  EXPECT_EQ(
      SetMap(0, 2, moved.WithNumShards(3).WithSlotsMoved(5, 5, 2)).error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);
  // A map that gives slots to a shard beyond its own count is none.
  SlotMapSpec beyond = moved.WithSlotsMoved(5, 5, 0).ToSpec();
  beyond.mutable_ranges(0)->set_shard(2);
  SetSlotMapRequest beyond_request;
  beyond_request.set_expected_slot_map_epoch(2);
  *beyond_request.mutable_slot_map() = beyond;
  SetSlotMapResponse beyond_response;
  grpc::ClientContext beyond_context;
  EXPECT_EQ(admins_[0]
                ->SetSlotMap(&beyond_context, beyond_request, &beyond_response)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  SetSlotMapRequest gap;
  gap.set_expected_slot_map_epoch(2);
  gap.mutable_slot_map()->set_epoch(3);
  SetSlotMapResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(admins_[0]->SetSlotMap(&context, gap, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ShardStatsResponse stats;
  grpc::ClientContext stats_context;
  ASSERT_TRUE(
      admins_[0]->ShardStats(&stats_context, ShardStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.slot_map_epoch(), 2u);
  EXPECT_EQ(stats.slots_owned(), 8192u - 50u);  // its even slots 0-98 left
}

TEST_F(SlotRoutingTest, CheckpointsRecordTheMapAndRestoresKeepIt) {
  std::unique_ptr<client::PsClient> client = ConnectAndDeclare();
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> keys = Keys(1000);
  ASSERT_OK(PushOnce(*client, keys));
  // Shard 1's odd slots 101-8999 go to shard 0, which starts them from
  // zero; shard 1 keeps its stale copies (the map moves no rows). Two more
  // pushes: 2 for the moved keys, 3 for the others.
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(100, 9000, 0);
  SetMapOnEveryShard(moved);
  ASSERT_OK(PushOnce(*client, keys));
  ASSERT_OK(PushOnce(*client, keys));
  client.reset();
  auto value_of = [&](uint64_t key) {
    return ShardForKey(key, 2) != moved.ShardForKey(key) ? 2.0f : 3.0f;
  };
  int moved_keys = 0;
  for (uint64_t key : keys) moved_keys += value_of(key) == 2.0f;
  ASSERT_GT(moved_keys, 0);
  CheckpointOptions checkpoint;
  checkpoint.servers = servers_;
  checkpoint.dir = FreshTestDir("slot_routing_checkpoint") + "/ckpt-1";
  absl::StatusOr<CheckpointManifest> manifest = TakeCheckpoint(checkpoint);
  ASSERT_OK(manifest);
  EXPECT_TRUE(RecordedSlotMap(*manifest) == moved);

  // Onto as many shards: the same map, every row where it was, and not the
  // stale copy shard 1's part still holds.
  StartShards("slot_routing_restored", 2, checkpoint.dir);
  ExpectRowsWhere(moved, keys, value_of);
  GetSlotMapResponse map;
  grpc::ClientContext context;
  ASSERT_TRUE(admins_[1]->GetSlotMap(&context, GetSlotMapRequest(), &map).ok());
  EXPECT_EQ(map.slot_map().epoch(), moved.epoch());

  // Onto three: the initial map of three, the same rows.
  StartShards("slot_routing_three", 3, checkpoint.dir);
  ExpectRowsWhere(SlotMap::Initial(3), keys, value_of);
}

TEST_F(SlotRoutingTest, PsAdminPrintsTheMap) {
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMoved(0, 99, 1);
  SetMapOnEveryShard(moved);
  const std::string log = FreshTestDir("slot_routing_admin") + "/log";
  const testing::AdminRun json = testing::RunPsAdmin(
      testing::AdminCluster::Servers(servers_), {"--json", "slots"}, log);
  ASSERT_EQ(json.exit_code, 0) << json.log;
  const nlohmann::json printed = nlohmann::json::parse(json.out);
  EXPECT_EQ(printed["epoch"], 2);
  ASSERT_EQ(printed["shards"].size(), 2u);
  EXPECT_EQ(printed["shards"][1]["slots"], 8192 + 50);
  EXPECT_EQ(printed["shards"][1]["ranges"][0], nlohmann::json({0, 99}));
  EXPECT_EQ(printed["shards"][1]["ranges"][1], nlohmann::json({101, 101}));
  EXPECT_EQ(printed["shards"][0]["slots"], 8192 - 50);
  EXPECT_EQ(printed["shards"][0]["ranges"][0], nlohmann::json({100, 100}));

  const testing::AdminRun text = testing::RunPsAdmin(
      testing::AdminCluster::Servers(servers_), {"slots"}, log);
  ASSERT_EQ(text.exit_code, 0) << text.log;
  const std::vector<std::string> lines = absl::StrSplit(text.out, '\n');
  ASSERT_GE(lines.size(), 2u) << text.out;
  EXPECT_EQ(lines[0], "slot map epoch 2, 16384 slots");
  EXPECT_EQ(lines[1].substr(0, lines[1].find(':', 20)),
            absl::StrCat("shard 0 ", servers_[0]));
}

}  // namespace
}  // namespace ps
