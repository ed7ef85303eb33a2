#include "embedding/dropped_row_log.h"

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::embedding {
namespace {

using ::testing::ElementsAre;

TEST(DroppedRowLogTest, ListsATablesKeysDroppedSinceATime) {
  DroppedRowLog log(100, 1000);
  log.Record(1, 11, 1000);
  log.Record(2, 21, 1001);
  log.Record(1, 12, 1002);
  log.Record(1, 13, 1005);
  auto since_1001 = log.DroppedSince(1, 1001);
  ASSERT_TRUE(since_1001.ok()) << since_1001.status();
  EXPECT_THAT(*since_1001, ElementsAre(12, 13));
  auto all = log.DroppedSince(1, 1000);
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, ElementsAre(11, 12, 13));
  auto other = log.DroppedSince(2, 1000);
  ASSERT_TRUE(other.ok());
  EXPECT_THAT(*other, ElementsAre(21));
  auto none = log.DroppedSince(1, 1006);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(DroppedRowLogTest, RefusesATimeBeforeItIsComplete) {
  DroppedRowLog log(100, 1000);
  EXPECT_THAT(log.DroppedSince(1, 999).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(log.DroppedSince(1, 1000).ok());
}

TEST(DroppedRowLogTest, PastItsBoundTheOldestGoAndItIsCompleteOnlyAfterThem) {
  DroppedRowLog log(2, 1000);
  log.Record(1, 11, 1000);
  log.Record(1, 12, 1003);
  log.Record(1, 13, 1007);  // 11 goes: complete from 1001
  EXPECT_EQ(log.size(), 2u);
  EXPECT_EQ(log.complete_since_s(), 1001u);
  EXPECT_THAT(log.DroppedSince(1, 1000).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto since = log.DroppedSince(1, 1001);
  ASSERT_TRUE(since.ok());
  EXPECT_THAT(*since, ElementsAre(12, 13));
  log.Record(1, 14, 1008);  // 12 goes: complete from 1004
  EXPECT_EQ(log.complete_since_s(), 1004u);
  EXPECT_FALSE(log.DroppedSince(1, 1003).ok());
}

}  // namespace
}  // namespace ps::embedding
