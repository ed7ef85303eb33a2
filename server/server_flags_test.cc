#include "server/server_flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, data_dir);
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(std::string, durability);
ABSL_DECLARE_FLAG(uint64_t, write_back_ms);
ABSL_DECLARE_FLAG(uint64_t, flush_interval_ms);
ABSL_DECLARE_FLAG(std::string, etcd);
ABSL_DECLARE_FLAG(std::string, job);
ABSL_DECLARE_FLAG(int32_t, etcd_lease_s);
ABSL_DECLARE_FLAG(int32_t, join_wait_s);
ABSL_DECLARE_FLAG(std::string, advertise_address);
ABSL_DECLARE_FLAG(int32_t, replicas);
ABSL_DECLARE_FLAG(bool, allow_unclean_promotion);
ABSL_DECLARE_FLAG(uint64_t, drain_seconds);
ABSL_DECLARE_FLAG(std::string, replication);
ABSL_DECLARE_FLAG(uint32_t, max_workers);
ABSL_DECLARE_FLAG(std::string, replica_of);
ABSL_DECLARE_FLAG(int32_t, replica_of_shard);
ABSL_DECLARE_FLAG(std::string, etcd_tls_ca);
ABSL_DECLARE_FLAG(std::string, etcd_tls_cert);

namespace ps::server {
namespace {

class ServerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override { absl::SetFlag(&FLAGS_data_dir, "/tmp/shard"); }
  // Every flag back to its default after each test.
  absl::FlagSaver saver_;
};

TEST_F(ServerFlagsTest, TheDefaultsAreAnEmbeddedShard) {
  absl::StatusOr<ServerProcessOptions> options =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->server.store.data_dir, "/tmp/shard");
  EXPECT_EQ(options->server.listen_address, "127.0.0.1:50051");
  EXPECT_EQ(options->server.store.durability, embedding::Durability::kWal);
  EXPECT_FALSE(options->etcd.enabled());
  EXPECT_EQ(options->drain, absl::Seconds(10));
  // Left for main: what an admin stop does.
  EXPECT_FALSE(options->server.stop);
}

TEST_F(ServerFlagsTest, EtcdFlagsFillTheMembership) {
  absl::SetFlag(&FLAGS_etcd, "127.0.0.1:2379");
  absl::SetFlag(&FLAGS_job, "ctr");
  absl::SetFlag(&FLAGS_etcd_lease_s, 3);
  absl::SetFlag(&FLAGS_join_wait_s, 7);
  absl::SetFlag(&FLAGS_replicas, 1);
  absl::SetFlag(&FLAGS_allow_unclean_promotion, true);
  absl::SetFlag(&FLAGS_drain_seconds, 4);
  absl::StatusOr<ServerProcessOptions> options =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_TRUE(options->etcd.enabled());
  EXPECT_EQ(options->etcd.job, "ctr");
  EXPECT_EQ(options->etcd.lease, absl::Seconds(3));
  EXPECT_EQ(options->etcd.join_wait, absl::Seconds(7));
  EXPECT_EQ(options->etcd.replicas, 1);
  EXPECT_TRUE(options->etcd.allow_unclean_promotion);
  EXPECT_FALSE(options->etcd.accept_etcd_rollback);
  EXPECT_EQ(options->drain, absl::Seconds(4));
  EXPECT_EQ(options->etcd.connection.endpoints,
            std::vector<std::string>{"127.0.0.1:2379"});
  EXPECT_TRUE(options->etcd.connection.tls.ca.empty());
  // etcd's TLS flags are read here too, and checked.
  absl::SetFlag(&FLAGS_etcd_tls_ca, "/etc/etcd/ca.pem");
  options = ServerProcessOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->etcd.connection.tls.ca, "/etc/etcd/ca.pem");
  absl::SetFlag(&FLAGS_etcd_tls_cert, "/etc/etcd/client.pem");
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--etcd_tls_key"));
  absl::SetFlag(&FLAGS_etcd_tls_cert, "");
  absl::SetFlag(&FLAGS_etcd, " , ");
  EXPECT_TRUE(IsUsageError(ServerProcessOptionsFromFlags().status(),
                           "--etcd names no endpoint"));
}

TEST_F(ServerFlagsTest, ABadFlagIsAnInvalidArgumentNamingIt) {
  absl::SetFlag(&FLAGS_data_dir, "");
  EXPECT_TRUE(IsUsageError(ServerProcessOptionsFromFlags().status(),
                           "--data_dir is required"));
  absl::SetFlag(&FLAGS_data_dir, "/tmp/shard");
  absl::SetFlag(&FLAGS_durability, "sometimes");
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--durability"));
  absl::SetFlag(&FLAGS_durability, "wal");
  absl::SetFlag(&FLAGS_max_workers, 0);
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--max_workers"));
  absl::SetFlag(&FLAGS_max_workers, 4096);
  absl::SetFlag(&FLAGS_replication, "maybe");
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--replication"));
  absl::SetFlag(&FLAGS_replication, "async");
  absl::SetFlag(&FLAGS_replicas, -1);
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--replicas"));
}

TEST_F(ServerFlagsTest, EtcdOnEveryAddressNeedsAnAdvertisedOne) {
  absl::SetFlag(&FLAGS_etcd, "127.0.0.1:2379");
  absl::SetFlag(&FLAGS_job, "ctr");
  absl::SetFlag(&FLAGS_listen, "0.0.0.0:50051");
  // Beyond loopback without TLS is refused later, by the server itself.
  EXPECT_TRUE(IsUsageError(ServerProcessOptionsFromFlags().status(),
                           "--advertise_address"));
  absl::SetFlag(&FLAGS_advertise_address, "shard-0.ps:50051");
  absl::StatusOr<ServerProcessOptions> options =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->etcd.advertise_address, "shard-0.ps:50051");
  absl::SetFlag(&FLAGS_job, "Not A Job");
  EXPECT_FALSE(ServerProcessOptionsFromFlags().ok());
  absl::SetFlag(&FLAGS_job, "ctr");
  absl::SetFlag(&FLAGS_etcd_lease_s, 0);
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "--etcd_lease_s"));
}

TEST_F(ServerFlagsTest, AnOldWriteBackNameStillSetsTheInterval) {
  absl::SetFlag(&FLAGS_durability, "periodic");
  absl::SetFlag(&FLAGS_flush_interval_ms, 500);
  absl::StatusOr<ServerProcessOptions> options =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(options);
  EXPECT_EQ(options->server.store.write_back_interval, absl::Milliseconds(500));
  absl::SetFlag(&FLAGS_write_back_ms, 700);
  EXPECT_TRUE(IsUsageError(ServerProcessOptionsFromFlags().status(),
                           "--write_back_ms"));
}

TEST_F(ServerFlagsTest, AReplicaNamesItsPrimaryByAddressOrUnderEtcdByIndex) {
  absl::SetFlag(&FLAGS_replica_of, "127.0.0.1:50051");
  absl::StatusOr<ServerProcessOptions> by_address =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(by_address);
  EXPECT_EQ(by_address->server.replica_of, "127.0.0.1:50051");
  EXPECT_EQ(by_address->etcd.replica_of_shard, -1);
  // An index needs etcd; an address under etcd is refused.
  absl::SetFlag(&FLAGS_replica_of, "");
  absl::SetFlag(&FLAGS_replica_of_shard, 2);
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "needs --etcd"));
  absl::SetFlag(&FLAGS_etcd, "127.0.0.1:2379");
  absl::SetFlag(&FLAGS_job, "ctr");
  absl::StatusOr<ServerProcessOptions> by_index =
      ServerProcessOptionsFromFlags();
  ASSERT_OK(by_index);
  EXPECT_EQ(by_index->etcd.replica_of_shard, 2);
  EXPECT_EQ(by_index->server.replica_of, "");
  absl::SetFlag(&FLAGS_replica_of, "127.0.0.1:50051");
  EXPECT_TRUE(
      IsUsageError(ServerProcessOptionsFromFlags().status(), "give one"));
  absl::SetFlag(&FLAGS_replica_of_shard, -1);
  EXPECT_TRUE(IsUsageError(ServerProcessOptionsFromFlags().status(),
                           "--replica_of_shard=N"));
  // The old form: an index in --replica_of.
  absl::SetFlag(&FLAGS_replica_of, "3");
  testing::internal::CaptureStderr();
  absl::StatusOr<ServerProcessOptions> old_form =
      ServerProcessOptionsFromFlags();
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_OK(old_form);
  EXPECT_EQ(old_form->etcd.replica_of_shard, 3);
  EXPECT_EQ(old_form->server.replica_of, "");
  EXPECT_NE(said.find("--replica_of=N is deprecated: use --replica_of_shard=N"),
            std::string::npos)
      << said;
}

}  // namespace
}  // namespace ps::server
