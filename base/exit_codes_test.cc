#include "base/exit_codes.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ExitCodesTest, AStatusGivesItsExitCode) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitDone);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("down")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("slow")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("bug")), kExitFailed);
}

TEST(ExitCodesTest, AMainSaysWhyWithItsNameAndReturnsTheCode) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(FailUsage("ps_thing", "--x must be positive"), kExitUsage);
  EXPECT_EQ(FailWith("ps_thing", absl::UnavailableError("shard 1 is down")),
            kExitUnavailable);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "ps_thing: --x must be positive\n"
            "ps_thing: UNAVAILABLE: shard 1 is down\n");
}

}  // namespace
}  // namespace ps
