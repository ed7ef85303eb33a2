// File: tests/etcd/etcd_cluster_fixture.h
//
// What the etcd cluster tests share: etcd started for each test, the flags
// of a shard of the job, the shards registered, and the job's slot map.

#ifndef PS_TESTS_ETCD_ETCD_CLUSTER_FIXTURE_H_
#define PS_TESTS_ETCD_ETCD_CLUSTER_FIXTURE_H_

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"
#include "tests/etcd_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_files.h"

namespace ps::testing {

inline constexpr char kJob[] = "ctr";

class EtcdClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
        EtcdProcess::Start("etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
    absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> client =
        etcd_->Connect();
    ASSERT_OK(client);
    client_ = *std::move(client);
  }

  std::vector<std::string> ShardFlags(int index, int num_shards) {
    return {"--data_dir=" +
                FreshTestDir(absl::StrCat("shard", index, "_", ++started_)),
            absl::StrCat("--shard_index=", index),
            absl::StrCat("--num_shards=", num_shards),
            "--etcd=" + etcd_->endpoint(),
            absl::StrCat("--job=", kJob),
            "--etcd_lease_s=2"};
  }

  // The shard records of kJob in etcd.
  size_t Registered() {
    absl::StatusOr<std::vector<net::EtcdValue>> records =
        client_->GetPrefix(absl::StrCat("/ps/", kJob, "/shards/"));
    EXPECT_OK(records);
    return records.ok() ? records->size() : 0;
  }

  // Waits up to `timeout` until Registered() is `count`.
  bool WaitForRegistered(size_t count, absl::Duration timeout) {
    return WaitUntil([&] { return Registered() == count; }, timeout,
                     absl::Milliseconds(50));
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<cluster::CoordinationStore> client_;
  int started_ = 0;
};

// The slot map of kJob in etcd.
inline absl::StatusOr<SlotMap> JobMap(cluster::CoordinationStore& etcd) {
  ASSIGN_OR_RETURN(net::EtcdValue stored,
                   etcd.Get(absl::StrCat("/ps/", kJob, "/slot_map")));
  return SlotMapFromJson(stored.value, 0);
}

// Waits up to `timeout` until the job's map counts `num_shards` shards.
inline bool WaitForShardCount(cluster::CoordinationStore& etcd,
                              uint32_t num_shards, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        absl::StatusOr<SlotMap> map = JobMap(etcd);
        return map.ok() && map->num_shards() == num_shards;
      },
      timeout, absl::Milliseconds(50));
}

}  // namespace ps::testing

#endif  // PS_TESTS_ETCD_ETCD_CLUSTER_FIXTURE_H_
