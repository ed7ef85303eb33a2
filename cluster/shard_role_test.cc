// ChooseRole() and RegisterAsPrimary() on an InMemoryStore: each role a
// process can find, each data dir that must not serve, a promotion cut
// short before and after etcd took it, and the fence a primary's
// registration holds.

#include "cluster/shard_role.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/wait_until.h"
#include "cluster/data_dir_generation.h"
#include "cluster/fake_shard.h"
#include "cluster/in_memory_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

using absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kJob[] = "j";
constexpr absl::Duration kLease = absl::Seconds(1);

class ShardRoleTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = FreshTestDir("shard_role_test"); }

  RegistrationOptions Registration() const {
    RegistrationOptions options;
    options.job = kJob;
    options.record = {0, 1, "127.0.0.1:7000"};
    options.data_dir = dir_;
    options.lease = kLease;
    return options;
  }

  RoleOptions Options() const {
    RoleOptions options;
    options.job = kJob;
    options.shard_index = 0;
    options.data_dir = dir_;
    options.own_address = "127.0.0.1:7000";
    options.lease = kLease;
    options.join_wait = absl::Milliseconds(300);
    options.poll = absl::Milliseconds(10);
    return options;
  }

  // A data dir that served at `generation` and holds rows.
  void ServedAt(uint64_t generation, const std::string& promotion = "") {
    ASSERT_OK(WriteDataDirGeneration(dir_, generation, promotion));
    std::ofstream(dir_ + "/000001.sst") << "rows";
  }

  // Another process registered as shard 0 at etcd's generation now.
  std::unique_ptr<LeasedKey> OtherPrimary(const std::string& address) {
    absl::StatusOr<ShardGeneration> now = ReadShardGeneration(store_, kJob, 0);
    EXPECT_OK(now);
    absl::StatusOr<std::unique_ptr<LeasedKey>> key =
        RegisterShard(&store_, kJob, {0, 1, address}, kLease, *now);
    EXPECT_OK(key);
    return key.ok() ? *std::move(key) : nullptr;
  }

  // Raises shard 0's generation for `promotion`, as a replica's promotion
  // does (no process registered).
  void Promoted(const std::string& promotion) {
    absl::StatusOr<ShardGeneration> seen = ReadShardGeneration(store_, kJob, 0);
    ASSERT_OK(seen);
    ASSERT_OK(RaiseShardGeneration(store_, kJob, 0, *seen, promotion));
  }

  std::string dir_;
  InMemoryStore store_;
};

TEST_F(ShardRoleTest, ANewShardIsClaimedByOneProcessAndAnotherWaits) {
  absl::StatusOr<ShardRole> first = ChooseRole(&store_, Options());
  ASSERT_OK(first);
  EXPECT_EQ(first->replica_of_shard, -1);
  EXPECT_NE(first->claim, nullptr);
  RoleOptions other = Options();
  other.data_dir = FreshTestDir("shard_role_test_other");
  other.own_address = "127.0.0.1:7001";
  absl::StatusOr<ShardRole> second = ChooseRole(&store_, other);
  EXPECT_THAT(second.status(), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("another process claimed"));
}

TEST_F(ShardRoleTest, AServedShardMakesAnEmptyDataDirItsReplica) {
  std::unique_ptr<LeasedKey> primary = OtherPrimary("10.0.0.1:7000");
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, Options());
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, 0);
  EXPECT_FALSE(role->discard_superseded_data_dir);
  EXPECT_EQ(role->claim, nullptr);
}

TEST_F(ShardRoleTest, ADataDirOfTheCurrentGenerationBesideAPrimaryIsRefused) {
  std::unique_ptr<LeasedKey> primary = OtherPrimary("10.0.0.1:7000");
  ServedAt(0);
  EXPECT_THAT(ChooseRole(&store_, Options()).status(),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(ShardRoleTest, ASupersededDataDirIsEmptiedForItsCopy) {
  OtherPrimary("10.0.0.1:7000").reset();
  Promoted("p1");
  std::unique_ptr<LeasedKey> primary = OtherPrimary("10.0.0.2:7000");
  ServedAt(0);
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, Options());
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, 0);
  EXPECT_TRUE(role->discard_superseded_data_dir);
}

TEST_F(ShardRoleTest, ADataDirNewerThanEtcdIsRefused) {
  ServedAt(3);
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, Options());
  EXPECT_THAT(role.status(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(role.status().message()),
              HasSubstr("etcd lost its state"));
}

TEST_F(ShardRoleTest, ThePrimarysOwnDataDirServesAgainAfterARestart) {
  OtherPrimary("10.0.0.1:7000").reset();
  ServedAt(0);
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, Options());
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, -1);
  EXPECT_EQ(role->claim, nullptr);
  // Its own earlier registration, not yet expired, is not another primary.
  std::unique_ptr<LeasedKey> earlier = OtherPrimary(Options().own_address);
  role = ChooseRole(&store_, Options());
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, -1);
}

TEST_F(ShardRoleTest, APromotionEtcdTookIsFinishedByARestart) {
  OtherPrimary("10.0.0.1:7000").reset();
  // Cut short after the raise, before the registration.
  ASSERT_OK(WriteDataDirGeneration(dir_, 1, "mine"));
  Promoted("mine");
  RoleOptions options = Options();
  options.replica_copy = true;
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, options);
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, -1);
}

TEST_F(ShardRoleTest, APromotionCutShortBeforeEtcdTookItIsNotFinished) {
  OtherPrimary("10.0.0.1:7000").reset();
  // The data dir holds the promotion; etcd does not (the old primary may
  // have served since).
  ASSERT_OK(WriteDataDirGeneration(dir_, 1, "mine"));
  RoleOptions options = Options();
  options.replica_copy = true;
  absl::StatusOr<ShardRole> role = ChooseRole(&store_, options);
  EXPECT_THAT(role.status(), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(std::string(role.status().message()),
              HasSubstr("replica's copy"));
  // Once a primary serves it again, the copy follows it.
  std::unique_ptr<LeasedKey> primary = OtherPrimary("10.0.0.1:7000");
  role = ChooseRole(&store_, options);
  ASSERT_OK(role);
  EXPECT_EQ(role->replica_of_shard, 0);
}

TEST_F(ShardRoleTest, APromotionAnotherReplicaWonIsNotFinishedByThisOne) {
  OtherPrimary("10.0.0.1:7000").reset();
  ASSERT_OK(WriteDataDirGeneration(dir_, 1, "mine"));
  Promoted("theirs");
  RoleOptions options = Options();
  options.replica_copy = true;
  EXPECT_THAT(ChooseRole(&store_, options).status(),
              StatusIs(StatusCode::kUnavailable));
}

TEST_F(ShardRoleTest, APrimaryRegistersFencesJoinsThenCampaigns) {
  FakeShard shard;
  absl::StatusOr<std::unique_ptr<LeasedKey>> claim =
      ClaimNewShard(&store_, kJob, 0, kLease);
  ASSERT_OK(claim);
  std::unique_ptr<LeasedKey> registration;
  ASSERT_OK(RegisterAsPrimary(&store_, Registration(), shard, &registration,
                              &*claim));
  EXPECT_THAT(shard.calls(), ElementsAre("RecordInSyncSet", "FenceBy",
                                         "JoinJob", "CampaignForCoordinator"));
  ASSERT_NE(registration, nullptr);
  EXPECT_EQ(shard.fence(), registration.get());
  // The new shard's claim is given up once the shard is registered.
  EXPECT_EQ(*claim, nullptr);
  absl::StatusOr<ShardRecord> found = FindShard(store_, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, "127.0.0.1:7000");
  absl::StatusOr<DataDirGeneration> own = ReadDataDirGeneration(dir_);
  ASSERT_OK(own);
  EXPECT_TRUE(own->served);
  EXPECT_EQ(own->at.generation, 0u);
}

TEST_F(ShardRoleTest, AStaleDataDirRegistersNothing) {
  OtherPrimary("10.0.0.1:7000").reset();
  Promoted("p1");
  ServedAt(0);
  FakeShard shard;
  std::unique_ptr<LeasedKey> registration;
  const absl::Status registered =
      RegisterAsPrimary(&store_, Registration(), shard, &registration);
  EXPECT_THAT(registered, StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(registered.message()),
              HasSubstr("--replica_of_shard=0"));
  EXPECT_EQ(registration, nullptr);
  EXPECT_TRUE(shard.calls().empty());
  EXPECT_THAT(FindShard(store_, kJob, 0).status(),
              StatusIs(StatusCode::kNotFound));
  absl::StatusOr<DataDirGeneration> own = ReadDataDirGeneration(dir_);
  ASSERT_OK(own);
  EXPECT_EQ(own->at.generation, 0u);
}

TEST_F(ShardRoleTest, AGenerationThatCannotBeWrittenRegistersNothing) {
  // The GENERATION file comes before the key: a data dir that cannot hold
  // it is never registered.
  RegistrationOptions options = Registration();
  options.data_dir = dir_ + "/not_there/either";
  FakeShard shard;
  std::unique_ptr<LeasedKey> registration;
  EXPECT_FALSE(RegisterAsPrimary(&store_, options, shard, &registration).ok());
  EXPECT_EQ(registration, nullptr);
  EXPECT_TRUE(shard.calls().empty());
  EXPECT_THAT(FindShard(store_, kJob, 0).status(),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(ShardRoleTest, AFailedJoinLeavesTheRegistrationToItsOwner) {
  FakeShard shard;
  shard.Fail("JoinJob", absl::UnavailableError("the job's map is away"));
  std::unique_ptr<LeasedKey> registration;
  EXPECT_THAT(RegisterAsPrimary(&store_, Registration(), shard, &registration),
              StatusIs(StatusCode::kUnavailable));
  // Still registered and fenced by it: the shard may be checking the fence
  // now, so the owner lets go only after the shard does.
  ASSERT_NE(registration, nullptr);
  EXPECT_EQ(shard.fence(), registration.get());
  EXPECT_OK(FindShard(store_, kJob, 0).status());
  shard.FenceBy(nullptr);
  registration.reset();
  EXPECT_THAT(FindShard(store_, kJob, 0).status(),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(ShardRoleTest, APrimaryPastItsLeaseIsFencedOnceAReplicaWasPromoted) {
  FakeShard shard;
  std::unique_ptr<LeasedKey> registration;
  ASSERT_OK(RegisterAsPrimary(&store_, Registration(), shard, &registration));
  // Paused past its lease: the key goes, and a replica is promoted. (The
  // primary's renewal may write the key again between the two, while the
  // generation is still its own: then its lease is ended again.)
  absl::StatusOr<uint64_t> raised;
  for (int attempt = 0; attempt < 20; ++attempt) {
    absl::StatusOr<EtcdValue> key = store_.Get(ShardsPrefix(kJob) + "0");
    if (key.ok()) store_.ExpireLease(key->lease);
    absl::StatusOr<ShardGeneration> seen = ReadShardGeneration(store_, kJob, 0);
    ASSERT_OK(seen);
    raised = RaiseShardGeneration(store_, kJob, 0, *seen, "replica");
    if (raised.ok()) break;
  }
  ASSERT_OK(raised);
  EXPECT_TRUE(
      WaitUntil([&] { return registration->lost(); }, absl::Seconds(10)));
  // held() counts the lease's time from its last renewal (etcd ends no
  // lease sooner; ExpireLease() does): it ends within the TTL.
  EXPECT_TRUE(
      WaitUntil([&] { return !registration->held(); }, absl::Seconds(10)));
  EXPECT_THAT(FindShard(store_, kJob, 0).status(),
              StatusIs(StatusCode::kNotFound));
}

}  // namespace
}  // namespace ps::cluster
