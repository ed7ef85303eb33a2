// InSyncRecorder on an InMemoryStore with a fake feed: the set it records,
// the order in which it tells the feed, the least it keeps, and its stop
// once the shard's generation moved.

#include "cluster/in_sync_recorder.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "cluster/in_memory_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"

namespace ps::cluster {
namespace {

constexpr char kJob[] = "job";
constexpr int kShard = 3;
constexpr uint64_t kFeed = 77;

// A feed whose followers the test sets, recording what it is told.
class FakeFeed : public InSyncFeed {
 public:
  struct Told {
    std::vector<uint64_t> followers;
    std::optional<std::vector<uint64_t>> counted;
  };

  uint64_t id() const override { return kFeed; }
  std::vector<uint64_t> InSyncFollowers() override {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return in_sync_;
  }
  void SetRecordedInSync(
      std::vector<uint64_t> followers,
      std::optional<std::vector<uint64_t>> counted) override {
    absl::MutexLock lock(&mu_);
    told_.push_back({std::move(followers), std::move(counted)});
  }

  void SetInSync(std::vector<uint64_t> in_sync) {
    absl::MutexLock lock(&mu_);
    in_sync_ = std::move(in_sync);
  }
  std::vector<Told> told() {
    absl::MutexLock lock(&mu_);
    return told_;
  }
  int reads() {
    absl::MutexLock lock(&mu_);
    return reads_;
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> in_sync_;
  std::vector<Told> told_;
  int reads_ = 0;
};

class InSyncRecorderTest : public ::testing::Test {
 protected:
  std::unique_ptr<InSyncRecorder> Start(uint32_t min_in_sync = 0) {
    InSyncRecorderOptions options;
    options.job = kJob;
    options.index = kShard;
    options.min_in_sync = min_in_sync;
    options.interval = absl::Milliseconds(5);
    absl::StatusOr<std::unique_ptr<InSyncRecorder>> recorder =
        InSyncRecorder::Start(&store_, &feed_, options);
    EXPECT_OK(recorder.status());
    return recorder.ok() ? *std::move(recorder) : nullptr;
  }

  // The followers etcd holds for the shard (empty if none).
  std::vector<uint64_t> Recorded() {
    absl::StatusOr<InSyncSet> set = ReadInSyncSet(store_, kJob, kShard);
    return set.ok() ? set->followers : std::vector<uint64_t>{};
  }

  InMemoryStore store_;
  FakeFeed feed_;
};

TEST_F(InSyncRecorderTest, RecordsTheSetThenTellsTheFeed) {
  feed_.SetInSync({2, 1});
  std::unique_ptr<InSyncRecorder> recorder = Start();
  ASSERT_NE(recorder, nullptr);
  absl::StatusOr<InSyncSet> set = ReadInSyncSet(store_, kJob, kShard);
  ASSERT_OK(set.status());
  EXPECT_EQ(set->followers, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(set->feed, kFeed);
  EXPECT_EQ(set->generation, 0u);
  const std::vector<FakeFeed::Told> told = feed_.told();
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].followers, (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(told[0].counted.has_value());
  EXPECT_OK(recorder->status());
}

TEST_F(InSyncRecorderTest, WhileAChangeIsWrittenBothSetsHoldPushes) {
  feed_.SetInSync({1, 2});
  std::unique_ptr<InSyncRecorder> recorder = Start();
  ASSERT_NE(recorder, nullptr);
  feed_.SetInSync({1, 3});
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Recorded() == std::vector<uint64_t>{1, 3};
      },
      absl::Seconds(10)));
  ASSERT_TRUE(
      WaitUntil([&] { return feed_.told().size() >= 3; }, absl::Seconds(10)));
  const std::vector<FakeFeed::Told> told = feed_.told();
  // Before the write: a wait needs every follower of either set, and only
  // the one both name counts; after it, the new set alone.
  EXPECT_EQ(told[1].followers, (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_TRUE(told[1].counted.has_value());
  EXPECT_EQ(*told[1].counted, (std::vector<uint64_t>{1}));
  EXPECT_EQ(told[2].followers, (std::vector<uint64_t>{1, 3}));
  EXPECT_FALSE(told[2].counted.has_value());
}

TEST_F(InSyncRecorderTest, KeepsFollowersThatDroppedOutBelowTheLeast) {
  feed_.SetInSync({1, 2});
  std::unique_ptr<InSyncRecorder> recorder = Start(/*min_in_sync=*/2);
  ASSERT_NE(recorder, nullptr);
  feed_.SetInSync({1});
  // Many rounds later, the record still names both.
  const int reads = feed_.reads();
  ASSERT_TRUE(WaitUntil([&] { return feed_.reads() >= reads + 10; },
                        absl::Seconds(10)));
  EXPECT_EQ(Recorded(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(feed_.told().size(), 1u);
  // A third that catches up lets the one that dropped out go.
  feed_.SetInSync({1, 3});
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Recorded() == std::vector<uint64_t>{1, 3};
      },
      absl::Seconds(10)));
}

TEST_F(InSyncRecorderTest, StopsOnceAReplicaWasPromoted) {
  feed_.SetInSync({1});
  std::unique_ptr<InSyncRecorder> recorder = Start();
  ASSERT_NE(recorder, nullptr);
  absl::StatusOr<ShardGeneration> at =
      ReadShardGeneration(store_, kJob, kShard);
  ASSERT_OK(at.status());
  ASSERT_OK(
      RaiseShardGeneration(store_, kJob, kShard, *at, "promotion-1").status());
  feed_.SetInSync({});  // a change to write, which the fence refuses
  EXPECT_TRUE(
      WaitUntil([&] { return absl::IsFailedPrecondition(recorder->status()); },
                absl::Seconds(10)))
      << recorder->status();
  EXPECT_EQ(Recorded(), (std::vector<uint64_t>{1}));
  // The feed was told both sets while the write was tried, never the one
  // etcd refused as the record.
  const std::vector<FakeFeed::Told> told = feed_.told();
  ASSERT_FALSE(told.empty());
  EXPECT_EQ(told.back().followers, (std::vector<uint64_t>{1}));
  EXPECT_TRUE(told.back().counted.has_value());
}

}  // namespace
}  // namespace ps::cluster
