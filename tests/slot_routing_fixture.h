// File: tests/slot_routing_fixture.h
//
// What the slot routing and slot moving tests share: shards started on
// loopback with a table declared, clients with a slot map of their own, and
// the admin calls that change the map.

#ifndef PS_TESTS_SLOT_ROUTING_FIXTURE_H_
#define PS_TESTS_SLOT_ROUTING_FIXTURE_H_

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/packed.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/transient_error.h"
#include "client/ps_client.h"
#include "embedding/push_ledger.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "net/admin_channel.h"
#include "nlohmann/json.hpp"
#include "ops/checkpoint.h"
#include "ops/slot_mover.h"
#include "proto/admin.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard_server.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"

namespace ps {

inline constexpr int kDim = 2;
inline constexpr char kTable[] = "t";

TableSpec Table() { return testing::CountingTableSpec(kTable, kDim); }

// Declares `spec` on the shard at `address` alone.
inline grpc::Status DeclareOnShard(const std::string& address,
                                   const TableSpec& spec) {
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  DeclareTableRequest declare;
  *declare.mutable_table() = spec;
  DeclareTableResponse declared;
  grpc::ClientContext context;
  return stub->DeclareTable(&context, declare, &declared);
}

class SlotRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override { StartShards("slot_routing", 2, ""); }

  void TearDown() override {
    for (auto& shard : shards_)
      EXPECT_OK(shard->Shutdown(absl::ZeroDuration()));
  }

  void StartShards(const std::string& name, uint32_t count,
                   const std::string& restore_from) {
    for (auto& shard : shards_)
      EXPECT_OK(shard->Shutdown(absl::ZeroDuration()));
    shards_.clear();
    admins_.clear();
    servers_.clear();
    for (uint32_t i = 0; i < count; ++i) {
      server::ServerOptions options;
      options.listen_address = "127.0.0.1:0";
      options.shard_index = i;
      options.num_shards = count;
      options.store.data_dir = FreshTestDir(absl::StrCat(name, "_", i));
      options.restore_from = restore_from;
      absl::StatusOr<std::unique_ptr<server::ShardServer>> shard =
          server::ShardServer::Start(options);
      ASSERT_OK(shard);
      servers_.push_back(absl::StrCat("127.0.0.1:", (*shard)->port()));
      admins_.push_back(Admin::NewStub(grpc::CreateChannel(
          servers_.back(), grpc::InsecureChannelCredentials())));
      shards_.push_back(*std::move(shard));
    }
  }

  std::unique_ptr<client::PsClient> Connect() {
    client::ClientOptions options;
    options.servers = servers_;
    options.incarnation = 7;
    options.initial_backoff = absl::Milliseconds(20);
    options.retry_for = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<client::PsClient>> client =
        client::PsClient::Connect(options);
    EXPECT_OK(client);
    return client.ok() ? *std::move(client) : nullptr;
  }

  // A client that has declared the table.
  std::unique_ptr<client::PsClient> ConnectAndDeclare() {
    std::unique_ptr<client::PsClient> client = Connect();
    if (client != nullptr) {
      EXPECT_OK(client->DeclareTable(Table()));
    }
    return client;
  }

  // Sets `map` (from the initial map's epoch 1) on every shard, in order.
  void SetMapOnEveryShard(const SlotMap& map) {
    for (size_t shard = 0; shard < shards_.size(); ++shard) {
      ASSERT_TRUE(SetMap(shard, 1, map).ok()) << shard;
    }
  }

  // MoveSlots() of first..last to `to` over the admin API.
  absl::StatusOr<SlotMoveReport> Move(uint32_t first, uint32_t last,
                                      uint32_t to, uint32_t rows_per_page) {
    ASSIGN_OR_RETURN(net::AdminChannels channels,
                     net::AdminChannels::Connect(servers_, "", TlsFiles(), ""));
    SlotMoveOptions move;
    move.first_slot = first;
    move.last_slot = last;
    move.to_shard = to;
    move.rows_per_page = rows_per_page;
    return MoveSlots(channels, move);
  }

  // A move's last round on `shard`, by hand: pauses its pushes and reads
  // the rows of kTable changed since the move began.
  grpc::Status LastRound(size_t shard, ReadSlotRowsResponse* changed) {
    ReadSlotRowsRequest read;
    read.set_table(kTable);
    read.set_changed(true);
    read.set_pause(true);
    grpc::ClientContext context;
    return admins_[shard]->ReadSlotRows(&context, read, changed);
  }

  // Maps here change by hand: slots in no move go with no rows.
  grpc::Status SetMap(size_t shard, uint64_t expected_epoch,
                      const SlotMap& map) {
    SetSlotMapRequest request;
    request.set_expected_slot_map_epoch(expected_epoch);
    *request.mutable_slot_map() = map.ToSpec();
    request.set_allow_without_move(true);
    SetSlotMapResponse response;
    grpc::ClientContext context;
    return admins_[shard]->SetSlotMap(&context, request, &response);
  }

  // The row of `key` on `shard`, and whether the shard stores it.
  std::vector<float> Row(size_t shard, uint64_t key, bool* stored) {
    GetRowRequest request;
    request.set_table(kTable);
    request.set_key(key);
    GetRowResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(admins_[shard]->GetRow(&context, request, &response).ok());
    *stored = response.stored();
    return {response.values().begin(), response.values().end()};
  }

  // Pushes a gradient of -1 to every key of `keys` once, as worker 0.
  absl::Status PushOnce(client::PsClient& client,
                        const std::vector<uint64_t>& keys) {
    return testing::AddOne(client, kTable, kDim, keys, /*worker=*/0);
  }

  // Pulls `keys` through `client`; the first value of each row.
  absl::StatusOr<std::vector<float>> PullFirstColumn(
      client::PsClient& client, const std::vector<uint64_t>& keys) {
    std::vector<float> rows(keys.size() * kDim, -5.0f);
    client::TrainingClient::TableRows pull;
    pull.table = kTable;
    pull.keys = keys;
    pull.dim = kDim;
    pull.rows = rows.data();
    RETURN_IF_ERROR(client.Pull({&pull, 1}));
    std::vector<float> first;
    for (size_t i = 0; i < keys.size(); ++i) first.push_back(rows[i * kDim]);
    return first;
  }

  // Every key of `keys` holds value_of(key) in each of its floats on the
  // shard `map` gives it, and nothing on any other.
  void ExpectRowsWhere(const SlotMap& map, const std::vector<uint64_t>& keys,
                       const std::function<float(uint64_t)>& value_of) {
    for (uint64_t key : keys) {
      for (size_t shard = 0; shard < shards_.size(); ++shard) {
        bool stored = false;
        const std::vector<float> row = Row(shard, key, &stored);
        if (shard == map.ShardForKey(key)) {
          ASSERT_TRUE(stored) << "key " << key << " on shard " << shard;
          ASSERT_EQ(row, std::vector<float>(kDim, value_of(key)))
              << "key " << key << " on shard " << shard;
        } else {
          ASSERT_FALSE(stored) << "key " << key << " on shard " << shard;
        }
      }
    }
  }

  // Every key of `keys` holds exactly 1 (one push applied) on the shard
  // `map` gives it, and nothing on any other.
  void ExpectAppliedOnceWhere(const SlotMap& map,
                              const std::vector<uint64_t>& keys) {
    ExpectRowsWhere(map, keys, [](uint64_t) { return 1.0f; });
  }

  std::vector<std::unique_ptr<server::ShardServer>> shards_;
  std::vector<std::unique_ptr<Admin::Stub>> admins_;
  std::vector<std::string> servers_;
};

inline std::vector<uint64_t> Keys(int count) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < count; ++i) keys.push_back(i * 7919 + 3);
  return keys;
}

}  // namespace ps

#endif  // PS_TESTS_SLOT_ROUTING_FIXTURE_H_
