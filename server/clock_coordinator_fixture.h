// File: server/clock_coordinator_fixture.h
//
// What clock_coordinator_test and clock_coordinator_cut_test share: a
// coordinator opened with a state file or none, and the calls workers make.

#ifndef PS_SERVER_CLOCK_COORDINATOR_FIXTURE_H_
#define PS_SERVER_CLOCK_COORDINATOR_FIXTURE_H_

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"
#include "server/clock_coordinator.h"

namespace ps::server {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ClockCoordinatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClockCoordinator> Open(const std::string& state_path = "",
                                         size_t max_workers = 4096,
                                         bool elected = false) {
    CoordinatorOptions options;
    options.state_path = state_path;
    options.max_workers = max_workers;
    options.elected = elected;
    options.now = [this] { return now_; };
    options.monotonic_now = [this] { return monotonic_; };
    auto coordinator = ClockCoordinator::Open(options);
    EXPECT_OK(coordinator);
    return std::move(coordinator).value();
  }

  // Reports for `worker` (incarnation 1 unless told) and returns the view.
  ClockCoordinator::View Report(uint32_t worker, int64_t clock,
                                bool finished = false,
                                uint64_t incarnation = 1) {
    ClockCoordinator::Report report;
    report.worker = worker;
    report.incarnation = incarnation;
    report.clock = clock;
    report.finished = finished;
    report.lease = lease_;
    auto view = coordinator_->Record(report);
    EXPECT_OK(view);
    return view.ok() ? *view : ClockCoordinator::View();
  }

  // A report of `worker` (incarnation 1) at `clock` that says it is idle.
  ClockCoordinator::Report IdleReport(uint32_t worker, int64_t clock) const {
    ClockCoordinator::Report report;
    report.worker = worker;
    report.incarnation = 1;
    report.clock = clock;
    report.lease = lease_;
    report.idle = true;
    return report;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  // Stays put while the process runs (the gaps between calls are short);
  // a test that stops the process moves it with now_.
  absl::Time monotonic_ = absl::FromUnixSeconds(50);
  const absl::Duration lease_ = absl::Seconds(5);
  std::unique_ptr<ClockCoordinator> coordinator_ = Open();
};

}  // namespace ps::server

#endif  // PS_SERVER_CLOCK_COORDINATOR_FIXTURE_H_
