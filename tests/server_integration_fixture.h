// What the single-shard process tests share: a real ps_server on a free
// loopback port with table "emb" (dim 16, SGD) declared, and its stub;
// ps_admin's --json output read back.

#ifndef PS_TESTS_SERVER_INTEGRATION_FIXTURE_H_
#define PS_TESTS_SERVER_INTEGRATION_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/ps_admin_run.h"
#include "tests/server_process.h"
#include "tests/test_client.h"

namespace ps::testing {

inline constexpr uint32_t kDim = 16;
inline constexpr char kTable[] = "emb";

inline std::vector<uint64_t> Keys(size_t count, uint64_t stride = 104729) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < count; ++i) keys.push_back(i * stride + 1);
  return keys;
}

inline std::vector<float> MustPull(ParameterServer::Stub& stub,
                                   const std::vector<uint64_t>& keys) {
  std::vector<float> rows;
  grpc::Status status = PullRows(stub, kTable, keys, &rows);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return rows;
}

class ServerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = FreshTestDir("server_integration");
    server_ = Start();
    stub_ = ParameterServer::NewStub(server_->channel());
    ASSERT_TRUE(DeclareTable(*stub_, SgdTableSpec(kTable, kDim, 0.5f)).ok());
  }

  std::unique_ptr<ServerProcess> Start() {
    auto server =
        ServerProcess::Start({"--data_dir=" + data_dir_,
                              "--max_keys_per_request=5000", "--cache_mb=8",
                              // Rows stay in the push log until shutdown.
                              "--write_back_ms=3600000"});
    EXPECT_TRUE(server.ok()) << server.status();
    return std::move(server).value();
  }

  std::string data_dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

// ps_admin's --json output as a protobuf Struct (which also checks that it
// is JSON).
inline google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct parsed;
  const auto status =
      google::protobuf::util::JsonStringToMessage(text, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << text;
  return parsed;
}

inline const google::protobuf::Value& Field(
    const google::protobuf::Struct& object, const std::string& name) {
  static const google::protobuf::Value* missing = new google::protobuf::Value;
  auto it = object.fields().find(name);
  EXPECT_NE(it, object.fields().end()) << "no field " << name;
  return it == object.fields().end() ? *missing : it->second;
}

// Runs ps_admin against `server` (a --servers list); returns its stdout.
inline std::string RunAdmin(const std::string& server,
                            const std::vector<std::string>& args,
                            int* exit_code) {
  const AdminRun run =
      RunPsAdmin(AdminCluster::Servers({server}), args,
                 FreshTestDir("ps_admin") + "/ps_admin.log", absl::Seconds(60));
  *exit_code = run.exit_code;
  return run.out;
}

}  // namespace ps::testing

#endif  // PS_TESTS_SERVER_INTEGRATION_FIXTURE_H_
