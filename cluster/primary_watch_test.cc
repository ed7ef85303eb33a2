// PrimaryWatch on an InMemoryStore with a fake shard: a replica promoted
// once its primary's key goes (in the in-sync set, or let through by
// allow_unclean_promotion), and each way it asks to stop instead.

#include "cluster/primary_watch.h"

#include <memory>
#include <string>

#include "base/slot_map.h"
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

constexpr char kJob[] = "j";
constexpr char kPrimary[] = "10.0.0.1:7000";
constexpr char kReplica[] = "10.0.0.2:7000";
constexpr absl::Duration kLease = absl::Seconds(1);

class PrimaryWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("primary_watch_test");
    absl::StatusOr<std::unique_ptr<LeasedKey>> key =
        RegisterShard(&store_, kJob, {0, 1, kPrimary}, kLease);
    ASSERT_OK(key);
    primary_ = *std::move(key);
  }

  // The primary records follower `follower` of its feed 7 as in sync (the
  // fake replica is follower 3).
  void InSync(uint64_t follower) {
    absl::StatusOr<ShardGeneration> at = ReadShardGeneration(store_, kJob, 0);
    ASSERT_OK(at);
    InSyncSet set;
    set.generation = at->generation;
    set.feed = 7;
    set.followers = {follower};
    ASSERT_OK(WriteInSyncSet(store_, kJob, 0, *at, set));
  }

  PromotionOptions Options() const {
    PromotionOptions options;
    options.job = kJob;
    options.own = {0, 1, kReplica};
    options.primary_address = kPrimary;
    options.data_dir = dir_;
    options.lease = kLease;
    options.poll = absl::Milliseconds(10);
    return options;
  }

  // Waits until the watch was promoted or asked to stop.
  static void WaitForOutcome(const PrimaryWatch& watch) {
    WaitUntil(
        [&] {
          return watch.registration() != nullptr ||
                 watch.StopRequest().has_value();
        },
        absl::Seconds(10));
  }

  std::string dir_;
  InMemoryStore store_;
  std::unique_ptr<LeasedKey> primary_;
  FakeShard shard_;
};

TEST_F(PrimaryWatchTest, AReplicaInSyncTakesTheShardOnceItsPrimaryIsGone) {
  InSync(3);
  PrimaryWatch watch(&store_, &shard_, Options());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(watch.registration(), nullptr);
  primary_.reset();
  WaitForOutcome(watch);
  ASSERT_NE(watch.registration(), nullptr);
  EXPECT_FALSE(watch.StopRequest().has_value());
  EXPECT_THAT(shard_.calls(),
              ElementsAre("StopFollowing", "FenceBy", "Promote",
                          "RecordInSyncSet", "CampaignForCoordinator"));
  EXPECT_EQ(shard_.fence(), watch.registration());
  absl::StatusOr<ShardRecord> found = FindShard(store_, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, kReplica);
  // The generation is raised, and the data dir holds the same promotion.
  absl::StatusOr<ShardGeneration> now = ReadShardGeneration(store_, kJob, 0);
  ASSERT_OK(now);
  EXPECT_EQ(now->generation, 1u);
  absl::StatusOr<DataDirGeneration> own = ReadDataDirGeneration(dir_);
  ASSERT_OK(own);
  EXPECT_TRUE(own->Is(*now));
  // The old primary cannot register again at its generation.
  EXPECT_THAT(RegisterShard(&store_, kJob, {0, 1, kPrimary}, kLease).status(),
              StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(PrimaryWatchTest, OfTwoReplicasRacingForTheShardExactlyOneTakesIt) {
  InSync(3);
  PromotionOptions other = Options();
  other.own.address = "10.0.0.3:7000";
  other.data_dir = FreshTestDir("primary_watch_test_other");
  FakeShard other_shard;
  PrimaryWatch first(&store_, &shard_, Options());
  PrimaryWatch second(&store_, &other_shard, other);
  primary_.reset();
  auto decided = [](const PrimaryWatch& watch) {
    return watch.registration() != nullptr || watch.StopRequest().has_value();
  };
  ASSERT_TRUE(WaitUntil([&] { return decided(first) && decided(second); },
                        absl::Seconds(10)));
  const bool first_won = first.registration() != nullptr;
  const PrimaryWatch& winner = first_won ? first : second;
  const PrimaryWatch& loser = first_won ? second : first;
  ASSERT_NE(winner.registration(), nullptr);
  EXPECT_EQ(loser.registration(), nullptr);
  ASSERT_TRUE(loser.StopRequest().has_value());
  EXPECT_FALSE(loser.StopRequest()->ok());
  absl::StatusOr<ShardRecord> found = FindShard(store_, kJob, 0);
  ASSERT_OK(found);
  EXPECT_EQ(found->address, first_won ? kReplica : other.own.address);
  absl::StatusOr<ShardGeneration> now = ReadShardGeneration(store_, kJob, 0);
  ASSERT_OK(now);
  EXPECT_EQ(now->generation, 1u);
  // Only the winner's data dir holds the generation etcd holds.
  absl::StatusOr<DataDirGeneration> winner_dir =
      ReadDataDirGeneration(first_won ? dir_ : other.data_dir);
  ASSERT_OK(winner_dir);
  EXPECT_TRUE(winner_dir->Is(*now));
  absl::StatusOr<DataDirGeneration> loser_dir =
      ReadDataDirGeneration(first_won ? other.data_dir : dir_);
  ASSERT_OK(loser_dir);
  EXPECT_FALSE(loser_dir->Is(*now));
}

TEST_F(PrimaryWatchTest, AReplicaTheInSyncSetDoesNotNameIsNotPromoted) {
  InSync(4);
  PrimaryWatch watch(&store_, &shard_, Options());
  primary_.reset();
  WaitForOutcome(watch);
  EXPECT_EQ(watch.registration(), nullptr);
  ASSERT_TRUE(watch.StopRequest().has_value());
  EXPECT_THAT(*watch.StopRequest(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(shard_.calls(), ElementsAre("StopFollowing"));
  absl::StatusOr<ShardGeneration> now = ReadShardGeneration(store_, kJob, 0);
  ASSERT_OK(now);
  EXPECT_EQ(now->generation, 0u);
  absl::StatusOr<DataDirGeneration> own = ReadDataDirGeneration(dir_);
  ASSERT_OK(own);
  EXPECT_FALSE(own->served);
}

TEST_F(PrimaryWatchTest, AnUncleanPromotionIsTakenWhenAllowed) {
  InSync(4);
  PromotionOptions options = Options();
  options.allow_unclean_promotion = true;
  PrimaryWatch watch(&store_, &shard_, options);
  primary_.reset();
  WaitForOutcome(watch);
  EXPECT_NE(watch.registration(), nullptr);
  absl::StatusOr<ShardGeneration> now = ReadShardGeneration(store_, kJob, 0);
  ASSERT_OK(now);
  EXPECT_EQ(now->generation, 1u);
}

TEST_F(PrimaryWatchTest, AShardServedElsewhereAsksTheReplicaToStop) {
  PromotionOptions options = Options();
  options.primary_address = "10.0.0.9:7000";
  PrimaryWatch watch(&store_, &shard_, options);
  WaitForOutcome(watch);
  ASSERT_TRUE(watch.StopRequest().has_value());
  EXPECT_THAT(*watch.StopRequest(), StatusIs(StatusCode::kAborted));
  EXPECT_TRUE(shard_.calls().empty());
}

TEST_F(PrimaryWatchTest, AShardThatLeftTheJobStopsItsReplicaCleanly) {
  // The job's map counts one shard; this replica's shard 1 left it.
  ASSERT_OK(store_.Put(SlotMapKey(kJob), SlotMapToJson(SlotMap::Initial(1))));
  PromotionOptions options = Options();
  options.own.index = 1;
  PrimaryWatch watch(&store_, &shard_, options);
  WaitForOutcome(watch);
  ASSERT_TRUE(watch.StopRequest().has_value());
  EXPECT_OK(*watch.StopRequest());
  EXPECT_TRUE(shard_.calls().empty());
}

TEST_F(PrimaryWatchTest, AReplicaThatStoppedFollowingStopsWhereRolesAreFound) {
  shard_.StopFollowingWith(absl::DataLossError("the feed moved on"));
  {
    // Roles given by flags: it keeps waiting for the primary's key to go.
    PrimaryWatch watch(&store_, &shard_, Options());
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_FALSE(watch.StopRequest().has_value());
  }
  PromotionOptions options = Options();
  options.finds_roles = true;
  PrimaryWatch watch(&store_, &shard_, options);
  WaitForOutcome(watch);
  ASSERT_TRUE(watch.StopRequest().has_value());
  EXPECT_THAT(*watch.StopRequest(), StatusIs(StatusCode::kDataLoss));
}

TEST_F(PrimaryWatchTest, AFailedPromotionAsksToStop) {
  InSync(3);
  shard_.Fail("Promote", absl::InternalError("the slot map is unreadable"));
  PrimaryWatch watch(&store_, &shard_, Options());
  primary_.reset();
  ASSERT_TRUE(WaitUntil([&] { return watch.StopRequest().has_value(); },
                        absl::Seconds(10)));
  EXPECT_THAT(*watch.StopRequest(), StatusIs(StatusCode::kInternal));
  // Registered and fenced by it still: its owner unfences the shard before
  // it lets the registration go.
  ASSERT_NE(watch.registration(), nullptr);
  EXPECT_EQ(shard_.fence(), watch.registration());
  EXPECT_TRUE(watch.registration()->held());
}

}  // namespace
}  // namespace ps::cluster
