#include "cluster/etcd_seen.h"

#include <fstream>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

TEST(EtcdSeenTest, ADataDirRemembersItsEtcd) {
  const std::string dir = FreshTestDir("etcd_seen");
  absl::StatusOr<std::optional<net::EtcdPosition>> none = ReadEtcdSeen(dir);
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  ASSERT_OK(WriteEtcdSeen(dir, {/*cluster_id=*/42, /*revision=*/1000}));
  absl::StatusOr<std::optional<net::EtcdPosition>> seen = ReadEtcdSeen(dir);
  ASSERT_OK(seen);
  ASSERT_TRUE(seen->has_value());
  EXPECT_EQ((*seen)->cluster_id, 42u);
  EXPECT_EQ((*seen)->revision, 1000);
  std::ofstream(dir + "/ETCD_SEEN") << "42\n";
  EXPECT_EQ(ReadEtcdSeen(dir).status().code(), absl::StatusCode::kDataLoss);
}

TEST(EtcdSeenTest, OnlyTheSameClusterGoingOnIsAccepted) {
  const net::EtcdPosition seen = {42, 1000};
  EXPECT_OK(CheckEtcdWentOn(seen, {42, 1000}));
  EXPECT_OK(CheckEtcdWentOn(seen, {42, 5000}));
  EXPECT_EQ(CheckEtcdWentOn(seen, {42, 999}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckEtcdWentOn(seen, {43, 5000}).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::cluster
