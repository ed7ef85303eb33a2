#include "worker/training_summary.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ps::worker {
namespace {

// `text` parsed, or a discarded value when it is not JSON (no exceptions).
nlohmann::json Parse(const std::string& text) {
  return nlohmann::json::parse(text, /*cb=*/nullptr,
                               /*allow_exceptions=*/false);
}

TrainingSummary ASummary() {
  TrainingSummary summary;
  summary.examples = 20000;
  summary.steps = 20;
  summary.train_seconds = 1.23456;
  summary.examples_per_sec = 16200.44;
  summary.final_train_loss = 0.4567891;
  summary.test_auc = 0.78123456;
  summary.test_logloss = 0.5;
  summary.staleness_histogram = {18, 2};
  summary.backend = "cpu (fp32)";
  return summary;
}

TEST(SummaryToJsonTest, WritesNanAndInfinityAsNull) {
  TrainingSummary summary = ASummary();
  summary.test_auc = std::nan("");
  summary.final_train_loss = std::numeric_limits<double>::infinity();
  summary.test_logloss = -std::numeric_limits<double>::infinity();
  const std::string text = SummaryToJson(summary);
  const nlohmann::json json = Parse(text);
  ASSERT_FALSE(json.is_discarded()) << text;
  EXPECT_TRUE(json["test_auc"].is_null()) << text;
  EXPECT_TRUE(json["final_train_loss"].is_null()) << text;
  EXPECT_TRUE(json["test_logloss"].is_null()) << text;
  EXPECT_EQ(json["examples"], 20000);
}

TEST(SummaryToJsonTest, KeepsTheKeysAndTheSpacingScriptsGrep) {
  const std::string text = SummaryToJson(ASummary());
  const nlohmann::json json = Parse(text);
  ASSERT_FALSE(json.is_discarded()) << text;
  // tests/test_files.h's Metric() and the scripts' greps read `"key": value`.
  EXPECT_NE(text.find("\"examples\": 20000,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"test_auc\": 0.781235,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"train_seconds\": 1.235,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"examples_per_sec\": 16200.4,"), std::string::npos)
      << text;
  EXPECT_EQ(json["staleness_histogram"], nlohmann::json::array({18, 2}));
  EXPECT_EQ(json["backend"], "cpu (fp32)");
  EXPECT_EQ(json.size(), 26u) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(SummaryToJsonTest, SeveralTasksAddTheirOwnFiguresUnderTasks) {
  TrainingSummary summary = ASummary();
  // One task: no "tasks" key (the summary of a one-label model).
  summary.test_tasks = {{"label", 100, 0.7, 0.5}};
  EXPECT_FALSE(Parse(SummaryToJson(summary)).contains("tasks"));
  summary.test_tasks = {{"ctr", 100, 0.78123456, 0.5}, {"cvr", 40, 0.9, 0.1}};
  TrainingSummary::FollowedFile file;
  file.file = "day1.tsv";
  file.tasks = summary.test_tasks;
  summary.followed_files.push_back(file);
  const std::string text = SummaryToJson(summary);
  const nlohmann::json json = Parse(text);
  ASSERT_FALSE(json.is_discarded()) << text;
  ASSERT_EQ(json["tasks"].size(), 2u) << text;
  EXPECT_EQ(json["tasks"][1]["task"], "cvr");
  EXPECT_EQ(json["tasks"][1]["test_auc"], 0.9);
  EXPECT_EQ(json["tasks"][1]["test_logloss"], 0.1);
  EXPECT_EQ(json["tasks"][1]["test_examples"], 40);
  EXPECT_EQ(json["tasks"][0]["test_auc"], 0.781235);
  EXPECT_EQ(json["followed_files"][0]["tasks"][1]["progressive_auc"], 0.9);
}

IntervalMetrics AnInterval() {
  IntervalMetrics interval;
  interval.worker = 3;
  interval.examples = 4096;
  interval.seconds = 2.5;
  interval.examples_per_sec = 1638.4;
  interval.loss = 0.51;
  interval.train_auc = 0.7;
  interval.max_staleness = 2;
  return interval;
}

TEST(IntervalToJsonTest, IsOneLineThatStartsWithTheWorker) {
  const std::string line = IntervalToJson(AnInterval());
  ASSERT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_EQ(line.rfind("{\"worker\": 3, \"examples\": 4096, ", 0), 0u) << line;
  const nlohmann::json json = Parse(line);
  ASSERT_FALSE(json.is_discarded()) << line;
  EXPECT_EQ(json["loss"], 0.51);
  EXPECT_EQ(json["max_staleness"], 2);
  // No evaluation ended the interval: no test_auc.
  EXPECT_FALSE(json.contains("test_auc")) << line;
}

TEST(IntervalToJsonTest, WritesADivergedLossAsNull) {
  IntervalMetrics interval = AnInterval();
  interval.loss = std::nan("");
  interval.train_auc = std::numeric_limits<double>::infinity();
  interval.test_auc = std::nan("");
  const std::string line = IntervalToJson(interval);
  const nlohmann::json json = Parse(line);
  ASSERT_FALSE(json.is_discarded()) << line;
  EXPECT_TRUE(json["loss"].is_null()) << line;
  EXPECT_TRUE(json["train_auc"].is_null()) << line;
  ASSERT_TRUE(json.contains("test_auc")) << line;
  EXPECT_TRUE(json["test_auc"].is_null()) << line;
}

}  // namespace
}  // namespace ps::worker
