#include "worker/progress_reporter.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ps::worker {
namespace {

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return lines;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(ProgressReporterTest, EachIntervalIsOneJsonLineOfItsOwnSteps) {
  ProgressOptions options;
  options.worker = 3;
  options.every = absl::Seconds(2);
  options.interval_metrics_out = TempPath("intervals.jsonl");
  const absl::Time start = absl::FromUnixSeconds(1000);
  {
    ProgressReporter progress(options, start);
    EXPECT_FALSE(progress.HasSteps());
    // Two steps of 2 examples, ranked perfectly: AUC 1, loss 0.5 a example.
    progress.AddStep(2, 1.0, {0.9f, 0.1f}, {1.0f, 0.0f});
    progress.AddStep(2, 1.0, {0.8f, 0.2f}, {1.0f, 0.0f});
    EXPECT_TRUE(progress.HasSteps());
    EXPECT_FALSE(progress.Due(start + absl::Seconds(1)));
    EXPECT_TRUE(progress.Due(start + absl::Seconds(2)));
    ProgressContext context;
    context.examples = 4;
    context.max_staleness = 1;
    progress.Report(start + absl::Seconds(2), context);
    EXPECT_FALSE(progress.HasSteps());
    EXPECT_DOUBLE_EQ(progress.last_loss(), 0.5);
    // The next interval starts afresh: ranked backwards, AUC 0.
    progress.AddStep(2, 3.0, {0.1f, 0.9f}, {1.0f, 0.0f});
    context.examples = 6;
    context.test = {{"label", 10, 0.75, 0.4}};
    EXPECT_FALSE(progress.Due(start + absl::Seconds(3)));
    progress.Report(start + absl::Seconds(3), context);
    EXPECT_DOUBLE_EQ(progress.last_loss(), 1.5);
  }
  const std::vector<nlohmann::json> lines =
      ReadLines(options.interval_metrics_out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["worker"], 3);
  EXPECT_EQ(lines[0]["examples"], 4);
  EXPECT_EQ(lines[0]["seconds"], 2.0);
  EXPECT_EQ(lines[0]["examples_per_sec"], 2.0);
  EXPECT_EQ(lines[0]["loss"], 0.5);
  EXPECT_EQ(lines[0]["train_auc"], 1.0);
  EXPECT_EQ(lines[0]["max_staleness"], 1);
  EXPECT_FALSE(lines[0].contains("test_auc"));
  EXPECT_EQ(lines[1]["examples"], 6);
  EXPECT_EQ(lines[1]["seconds"], 3.0);
  EXPECT_EQ(lines[1]["examples_per_sec"], 2.0);
  EXPECT_EQ(lines[1]["train_auc"], 0.0);
  EXPECT_EQ(lines[1]["test_auc"], 0.75);
}

TEST(ProgressReporterTest, SeveralTasksEachHaveTheirAucs) {
  ProgressOptions options;
  options.tasks = {"ctr", "cvr"};
  options.interval_metrics_out = TempPath("tasks.jsonl");
  const absl::Time start = absl::FromUnixSeconds(1000);
  {
    ProgressReporter progress(options, start);
    // Three examples, task-major: ctr ranks them right, cvr backwards on the
    // two it knows (the third's label, unknown, would make it right).
    progress.AddStep(3, 2.0, {0.9f, 0.1f, 0.5f, 0.2f, 0.8f, 0.1f},
                     {1, 0, 0, 1, 0, 0}, {1, 1, 1, 1, 1, 0});
    ProgressContext context;
    context.examples = 3;
    context.test = {{"ctr", 3, 0.7, 0.5}, {"cvr", 2, 0.6, 0.3}};
    progress.Report(start + absl::Seconds(1), context);
  }
  const std::vector<nlohmann::json> lines =
      ReadLines(options.interval_metrics_out);
  ASSERT_EQ(lines.size(), 1u);
  // The first task's figures where a model of one task has its own.
  EXPECT_EQ(lines[0]["train_auc"], 1.0);
  EXPECT_EQ(lines[0]["test_auc"], 0.7);
  ASSERT_EQ(lines[0]["tasks"].size(), 2u);
  EXPECT_EQ(lines[0]["tasks"][1]["task"], "cvr");
  EXPECT_EQ(lines[0]["tasks"][1]["train_auc"], 0.0);
  EXPECT_EQ(lines[0]["tasks"][1]["test_auc"], 0.6);
  EXPECT_EQ(lines[0]["tasks"][1]["test_logloss"], 0.3);
}

}  // namespace
}  // namespace ps::worker
