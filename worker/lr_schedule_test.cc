#include "worker/lr_schedule.h"

#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

float ScaleAt(absl::string_view text, int64_t step) {
  auto schedule = LearningRateSchedule::Parse(text);
  EXPECT_OK(schedule);
  return schedule.ok() ? schedule->Scale(step) : -1.0f;
}

TEST(LearningRateScheduleTest, ConstantIsOne) {
  EXPECT_EQ(ScaleAt("", 0), 1.0f);
  EXPECT_EQ(ScaleAt("constant", 12345), 1.0f);
}

TEST(LearningRateScheduleTest, WarmupRampsThenDecays) {
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4", 0), 0.25f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4", 2), 0.75f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4", 3), 1.0f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4", 100), 1.0f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4,exponential:10", 14), 0.5f);
  EXPECT_FLOAT_EQ(ScaleAt("exponential:10", 20), 0.25f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:4,inverse_sqrt", 16), 0.5f);
  EXPECT_FLOAT_EQ(ScaleAt("cosine:100", 0), 1.0f);
  EXPECT_FLOAT_EQ(ScaleAt("cosine:100", 50), 0.5f);
  EXPECT_FLOAT_EQ(ScaleAt("warmup:10, cosine:100", 60), 0.5f);
  // Never zero: the last steps still learn a little.
  EXPECT_GT(ScaleAt("cosine:100", 100), 0.0f);
  EXPECT_GT(ScaleAt("cosine:100", 5000), 0.0f);
  EXPECT_LT(ScaleAt("cosine:100", 99), 0.01f);
}

TEST(LearningRateScheduleTest, BadSchedulesNameTheFlag) {
  for (const char* text :
       {"warmup", "warmup:0", "warmup:-3", "cosine", "exponential:x",
        "linear:5", "exponential:5,cosine:9", "inverse_sqrt", "constant:3"}) {
    auto schedule = LearningRateSchedule::Parse(text);
    EXPECT_THAT(schedule, StatusIs(absl::StatusCode::kInvalidArgument)) << text;
    EXPECT_NE(schedule.status().message().find("--lr_schedule"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ps::worker
