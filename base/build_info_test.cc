#include "base/build_info.h"

#include <cctype>
#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(BuildInfoTest, TheStampNamesACommitAndATime) {
  // Built from a git checkout (as every build of this repository is): 12
  // hex digits, "-dirty" after them for uncommitted changes.
  const std::string commit(BuildCommit());
  ASSERT_GE(commit.size(), 12u) << commit;
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(std::isxdigit(commit[i])) << commit;
  EXPECT_TRUE(commit.size() == 12 || commit.substr(12) == "-dirty") << commit;
  const std::string time(BuildTime());
  ASSERT_EQ(time.size(), 20u) << time;  // 2026-12-01T18:55:00Z
  EXPECT_EQ(time[4], '-');
  EXPECT_EQ(time[10], 'T');
  EXPECT_EQ(time.back(), 'Z');
  EXPECT_EQ(VersionLine("ps_worker"),
            "ps_worker " + commit + " (built " + time + ")");
}

}  // namespace
}  // namespace ps
