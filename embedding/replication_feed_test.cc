#include "embedding/replication_feed.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

constexpr uint64_t kNoBound = ~uint64_t{0};
constexpr ReplicationFeed::Replicated kYes = ReplicationFeed::Replicated::kYes;
constexpr ReplicationFeed::Replicated kTimedOut =
    ReplicationFeed::Replicated::kTimedOut;
constexpr ReplicationFeed::Replicated kTooFewInSync =
    ReplicationFeed::Replicated::kTooFewInSync;

TEST(ReplicationFeedTest, KeepsEntriesOnlyForFollowers) {
  ReplicationFeed feed;
  EXPECT_EQ(feed.AppendPush("t", "a"), 1u);
  EXPECT_EQ(feed.GetStats().entries_kept, 0u);
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  EXPECT_EQ(start, 1u);
  feed.AppendPush("t", "b");
  feed.AppendPush("t", "c");
  EXPECT_EQ(feed.GetStats().entries_kept, 2u);
  EXPECT_EQ(feed.GetStats().applied, 1u);

  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(follower, start, 1, absl::ZeroDuration(), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sequence(), 2u);
  EXPECT_EQ(out[0].record(), "b");
  // Saying entry 2 is applied lets the feed forget it.
  ASSERT_OK(feed.Read(follower, 2, 10, absl::ZeroDuration(), &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].record(), "c");
  EXPECT_EQ(feed.GetStats().entries_kept, 1u);
  EXPECT_EQ(feed.Read(follower, 9, 10, absl::ZeroDuration(), &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(feed.Read(follower + 1, 2, 10, absl::ZeroDuration(), &out).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReplicationFeedTest, AReadStaysWithinItsBytesButTakesAtLeastOne) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  for (int i = 0; i < 3; ++i) feed.AppendPush("t", std::string(1000, 'a' + i));
  std::vector<std::vector<FeedEntry>> reads;
  uint64_t applied = start;
  while (applied < feed.head()) {
    absl::Notification answered;
    feed.WhenReadable(follower, applied, 10, 1500, absl::Now(),
                      [&](absl::Status status, std::vector<FeedEntry> entries) {
                        EXPECT_OK(status);
                        reads.push_back(std::move(entries));
                        answered.Notify();
                      });
    answered.WaitForNotification();
    ASSERT_FALSE(reads.back().empty());
    applied = reads.back().back().sequence();
  }
  ASSERT_EQ(reads.size(), 3u);  // 2000 bytes would pass 1500
  EXPECT_EQ(reads[2][0].record(), std::string(1000, 'c'));
  // Handed everything up to the head: in sync.
  EXPECT_EQ(feed.GetStats().in_sync, 1u);
}

TEST(ReplicationFeedTest, AReadWaitsForTheNextEntry) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  std::thread appender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    feed.AppendPush("t", "late");
  });
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(follower, start, 10, absl::Seconds(30), &out));
  appender.join();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].record(), "late");
}

TEST(ReplicationFeedTest, AFollowerCatchingUpHoldsNoPushBack) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  const uint64_t first = feed.AppendPush("t", "a");
  EXPECT_EQ(kTooFewInSync,
            feed.WaitReplicated(first, true, 0, kNoBound, absl::Now()));
  EXPECT_EQ(feed.GetStats().in_sync, 0u);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(follower, first, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.GetStats().in_sync, 1u);
  const uint64_t second = feed.AppendPush("t", "b");
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(second, true, 0, kNoBound,
                                absl::Now() + absl::Milliseconds(20)));
}

TEST(ReplicationFeedTest, AFollowerTooFarBehindIsDroppedNotWaitedFor) {
  ReplicationFeedOptions options;
  options.max_bytes_kept = 64 << 10;
  ReplicationFeed feed(options);
  uint64_t start = 0;
  // A replica in sync, and one that copies (registered at the cut, reading
  // nothing until its copy is done).
  const uint64_t in_sync = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(in_sync, start, 10, absl::ZeroDuration(), &out));
  const uint64_t copying = feed.AddFollower(&start);
  // The copy falls 20 entries behind: pushes do not wait for it, under a
  // lag bound of 10 entries, while the one in sync keeps up.
  uint64_t sequence = 0;
  for (int i = 0; i < 20; ++i) {
    sequence = feed.AppendPush("t", std::string(1000, 'a'));
    ASSERT_OK(feed.Read(in_sync, sequence - 1, 10, absl::ZeroDuration(), &out));
    // The copy keeps its place as it reads its files: no entries.
    ASSERT_OK(feed.Read(copying, start, 0, absl::ZeroDuration(), &out));
  }
  EXPECT_EQ(kYes, feed.WaitReplicated(sequence, /*sync=*/false, 0,
                                      /*max_lag=*/10, absl::Now()));
  EXPECT_TRUE(feed.HasFollower(copying));
  EXPECT_GT(feed.GetStats().bytes_kept, 20u * 1000);
  // Past 64 KiB kept for it, it is dropped (it must copy again), and what
  // was kept for it is let go.
  for (int i = 0; i < 60; ++i) {
    sequence = feed.AppendPush("t", std::string(1000, 'b'));
    ASSERT_OK(feed.Read(in_sync, sequence - 1, 10, absl::ZeroDuration(), &out));
  }
  EXPECT_FALSE(feed.HasFollower(copying));
  EXPECT_TRUE(feed.HasFollower(in_sync));
  const ReplicationFeed::Stats stats = feed.GetStats();
  EXPECT_EQ(stats.followers_dropped_behind, 1u);
  EXPECT_LT(stats.bytes_kept, 4000u);
  EXPECT_EQ(feed.Read(copying, start, 10, absl::ZeroDuration(), &out).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReplicationFeedTest, ACopyKeepingItsPlaceIsNotInSync) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t copying = feed.AddFollower(&start);
  // At the head, keeping its place as it reads its files: not in sync, and
  // no sync push waits for it.
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(copying, start, 0, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.GetStats().in_sync, 0u);
  const uint64_t sequence = feed.AppendPush("t", "a");
  ASSERT_OK(feed.Read(copying, start, 0, absl::ZeroDuration(), &out));
  EXPECT_EQ(kTooFewInSync,
            feed.WaitReplicated(sequence, true, 0, kNoBound, absl::Now()));
  // Once it reads the feed, it catches up and is in sync.
  ASSERT_OK(feed.Read(copying, start, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.GetStats().in_sync, 1u);
}

TEST(ReplicationFeedTest, AReplicaReadingIsWaitedForPastTheBytesNotDropped) {
  ReplicationFeedOptions options;
  options.max_bytes_kept = 16 << 10;
  ReplicationFeed feed(options);
  uint64_t start = 0;
  const uint64_t reader = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(reader, start, 10, absl::ZeroDuration(), &out));
  uint64_t sequence = 0;
  for (int i = 0; i < 40; ++i)
    sequence = feed.AppendPush("t", std::string(1000, 'a'));
  EXPECT_TRUE(feed.HasFollower(reader));
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(sequence, false, 0, kNoBound, absl::Now()));
  // Caught up: the bytes go, and pushes with them.
  ASSERT_OK(feed.Read(reader, sequence, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(kYes,
            feed.WaitReplicated(sequence, false, 0, kNoBound, absl::Now()));
  EXPECT_EQ(feed.GetStats().followers_dropped_behind, 0u);
}

// Past the bytes, a copy is dropped only when that frees some: one ahead
// of a reader that holds the entries (a reader behind is waited for, not
// dropped) stays, and one behind the reader goes.
TEST(ReplicationFeedTest, ACopyIsDroppedOnlyWhenThatFreesBytes) {
  ReplicationFeedOptions options;
  options.max_bytes_kept = 16 << 10;
  ReplicationFeed feed(options);
  uint64_t start = 0;
  const uint64_t behind_copy = feed.AddFollower(&start);
  const uint64_t reader = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(reader, start, 10, absl::ZeroDuration(), &out));
  // The reader applies five entries the copy cut before them still holds.
  uint64_t sequence = 0;
  for (int i = 0; i < 5; ++i)
    sequence = feed.AppendPush("t", std::string(1000, 'a'));
  ASSERT_OK(feed.Read(reader, sequence, 10, absl::ZeroDuration(), &out));
  for (int i = 0; i < 10; ++i) feed.AppendPush("t", std::string(1000, 'a'));
  // A copy cut now, ahead of everything the reader holds.
  const uint64_t ahead_copy = feed.AddFollower(&start);
  for (int i = 0; i < 30; ++i) feed.AppendPush("t", std::string(1000, 'a'));
  EXPECT_FALSE(feed.HasFollower(behind_copy));
  EXPECT_TRUE(feed.HasFollower(reader));
  EXPECT_TRUE(feed.HasFollower(ahead_copy));
  EXPECT_EQ(feed.GetStats().followers_dropped_behind, 1u);
}

TEST(ReplicationFeedTest, FewerFollowersInSyncThanTheLeastAreSaidSo) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(follower, start, 10, absl::ZeroDuration(), &out));
  const uint64_t sequence = feed.AppendPush("t", "a");
  // Not applied yet: waited for, whatever the least.
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(sequence, true, 2, kNoBound, absl::Now()));
  ASSERT_OK(feed.Read(follower, sequence, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(kYes,
            feed.WaitReplicated(sequence, true, 1, kNoBound, absl::Now()));
  EXPECT_EQ(kTooFewInSync,
            feed.WaitReplicated(sequence, true, 2, kNoBound, absl::Now()));
  // Async waits for nobody in sync.
  EXPECT_EQ(kYes,
            feed.WaitReplicated(sequence, false, 2, kNoBound, absl::Now()));
}

TEST(ReplicationFeedTest, ARecordedFollowerHoldsPushesBackUntilUnrecorded) {
  ReplicationFeedOptions options;
  options.follower_timeout = absl::Milliseconds(300);
  ReplicationFeed feed(options);
  uint64_t start = 0;
  const uint64_t kept = feed.AddFollower(&start);
  const uint64_t dropped = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(kept, start, 10, absl::ZeroDuration(), &out));
  ASSERT_OK(feed.Read(dropped, start, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.InSyncFollowers(), std::vector<uint64_t>({kept, dropped}));
  feed.SetRecordedInSync({kept, dropped});
  // `dropped` stops reading and times out; `kept` reads on, and applies a
  // new entry.
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK(feed.Read(kept, start, 10, absl::ZeroDuration(), &out));
  }
  const uint64_t sequence = feed.AppendPush("t", "a");
  ASSERT_OK(feed.Read(kept, start, 10, absl::ZeroDuration(), &out));
  ASSERT_OK(feed.Read(kept, sequence, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.InSyncFollowers(), std::vector<uint64_t>({kept}));
  // Still recorded: the push waits for it.
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(sequence, true, 1, kNoBound,
                                absl::Now() + absl::Milliseconds(50)));
  // Once the record no longer names it, the push is answered (a waiter
  // too).
  std::thread recorder([&] {
    absl::SleepFor(absl::Milliseconds(50));
    feed.SetRecordedInSync({kept});
  });
  EXPECT_EQ(kYes, feed.WaitReplicated(sequence, true, 1, kNoBound,
                                      absl::Now() + absl::Seconds(30)));
  recorder.join();
}

// While a record that adds a follower is being written, the follower holds
// pushes back (either record may be the one etcd keeps) but does not count
// as in sync: a promotion may not take it until the record names it.
TEST(ReplicationFeedTest, AFollowerCountsInSyncOnlyOnceRecorded) {
  ReplicationFeed feed(ReplicationFeedOptions{});
  uint64_t start = 0;
  const uint64_t old_follower = feed.AddFollower(&start);
  std::vector<FeedEntry> out;
  ASSERT_OK(feed.Read(old_follower, start, 10, absl::ZeroDuration(), &out));
  feed.SetRecordedInSync({old_follower});
  const uint64_t joining = feed.AddFollower(&start);
  ASSERT_OK(feed.Read(joining, start, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(feed.GetStats().in_sync, 1u);
  // The record naming both is being written: both hold pushes back, the
  // one it adds does not count yet.
  feed.SetRecordedInSync({old_follower, joining},
                         std::vector<uint64_t>{old_follower});
  EXPECT_EQ(feed.GetStats().in_sync, 1u);
  const uint64_t sequence = feed.AppendPush("t", "a");
  ASSERT_OK(feed.Read(old_follower, sequence, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(sequence, true, 1, kNoBound,
                                absl::Now() + absl::Milliseconds(50)));
  ASSERT_OK(feed.Read(joining, sequence, 10, absl::ZeroDuration(), &out));
  EXPECT_EQ(kYes, feed.WaitReplicated(sequence, true, 1, kNoBound,
                                      absl::Now() + absl::Seconds(30)));
  // Written: it counts.
  feed.SetRecordedInSync({old_follower, joining});
  EXPECT_EQ(feed.GetStats().in_sync, 2u);
}

TEST(ReplicationFeedTest, WaitAppliedEndsWhenTheFollowerAppliesOrGoes) {
  ReplicationFeedOptions options;
  options.follower_timeout = absl::Milliseconds(300);
  ReplicationFeed feed(options);
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  // Not in sync until it has read everything once.
  std::vector<FeedEntry> caught_up;
  ASSERT_OK(feed.Read(follower, start, 10, absl::ZeroDuration(), &caught_up));
  const uint64_t sequence = feed.AppendPush("t", "x");
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(sequence, true, 0, kNoBound,
                                absl::Now() + absl::Milliseconds(20)));
  EXPECT_EQ(kTimedOut,
            feed.WaitReplicated(0, false, 0, 0,
                                absl::Now() + absl::Milliseconds(20)));
  EXPECT_EQ(kYes, feed.WaitReplicated(0, false, 0, 1, absl::Now()));
  std::thread follower_thread([&] {
    std::vector<FeedEntry> out;
    EXPECT_OK(feed.Read(follower, sequence, 10, absl::ZeroDuration(), &out));
  });
  EXPECT_EQ(kYes, feed.WaitReplicated(sequence, true, 0, kNoBound,
                                      absl::Now() + absl::Seconds(30)));
  follower_thread.join();

  // A follower that stops reading is dropped after the timeout, and no
  // longer holds anything back.
  const uint64_t next = feed.AppendPush("t", "y");
  EXPECT_EQ(kTooFewInSync,
            feed.WaitReplicated(next, true, 0, kNoBound,
                                absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(feed.GetStats().followers, 0u);
  EXPECT_EQ(feed.GetStats().entries_kept, 0u);
  std::vector<FeedEntry> out;
  EXPECT_EQ(feed.Read(follower, next, 10, absl::ZeroDuration(), &out).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReplicationFeedTest, WaitsAreAnsweredOnceWithoutHoldingTheCaller) {
  ReplicationFeed feed;
  uint64_t start = 0;
  const uint64_t follower = feed.AddFollower(&start);
  std::vector<FeedEntry> caught_up;
  ASSERT_OK(feed.Read(follower, start, 10, absl::ZeroDuration(), &caught_up));
  const uint64_t sequence = feed.AppendPush("t", "x");
  std::atomic<int> replicated{0}, read{0};
  // Both return at once; their answers come later, on the feed's thread.
  feed.WhenReplicated(sequence, true, 0, kNoBound, absl::InfiniteFuture(),
                      [&](ReplicationFeed::Replicated done) {
                        replicated += done == kYes ? 1 : 100;
                      });
  feed.WhenReadable(follower, sequence, 10, 1 << 20, absl::InfiniteFuture(),
                    [&](absl::Status status, std::vector<FeedEntry> entries) {
                      EXPECT_OK(status);
                      EXPECT_EQ(entries.size(), 1u);
                      ++read;
                    });
  EXPECT_EQ(replicated.load(), 0);
  EXPECT_EQ(read.load(), 0);
  feed.AppendPush("t", "y");
  while (read.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(replicated.load(), 1);  // the read acknowledged `sequence`
  // CancelWaits() answers what is pending, not replicated, once its time
  // comes.
  const uint64_t last = feed.AppendPush("t", "z");
  feed.WhenReplicated(last, true, 0, kNoBound, absl::InfiniteFuture(),
                      [&](ReplicationFeed::Replicated done) {
                        replicated += done == kYes ? 1 : 100;
                      });
  feed.CancelWaits(absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(replicated.load(), 1);
  while (replicated.load() == 1) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(replicated.load(), 101);
}

}  // namespace
}  // namespace ps::embedding
