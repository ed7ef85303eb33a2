// File: tests/checkpoint_cluster.h
//
// What the checkpoint tests share: shards started as real processes on
// fresh data dirs (tests/test_cluster.h), ps_admin run against them, rows read
// back with their optimizer state, and a fixture that generates click logs.

#ifndef PS_TESTS_CHECKPOINT_CLUSTER_H_
#define PS_TESTS_CHECKPOINT_CLUSTER_H_

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "client/ps_client.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_client.h"
#include "tests/test_cluster.h"
#include "tests/test_files.h"

namespace ps::testing {

// Shards started as a TestCluster in `dir`/<name> (data dirs
// `dir`/<name>/shard<i>) with `extra` flags; null, with a test failure, if
// one did not start.
inline std::unique_ptr<TestCluster> StartShards(
    const std::string& dir, const std::string& name, int count,
    const std::vector<std::string>& extra = {}) {
  TestClusterOptions options;
  options.shards = count;
  options.server_flags = extra;
  options.start_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<TestCluster>> cluster =
      TestCluster::Start(dir + "/" + name, options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

inline int Admin(const std::vector<std::string>& servers,
                 const std::vector<std::string>& args, const std::string& log) {
  return RunPsAdmin(AdminCluster::Servers(servers), args, log).exit_code;
}

// A row with its optimizer state, from the shard that owns `key`.
struct FullRow {
  bool stored = false;
  std::vector<float> floats;  // weights, then state

  bool operator==(const FullRow& other) const {
    return stored == other.stored && floats.size() == other.floats.size() &&
           std::memcmp(floats.data(), other.floats.data(),
                       floats.size() * sizeof(float)) == 0;
  }
};

inline FullRow GetFullRow(TestCluster& shards, const std::string& table,
                          uint64_t key) {
  ServerProcess& owner = shards.shard(
      ShardForKey(key, static_cast<uint32_t>(shards.num_shards())));
  auto admin = Admin::NewStub(owner.channel());
  grpc::ClientContext context;
  GetRowRequest request;
  request.set_table(table);
  request.set_key(key);
  request.set_optimizer_state(true);
  GetRowResponse response;
  const grpc::Status status = admin->GetRow(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  FullRow row;
  row.stored = response.stored();
  row.floats.assign(response.values().begin(), response.values().end());
  row.floats.insert(row.floats.end(), response.optimizer_state().begin(),
                    response.optimizer_state().end());
  return row;
}

inline TableSpec Spec(const std::string& name, uint32_t dim,
                      OptimizerSpec::Kind optimizer) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_optimizer()->set_kind(optimizer);
  return spec;
}

// The entries of `dir` that hold a checkpoint's manifest, sorted; fails
// the test if anything else (an unfinished checkpoint) is there.
inline std::vector<std::string> FinishedCheckpoints(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(std::filesystem::exists(entry.path() / "MANIFEST.json"))
        << name << " is not a finished checkpoint";
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  // Writes `lines` click-log lines to dir_/NAME (sample seed `seed`) and
  // returns the path.
  std::string Generate(const std::string& name, int lines, int seed = 1,
                       const std::vector<std::string>& flags = {}) {
    const std::string path = dir_ + "/" + name;
    std::vector<std::string> argv = {
        BinaryPath("worker/datagen/clicklog_gen"), "--out=" + path,
        absl::StrCat("--lines=", lines), absl::StrCat("--sample_seed=", seed)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    EXPECT_EQ(RunToCompletion(argv, dir_ + "/gen.log"), 0)
        << ReadFile(dir_ + "/gen.log");
    return path;
  }

  std::string dir_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_CHECKPOINT_CLUSTER_H_
