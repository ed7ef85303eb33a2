// cluster/shard_directory's failover keys, on Debian's etcd (started on
// loopback for each test) and on InMemoryStore alike: a shard's generation
// rises only while no process is registered as the shard, a registration
// holds only at the generation it read, and one process of many claims a
// new shard.

#include "cluster/shard_directory.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "cluster/coordination_store.h"
#include "cluster/in_memory_store.h"
#include "gtest/gtest.h"
#include "tests/etcd_process.h"

namespace ps::cluster {
namespace {

constexpr char kJob[] = "directory";
constexpr absl::Duration kTtl = absl::Seconds(1);

// The parameter: "etcd" or "in_memory".
class ShardDirectoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "in_memory") {
      client_ = std::make_unique<InMemoryStore>();
      return;
    }
    absl::StatusOr<std::unique_ptr<ps::testing::EtcdProcess>> etcd =
        ps::testing::EtcdProcess::Start("etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
    absl::StatusOr<std::unique_ptr<CoordinationStore>> client =
        etcd_->Connect();
    ASSERT_OK(client);
    client_ = *std::move(client);
  }

  static ShardRecord Record(const std::string& address) {
    ShardRecord record;
    record.index = 0;
    record.num_shards = 1;
    record.address = address;
    return record;
  }

  std::unique_ptr<ps::testing::EtcdProcess> etcd_;
  std::unique_ptr<CoordinationStore> client_;
};

INSTANTIATE_TEST_SUITE_P(EtcdAndInMemory, ShardDirectoryTest,
                         ::testing::Values("etcd", "in_memory"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(ShardDirectoryTest, AGenerationRisesOnlyWhileNoProcessIsRegistered) {
  absl::StatusOr<ShardGeneration> fresh_or =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(fresh_or);
  const ShardGeneration fresh = *std::move(fresh_or);
  EXPECT_EQ(fresh.mod_revision, 0);
  absl::StatusOr<std::unique_ptr<LeasedKey>> registered_or =
      RegisterShard(client_.get(), kJob, Record("primary:1"), kTtl, fresh);
  ASSERT_OK(registered_or);
  std::unique_ptr<LeasedKey> registered = *std::move(registered_or);
  // The first registration wrote generation 0.
  absl::StatusOr<ShardGeneration> served_or =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(served_or);
  const ShardGeneration served = *std::move(served_or);
  EXPECT_EQ(served.generation, 0u);
  EXPECT_NE(served.mod_revision, 0);
  // A replica that read the generation cannot raise it while the primary
  // is registered (it came back first)...
  EXPECT_EQ(
      RaiseShardGeneration(*client_, kJob, 0, served, "p1").status().code(),
      absl::StatusCode::kAborted);
  // ...and can once it is gone.
  registered.reset();
  absl::StatusOr<uint64_t> raised_or =
      RaiseShardGeneration(*client_, kJob, 0, served, "p1");
  ASSERT_OK(raised_or);
  const uint64_t raised = *std::move(raised_or);
  EXPECT_EQ(raised, 1u);
  // Only once from what it read: another promotion that read the same is
  // refused...
  EXPECT_EQ(
      RaiseShardGeneration(*client_, kJob, 0, served, "p2").status().code(),
      absl::StatusCode::kAborted);
  // ...while this one's raise sent again (etcd applied it, its answer was
  // lost) is answered as done.
  absl::StatusOr<uint64_t> again =
      RaiseShardGeneration(*client_, kJob, 0, served, "p1");
  ASSERT_OK(again);
  EXPECT_EQ(*again, 1u);
  // Once the generation moves on, it is not.
  absl::StatusOr<ShardGeneration> one = ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(one);
  ASSERT_OK(RaiseShardGeneration(*client_, kJob, 0, *one, "p3").status());
  EXPECT_EQ(
      RaiseShardGeneration(*client_, kJob, 0, served, "p1").status().code(),
      absl::StatusCode::kAborted);
}

TEST_P(ShardDirectoryTest, AGenerationRisesOnlyWhileTheInSyncSetIsAsRead) {
  absl::StatusOr<ShardGeneration> none = ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(none);
  InSyncSet set;
  set.feed = 5;
  set.followers = {1, 2};
  ASSERT_OK(WriteInSyncSet(*client_, kJob, 0, *none, set));
  absl::StatusOr<InSyncSet> read = ReadInSyncSet(*client_, kJob, 0);
  ASSERT_OK(read);
  EXPECT_GT(read->mod_revision, 0);
  // The primary drops follower 2 after the replica read the set.
  set.followers = {1};
  ASSERT_OK(WriteInSyncSet(*client_, kJob, 0, *none, set));
  EXPECT_EQ(
      RaiseShardGeneration(*client_, kJob, 0, *none, "p1", read->mod_revision)
          .status()
          .code(),
      absl::StatusCode::kAborted);
  absl::StatusOr<ShardGeneration> unchanged =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(unchanged);
  EXPECT_EQ(unchanged->generation, none->generation);
  // Read again, as it now is: raised.
  absl::StatusOr<InSyncSet> again = ReadInSyncSet(*client_, kJob, 0);
  ASSERT_OK(again);
  absl::StatusOr<uint64_t> raised =
      RaiseShardGeneration(*client_, kJob, 0, *none, "p2", again->mod_revision);
  ASSERT_OK(raised);
  EXPECT_EQ(*raised, none->generation + 1);
}

TEST_P(ShardDirectoryTest, AFirstGenerationRegistrationComesBackAfterALapse) {
  absl::StatusOr<ShardGeneration> fresh =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(fresh);
  absl::StatusOr<std::unique_ptr<LeasedKey>> registered =
      RegisterShard(client_.get(), kJob, Record("primary:1"), kTtl, *fresh);
  ASSERT_OK(registered);
  // The lease lapses (as after a pause, or etcd out of reach).
  absl::StatusOr<EtcdValue> key = client_->Get(ShardsPrefix(kJob) + "0");
  ASSERT_OK(key);
  ASSERT_OK(client_->RevokeLease(key->lease));
  // The generation is unchanged: the shard registers again.
  ASSERT_TRUE(WaitUntil([&] { return FindShard(*client_, kJob, 0).ok(); },
                        absl::Seconds(10), absl::Milliseconds(50)))
      << "not registered again";
  EXPECT_TRUE((*registered)->held());
}

TEST_P(ShardDirectoryTest, ARegistrationHoldsOnlyAtTheGenerationItRead) {
  // A shard that served (its generation 0 written) and stopped.
  absl::StatusOr<ShardGeneration> fresh =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(fresh);
  ASSERT_OK(
      RegisterShard(client_.get(), kJob, Record("primary:1"), kTtl, *fresh)
          .status());
  absl::StatusOr<ShardGeneration> read = ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(read);
  ASSERT_NE(read->mod_revision, 0);
  // A replica was promoted after the old primary read the generation.
  ASSERT_OK(RaiseShardGeneration(*client_, kJob, 0, *read, "p1").status());
  EXPECT_EQ(
      RegisterShard(client_.get(), kJob, Record("old-primary:1"), kTtl, *read)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::IsNotFound(FindShard(*client_, kJob, 0).status()));
  absl::StatusOr<ShardGeneration> now = ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(now);
  EXPECT_EQ(now->generation, 1u);
  EXPECT_EQ(now->promotion, "p1");
  absl::StatusOr<std::unique_ptr<LeasedKey>> promoted =
      RegisterShard(client_.get(), kJob, Record("replica:1"), kTtl, *now);
  ASSERT_OK(promoted);
  absl::StatusOr<ShardRecord> found = FindShard(*client_, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, "replica:1");
}

TEST(GenerationTextTest, ReadsWhatItWrites) {
  for (const auto& [generation, promotion] :
       std::vector<std::pair<uint64_t, std::string>>{{0, ""}, {7, "a1b2"}}) {
    absl::StatusOr<ShardGeneration> parsed =
        ParseGeneration(GenerationText(generation, promotion) + "\n");
    ASSERT_OK(parsed);
    EXPECT_EQ(parsed->generation, generation);
    EXPECT_EQ(parsed->promotion, promotion);
  }
  EXPECT_FALSE(ParseGeneration("").ok());
  EXPECT_FALSE(ParseGeneration("x").ok());
  EXPECT_FALSE(ParseGeneration("-1").ok());
}

TEST_P(ShardDirectoryTest, OneProcessOfManyClaimsANewShard) {
  absl::StatusOr<std::unique_ptr<LeasedKey>> claim_or =
      ClaimNewShard(client_.get(), kJob, 0, kTtl);
  ASSERT_OK(claim_or);
  std::unique_ptr<LeasedKey> claim = *std::move(claim_or);
  // Held: another waits out at most a lease, then is told.
  EXPECT_EQ(ClaimNewShard(client_.get(), kJob, 0, kTtl).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Once the claimer lets go, another may claim.
  claim.reset();
  {
    auto again = ClaimNewShard(client_.get(), kJob, 0, kTtl);
    ASSERT_OK(again);
    claim = *std::move(again);
  }
  absl::StatusOr<ShardGeneration> fresh_or =
      ReadShardGeneration(*client_, kJob, 0);
  ASSERT_OK(fresh_or);
  const ShardGeneration fresh = *std::move(fresh_or);
  absl::StatusOr<std::unique_ptr<LeasedKey>> registered_or =
      RegisterShard(client_.get(), kJob, Record("primary:1"), kTtl, fresh);
  ASSERT_OK(registered_or);
  std::unique_ptr<LeasedKey> registered = *std::move(registered_or);
  claim.reset();
  // The shard served: not new any more, even once its primary is gone.
  registered.reset();
  EXPECT_EQ(ClaimNewShard(client_.get(), kJob, 0, kTtl).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::cluster
