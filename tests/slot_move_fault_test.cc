// A slot move killed half-way, against real ps_server processes: kill -9
// of the target, then of the source, while ps_admin move-slots copies. The
// map never names a shard that lacks an update: the source keeps the slots
// and every acknowledged push, and the move, run again, finishes with every
// row on its new owner only, durable there (the target killed right after
// has them all).

#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

constexpr int kDim = 8;
constexpr char kTable[] = "t";

class SlotMoveFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (int i = 0; i < 2; ++i) {
      dirs_.push_back(FreshTestDir(absl::StrCat(name, "_shard", i)));
      ASSERT_NO_FATAL_FAILURE(Start(i));
    }
    for (uint64_t i = 0; i < 100000; ++i) keys_.push_back(i * 2654435761ULL);
  }

  void Start(int shard) {
    auto started = ServerProcess::Start(
        {"--data_dir=" + dirs_[shard], absl::StrCat("--shard_index=", shard),
         "--num_shards=2", "--cache_mb=64"},
        absl::Seconds(60), dirs_[shard] + ".log");
    ASSERT_OK(started);
    if (shards_.size() <= static_cast<size_t>(shard)) shards_.resize(shard + 1);
    shards_[shard] = *std::move(started);
  }

  std::string Servers() const {
    return absl::StrCat(shards_[0]->address(), ",", shards_[1]->address());
  }

  std::unique_ptr<client::PsClient> Connect() {
    client::ClientOptions options;
    options.servers = {shards_[0]->address(), shards_[1]->address()};
    options.initial_backoff = absl::Milliseconds(20);
    options.retry_for = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<client::PsClient>> client =
        client::PsClient::Connect(options);
    EXPECT_OK(client);
    if (!client.ok()) return nullptr;
    EXPECT_OK((*client)->DeclareTable(CountingTableSpec(kTable, kDim)));
    return *std::move(client);
  }

  // One push of -1 to every key: +1 each.
  void PushOnce() {
    std::unique_ptr<client::PsClient> client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_OK(AddOne(*client, kTable, kDim, keys_, /*worker=*/0));
  }

  SlotMap MapOf(int shard) {
    auto admin = Admin::NewStub(shards_[shard]->channel());
    GetSlotMapResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(
        admin->GetSlotMap(&context, GetSlotMapRequest(), &response).ok());
    absl::StatusOr<SlotMap> map = SlotMap::FromSpec(response.slot_map());
    EXPECT_OK(map);
    return map.ok() ? *map : SlotMap::Initial(2);
  }

  // Every key holds `value` on the shard `map` names; with `only_there`,
  // no other shard stores it.
  void ExpectRows(const SlotMap& map, float value, bool only_there) {
    std::vector<std::unique_ptr<Admin::Stub>> admins;
    for (auto& shard : shards_)
      admins.push_back(Admin::NewStub(shard->channel()));
    for (size_t k = 0; k < keys_.size(); k += 211) {
      const uint64_t key = keys_[k];
      for (size_t shard = 0; shard < admins.size(); ++shard) {
        GetRowRequest request;
        request.set_table(kTable);
        request.set_key(key);
        GetRowResponse response;
        grpc::ClientContext context;
        ASSERT_TRUE(admins[shard]->GetRow(&context, request, &response).ok());
        if (shard == map.ShardForKey(key)) {
          ASSERT_TRUE(response.stored()) << key << " on " << shard;
          ASSERT_EQ(response.values(0), value) << key << " on " << shard;
        } else if (only_there) {
          ASSERT_FALSE(response.stored()) << key << " on " << shard;
        }
      }
    }
  }

  // ps_admin move-slots of every slot to shard 1, slowly (small pages).
  std::unique_ptr<ChildProcess> StartMove(const std::string& log) {
    auto move = ChildProcess::Start(
        PsAdminArgv({{"--servers=" + Servers()}},
                    {"move-slots", "--slots=0-16383", "--to=1",
                     "--move_page_rows=20", "--rpc_timeout_s=5"}),
        false, log);
    EXPECT_OK(move);
    return move.ok() ? *std::move(move) : nullptr;
  }

  // Kills `shard` once the move has copied some pages (its target holds
  // some rows of the moving slots, or ps_admin says so).
  void KillMidMove(int shard, const std::string& log) {
    // The move copies shard 0's slots in slot order: the first page holds
    // the key of its lowest slot.
    std::pair<uint32_t, uint64_t> lowest = {kNumSlots, 0};
    for (uint64_t key : keys_) {
      if (SlotMap::Initial(2).ShardForKey(key) != 0) continue;
      lowest = std::min(lowest, std::make_pair(SlotForKey(key), key));
    }
    const uint64_t first_moved = lowest.second;
    std::unique_ptr<ChildProcess> move = StartMove(log);
    ASSERT_NE(move, nullptr);
    auto target = Admin::NewStub(shards_[1]->channel());
    EXPECT_TRUE(WaitUntil(
        [&] {
          GetRowRequest request;
          request.set_table(kTable);
          request.set_key(first_moved);
          GetRowResponse response;
          grpc::ClientContext context;
          return target->GetRow(&context, request, &response).ok() &&
                 response.stored();
        },
        absl::Seconds(60), absl::Milliseconds(5)))
        << "the move copied nothing: " << ReadFile(log);
    shards_[shard]->SignalAndWait(SIGKILL);
    const int exit = move->Wait(absl::Minutes(2));
    EXPECT_NE(exit, 0) << "the move finished before the kill";
  }

  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<ServerProcess>> shards_;
  std::vector<uint64_t> keys_;
};

TEST_F(SlotMoveFaultTest, TheTargetKilledMidMoveCostsNothing) {
  ASSERT_NO_FATAL_FAILURE(PushOnce());
  ASSERT_NO_FATAL_FAILURE(KillMidMove(1, dirs_[0] + "_move.log"));
  ASSERT_NO_FATAL_FAILURE(Start(1));
  // The source kept its slots, serves them, and has every update.
  EXPECT_EQ(MapOf(0).epoch(), 1u);
  EXPECT_EQ(MapOf(1).epoch(), 1u);
  ASSERT_NO_FATAL_FAILURE(PushOnce());
  ExpectRows(SlotMap::Initial(2), 2.0f, /*only_there=*/false);
  // Run again, the move finishes, and the target's partial copy is gone.
  std::unique_ptr<ChildProcess> move = StartMove(dirs_[0] + "_again.log");
  ASSERT_NE(move, nullptr);
  ASSERT_EQ(move->Wait(absl::Minutes(2)), 0);
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMovedFrom(0, 16383, 0, 1);
  EXPECT_TRUE(MapOf(0) == moved);
  EXPECT_TRUE(MapOf(1) == moved);
  ExpectRows(moved, 2.0f, /*only_there=*/true);
  // The target made them durable before the switch: killed right after,
  // it has them all again.
  shards_[1]->SignalAndWait(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Start(1));
  ExpectRows(moved, 2.0f, /*only_there=*/true);
}

TEST_F(SlotMoveFaultTest, TheSourceKilledMidMoveKeepsItsSlots) {
  ASSERT_NO_FATAL_FAILURE(PushOnce());
  ASSERT_NO_FATAL_FAILURE(KillMidMove(0, dirs_[1] + "_move.log"));
  ASSERT_NO_FATAL_FAILURE(Start(0));
  EXPECT_EQ(MapOf(0).epoch(), 1u);
  EXPECT_EQ(MapOf(1).epoch(), 1u);
  ASSERT_NO_FATAL_FAILURE(PushOnce());
  ExpectRows(SlotMap::Initial(2), 2.0f, /*only_there=*/false);
  std::unique_ptr<ChildProcess> move = StartMove(dirs_[1] + "_again.log");
  ASSERT_NE(move, nullptr);
  ASSERT_EQ(move->Wait(absl::Minutes(2)), 0);
  const SlotMap moved = SlotMap::Initial(2).WithSlotsMovedFrom(0, 16383, 0, 1);
  EXPECT_TRUE(MapOf(0) == moved);
  ExpectRows(moved, 2.0f, /*only_there=*/true);
}

// A move's switch retried against a source restarted since it copied: the
// restarted source took pushes the target lacks, and no move is under way
// on its process. The switch is refused, the source keeps its slots and
// every acknowledged push.
TEST_F(SlotMoveFaultTest, ASourceRestartedSinceTheCopyRefusesTheSwitch) {
  ASSERT_NO_FATAL_FAILURE(PushOnce());
  auto admin = Admin::NewStub(shards_[0]->channel());
  BeginSlotMoveRequest begin;
  begin.set_first_slot(0);
  begin.set_last_slot(kNumSlots - 1);
  begin.set_to_shard(1);
  BeginSlotMoveResponse begun;
  grpc::ClientContext begin_context;
  ASSERT_TRUE(admin->BeginSlotMove(&begin_context, begin, &begun).ok());
  shards_[0]->SignalAndWait(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Start(0));
  ASSERT_NO_FATAL_FAILURE(PushOnce());

  const SlotMap moved = SlotMap::Initial(2).WithSlotsMovedFrom(0, 16383, 0, 1);
  SetSlotMapRequest request;
  request.set_expected_slot_map_epoch(1);
  *request.mutable_slot_map() = moved.ToSpec();
  SetSlotMapResponse response;
  grpc::ClientContext context;
  admin = Admin::NewStub(shards_[0]->channel());
  const grpc::Status switched = admin->SetSlotMap(&context, request, &response);
  EXPECT_EQ(switched.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << switched.error_message();
  EXPECT_EQ(MapOf(0).epoch(), 1u);
  ExpectRows(SlotMap::Initial(2), 2.0f, /*only_there=*/false);
}

}  // namespace
}  // namespace ps::testing
