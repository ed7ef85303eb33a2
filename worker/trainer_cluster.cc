// Trainer's part in the cluster: its clock reports to the coordinator
// (progress, the answers it records for a retried report, cuts it holds
// for), waiting for the other workers, and joining the job.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/heartbeat.h"
#include "worker/progress_reporter.h"
#include "worker/staleness_gate.h"
#include "worker/trainer.h"

namespace ps::worker {

void Trainer::SetProgress(ClockRequest* request) {
  // The clock, examples and position a push moved together.
  absl::MutexLock lock(&position_mu_);
  request->set_clock(clock_.value());
  request->set_examples(examples_.load());
  if (!position_.file.empty()) {
    request->mutable_input_position()->set_file(position_.file);
    request->mutable_input_position()->set_file_examples(
        position_.file_examples);
  }
}

absl::Status Trainer::ReportClock(bool finished, ClockResponse* response,
                                  absl::Duration retry_for, bool leaving) {
  ClockRequest request;
  request.set_worker(worker_index_);
  request.set_incarnation(client_->incarnation());
  request.set_finished(finished);
  request.set_leaving(leaving);
  request.set_lease_ms(static_cast<uint32_t>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.lease))));
  // The clock is read with the report's place in the order of reports, so
  // that a later report never carries an earlier clock. An idle report
  // holds idle_mu_ until its answer is recorded.
  absl::StatusOr<ClockResponse> answer;
  uint64_t sequence = 0;
  bool idle = false;
  {
    absl::MutexLock lock(&idle_mu_);
    sequence = ++reports_sent_;
    SetProgress(&request);
    idle = !finished && !leaving && Idle();
    if (options_.metrics != nullptr) options_.metrics->SetWaitingForInput(idle);
    if (idle) {
      request.set_idle(true);
      answer = client_->Clock(request, retry_for);
      RecordAnswerLocked(sequence, request, answer);
    }
  }
  if (!idle) {
    answer = client_->Clock(request, retry_for);
    absl::MutexLock lock(&idle_mu_);
    RecordAnswerLocked(sequence, request, answer);
  }
  RETURN_IF_ERROR(answer.status());
  *response = *std::move(answer);
  return absl::OkStatus();
}

void Trainer::RecordAnswerLocked(uint64_t sequence, const ClockRequest& request,
                                 const absl::StatusOr<ClockResponse>& answer) {
  // A report sent before a newer one that was answered says nothing new.
  if (sequence <= newest_answered_) return;
  if (answer.ok()) {
    newest_answered_ = sequence;
    hold_at_ = answer->hold_at();
  } else if (request.idle()) {
    // The coordinator may have counted it held at a cut without its answer
    // arriving: push nothing until a later report is answered.
    newest_answered_ = sequence;
    hold_at_ = request.clock() > 0 ? request.clock() : -1;
  }
}

bool Trainer::Idle() {
  {
    absl::MutexLock lock(&source_mu_);
    if (source_ == nullptr || !source_->waiting()) return false;
  }
  // The prefetcher reads input for step reading_step_: every step before it
  // was begun, and is acknowledged once the clock is there.
  return clock_.value() == reading_step_.load();
}

int64_t Trainer::HoldAt() {
  absl::MutexLock lock(&idle_mu_);
  return hold_at_;
}

absl::Status Trainer::FirstReport(ClockResponse* response,
                                  int64_t* resumed_examples,
                                  FollowPosition* resumed_position) {
  *resumed_examples = 0;
  *resumed_position = FollowPosition();
  if (!options_.assign_incarnation) return ReportClock(false, response);
  ClockRequest request;
  request.set_worker(worker_index_);
  SetProgress(&request);
  request.set_assign_incarnation(true);
  request.set_resume(options_.resume_from_coordinator &&
                     options_.resume_clock == 0);
  request.set_lease_ms(static_cast<uint32_t>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.lease))));
  ASSIGN_OR_RETURN(*response,
                   client_->Clock(request, -absl::InfiniteDuration()));
  if (response->incarnation() != 0) {
    client_->set_incarnation(response->incarnation());
  } else {
    // A coordinator that assigns none recorded this report under
    // incarnation 0: report again under the client's own.
    return ReportClock(false, response);
  }
  if (response->resumed()) {
    *resumed_examples = response->examples();
    resumed_position->file = response->input_position().file();
    resumed_position->file_examples =
        response->input_position().file_examples();
    LOG(INFO) << "[worker " << worker_index_ << "] going on where its last "
              << "process stopped: clock " << response->clock() << ", after "
              << response->examples() << " examples (--restart_from_start "
              << "starts over)";
  }
  return absl::OkStatus();
}

absl::Status Trainer::WaitOutCut(int64_t step, int64_t* hold_at,
                                 absl::Duration* held) {
  const absl::Time start = absl::Now();
  while (*hold_at != 0 && step >= *hold_at && !stop_requested_) {
    ClockResponse view;
    RETURN_IF_ERROR(ReportClock(false, &view));
    *hold_at = HoldAt();
    if (*hold_at != 0 && step >= *hold_at) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  *held += absl::Now() - start;
  return absl::OkStatus();
}

absl::Status Trainer::WaitForWorkers(ClockResponse* view, bool count_finished) {
  if (options_.staleness < 0 || options_.num_workers <= 1) {
    return absl::OkStatus();
  }
  const absl::Time give_up = absl::Now() + options_.start_timeout;
  bool said = false;
  // A worker that finished before this one came (little left to train
  // after a resume) has started too; in a fresh run a finished worker is
  // one of an earlier run.
  auto started = [&] {
    return static_cast<int>(view->live_workers() +
                            (count_finished ? view->finished_workers() : 0));
  };
  while (started() < options_.num_workers) {
    if (absl::Now() >= give_up) {
      LOG(WARNING) << "[worker " << worker_index_ << "] starting with "
                   << view->live_workers() << " of " << options_.num_workers
                   << " workers after waiting "
                   << absl::FormatDuration(options_.start_timeout)
                   << " (--start_timeout_s)";
      return absl::OkStatus();
    }
    if (!said) {
      LOG(INFO) << "[worker " << worker_index_ << "] waiting for "
                << options_.num_workers << " workers to start ("
                << view->live_workers() << " there)";
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(50));
    RETURN_IF_ERROR(ReportClock(false, view));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExampleSource>> Trainer::JoinCluster(
    ClockResponse* view) {
  std::unique_ptr<ExampleSource> reader;
  if (options_.resume_clock > 0) {
    ASSIGN_OR_RETURN(
        reader, OpenInput(options_.resume_examples, options_.resume_position));
    clock_.Set(options_.resume_clock);
    absl::MutexLock lock(&position_mu_);
    examples_ = options_.resume_examples;
    position_ = options_.resume_position;
  }
  int64_t resumed_examples = 0;
  FollowPosition resumed_position;
  RETURN_IF_ERROR(FirstReport(view, &resumed_examples, &resumed_position));
  if (resumed_examples > 0) {
    ASSIGN_OR_RETURN(reader, OpenInput(resumed_examples, resumed_position));
    absl::MutexLock lock(&position_mu_);
    examples_ = resumed_examples;
    position_ = resumed_position;
  }
  if (reader == nullptr) {
    ASSIGN_OR_RETURN(reader, OpenInput(0, {}));
  }
  clock_.Set(view->clock());  // a late joiner starts at the live minimum
  return reader;
}

void Trainer::AdvanceClock(int64_t step, const std::string& file,
                           int64_t examples) {
  absl::MutexLock lock(&position_mu_);
  if (!file.empty()) {
    if (file != position_.file) position_ = {file, 0};
    position_.file_examples += examples;
  }
  examples_ += examples;
  clock_.Set(step + 1);
}

}  // namespace ps::worker
