#include "worker/training_summary.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace ps::worker {

namespace {

using Json = nlohmann::ordered_json;

// `value` rounded to `decimals` decimals, the digits a reader compares. A NaN
// or an infinity stays one (and is written as null); a value too large for
// decimals to matter stays as it is.
double Rounded(double value, int decimals) {
  if (!std::isfinite(value) || std::abs(value) >= 1e15) return value;
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

// `json` as text, indented by `indent` (-1: on one line, no spaces). Invalid
// UTF-8 in a string becomes U+FFFD rather than an exception.
std::string Dump(const Json& json, int indent = -1) {
  return json.dump(indent, ' ', /*ensure_ascii=*/false,
                   Json::error_handler_t::replace);
}

// A flat `object` on one line with the summary's spacing, `{"key": value,
// ...}`, so that one grep reads both; the library writes each key and value.
std::string OneLine(const Json& object) {
  std::vector<std::string> fields;
  for (const auto& [key, value] : object.items())
    fields.push_back(absl::StrCat(Dump(Json(key)), ": ", Dump(value)));
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

// A model of several tasks' figures, one object per task.
Json TasksJson(const std::vector<TaskMetrics>& tasks, const char* prefix) {
  Json array = Json::array();
  for (const TaskMetrics& task : tasks) {
    array.push_back(
        {{"task", task.task},
         {absl::StrCat(prefix, "auc"), Rounded(task.auc, 6)},
         {absl::StrCat(prefix, "logloss"), Rounded(task.logloss, 6)},
         {absl::StrCat(prefix, "examples"), task.examples}});
  }
  return array;
}

}  // namespace

std::string SummaryToJson(const TrainingSummary& s) {
  Json json = {
      {"examples", s.examples},
      {"steps", s.steps},
      {"train_seconds", Rounded(s.train_seconds, 3)},
      {"examples_per_sec", Rounded(s.examples_per_sec, 1)},
      {"final_train_loss", Rounded(s.final_train_loss, 6)},
      {"test_auc", Rounded(s.test_auc, 6)},
      {"test_logloss", Rounded(s.test_logloss, 6)},
      {"test_examples", s.test_examples},
      {"bad_lines", s.bad_lines},
      {"max_staleness_seen", s.max_staleness_seen},
      {"staleness_histogram", s.staleness_histogram},
      {"waits", s.waits},
      {"wait_seconds", Rounded(s.wait_seconds, 3)},
      {"pull_seconds", Rounded(s.pull_seconds, 3)},
      {"compute_seconds", Rounded(s.compute_seconds, 3)},
      {"push_seconds", Rounded(s.push_seconds, 3)},
      {"replay_seconds", Rounded(s.replay_seconds, 3)},
      {"replayed_steps", s.replayed_steps},
      {"first_step", s.first_step},
      {"cut_hold_seconds", Rounded(s.cut_hold_seconds, 3)},
      {"checkpoints", s.checkpoints},
      {"failed_checkpoints", s.failed_checkpoints},
      {"scaled_pushes", s.scaled_pushes},
      {"compensated_pushes", s.compensated_pushes},
      {"backend", s.backend},
      {"drained", s.drained},
  };
  if (s.test_tasks.size() > 1) json["tasks"] = TasksJson(s.test_tasks, "test_");
  if (!s.followed_files.empty() || s.late_files > 0) {
    Json files = Json::array();
    for (const TrainingSummary::FollowedFile& file : s.followed_files) {
      Json followed = {{"file", file.file},
                       {"examples", file.examples},
                       {"progressive_auc", Rounded(file.auc, 6)},
                       {"progressive_logloss", Rounded(file.logloss, 6)}};
      if (file.tasks.size() > 1)
        followed["tasks"] = TasksJson(file.tasks, "progressive_");
      files.push_back(std::move(followed));
    }
    json["followed_files"] = files;
    json["late_files"] = s.late_files;
    if (!s.followed_files.empty()) {
      json["last_file_progressive_auc"] =
          Rounded(s.followed_files.back().auc, 6);
    }
  }
  return Dump(json, 2) + "\n";
}

std::string IntervalToJson(const IntervalMetrics& interval) {
  Json json = {
      {"worker", interval.worker},
      {"examples", interval.examples},
      {"seconds", Rounded(interval.seconds, 3)},
      {"examples_per_sec", Rounded(interval.examples_per_sec, 1)},
      {"loss", Rounded(interval.loss, 6)},
      {"train_auc", Rounded(interval.train_auc, 6)},
      {"max_staleness", interval.max_staleness},
  };
  if (interval.test_auc.has_value())
    json["test_auc"] = Rounded(*interval.test_auc, 6);
  if (interval.train_tasks.size() > 1) {
    Json tasks = Json::array();
    for (size_t t = 0; t < interval.train_tasks.size(); ++t) {
      Json task = {{"task", interval.train_tasks[t].task},
                   {"train_auc", Rounded(interval.train_tasks[t].auc, 6)}};
      if (t < interval.test_tasks.size()) {
        task["test_auc"] = Rounded(interval.test_tasks[t].auc, 6);
        task["test_logloss"] = Rounded(interval.test_tasks[t].logloss, 6);
      }
      tasks.push_back(std::move(task));
    }
    json["tasks"] = std::move(tasks);
  }
  return OneLine(json) + "\n";
}

}  // namespace ps::worker
