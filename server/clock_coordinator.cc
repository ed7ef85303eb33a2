#include "server/clock_coordinator.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::server {
namespace {

// Version 2 adds the term's line (spelled "epoch", which every release
// reads) and each worker's examples, version 3 each
// worker's input position (its file in base64, "-" for none, and the
// examples of that file), written only when a worker has one; versions 1
// and 2 are still read.
constexpr char kStateHeader[] = "ps-coordinator-state 3";
constexpr char kStateHeaderV2[] = "ps-coordinator-state 2";
constexpr char kStateHeaderV1[] = "ps-coordinator-state 1";

std::string EncodeFile(const std::string& file) {
  return file.empty() ? "-" : absl::Base64Escape(file);
}

bool DecodeFile(const std::string& field, std::string* file) {
  file->clear();
  return field == "-" || absl::Base64Unescape(field, file);
}
constexpr int64_t kNoClock = std::numeric_limits<int64_t>::max();

}  // namespace

absl::StatusOr<std::unique_ptr<ClockCoordinator>> ClockCoordinator::Open(
    const CoordinatorOptions& options) {
  if (options.max_workers == 0) {
    return absl::InvalidArgumentError("max_workers must be positive");
  }
  auto coordinator =
      std::unique_ptr<ClockCoordinator>(new ClockCoordinator(options));
  if (!options.state_path.empty()) {
    if (absl::Status loaded = coordinator->Load(); !loaded.ok()) {
      // Soft state: the workers' next reports rebuild it. A shard must not
      // stay down for want of it.
      LOG(ERROR) << loaded << "; set aside as " << options.state_path
                 << ".unreadable, starting with no workers";
      std::rename(options.state_path.c_str(),
                  (options.state_path + ".unreadable").c_str());
      absl::MutexLock lock(&coordinator->mu_);
      coordinator->workers_.clear();
      coordinator->relearning_until_ = options.now() + options.relearn_time;
    }
  }
  absl::MutexLock lock(&coordinator->mu_);
  coordinator->next_cut_id_ =
      static_cast<uint64_t>(absl::ToUnixMicros(options.now()));
  const uint64_t wall_term =
      (static_cast<uint64_t>(absl::ToUnixMicros(options.now())) >> 32) + 1;
  coordinator->term_ = std::max(coordinator->term_ + 1, wall_term);
  if (!options.state_path.empty()) {
    // Before any incarnation of this term is given out. The state is soft:
    // a shard does not stay down for want of it (the term then rests on
    // the wall clock alone).
    coordinator->dirty_ = true;
    if (absl::Status saved = coordinator->SaveLocked(); !saved.ok())
      LOG(ERROR) << "saving the coordinator's term: " << saved;
  }
  return coordinator;
}

absl::Status ClockCoordinator::Load() {
  std::ifstream file(options_.state_path);
  if (!file) return absl::OkStatus();  // a new coordinator
  auto corrupt = [this](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("coordinator state ", options_.state_path, ": ", why));
  };
  std::string header;
  if (!std::getline(file, header) ||
      (header != kStateHeader && header != kStateHeaderV2 &&
       header != kStateHeaderV1)) {
    return corrupt("unknown header");
  }
  const bool v1 = header == kStateHeaderV1;
  const bool v3 = header == kStateHeader;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  std::string line;
  if (!v1) {
    std::string word;
    if (!std::getline(file, line) ||
        !(std::istringstream(line) >> word >> term_) || word != "epoch") {
      return corrupt("no term (epoch) line");
    }
  }
  while (std::getline(file, line)) {
    std::istringstream fields(line);
    uint32_t id = 0;
    Worker worker;
    int finished = 0;
    int64_t lease_ms = 0;
    std::string file;
    if (!(fields >> id >> worker.incarnation >> worker.clock) ||
        (!v1 && !(fields >> worker.examples)) ||
        !(fields >> finished >> lease_ms) || lease_ms <= 0 ||
        (v3 && (!(fields >> file >> worker.input_position.file_examples) ||
                !DecodeFile(file, &worker.input_position.file)))) {
      return corrupt(absl::StrCat("cannot read the line \"", line, "\""));
    }
    worker.finished = finished != 0;
    // Saved at most every save_interval: until it reports again, its clock
    // here may be behind pushes it made (BeginCut waits for it).
    worker.unconfirmed = !worker.finished;
    worker.lease = absl::Milliseconds(lease_ms);
    // A lease starts anew: the worker had no coordinator to report to.
    worker.lease_end = now + worker.lease;
    workers_[id] = worker;
  }
  LOG(INFO) << "coordinator: " << workers_.size() << " workers from "
            << options_.state_path;
  return absl::OkStatus();
}

bool ClockCoordinator::MakeRoom(absl::Time now) {
  if (workers_.size() < options_.max_workers) return true;
  auto oldest = workers_.end();
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (Live(it->second, now)) continue;
    if (oldest == workers_.end() ||
        it->second.lease_end < oldest->second.lease_end) {
      oldest = it;
    }
  }
  if (oldest == workers_.end()) return false;
  workers_.erase(oldest);
  return true;
}

absl::StatusOr<ClockCoordinator::View> ClockCoordinator::Record(
    const Report& report) {
  if (report.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a worker's lease must be positive");
  }
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(options_.monotonic_now());
  RETURN_IF_ERROR(ServingLocked());
  const absl::Time now = options_.now();
  const int64_t others_min = OthersLiveMinimumLocked(report.worker, now);
  const uint64_t incarnation = IncarnationForLocked(report);
  absl::StatusOr<ReportingWorker> reporting =
      FindOrAddWorkerLocked(report, incarnation, now);
  if (!reporting.ok()) return reporting.status();
  // A newcomer starts where the workers that said where they are are, not
  // at a clock a takeover does not trust yet.
  ApplyReportLocked(
      report, OthersLiveMinimumLocked(report.worker, now, /*confirmed=*/true),
      now, *reporting);

  View view = ViewOfLocked(*reporting->worker, others_min, now);
  view.incarnation = incarnation;
  view.resumed = reporting->resumed;
  SaveIfDueLocked(now);
  return view;
}

int64_t ClockCoordinator::OthersLiveMinimumLocked(uint32_t worker,
                                                  absl::Time now,
                                                  bool confirmed) {
  int64_t others_min = kNoClock;
  for (const auto& [id, other] : workers_) {
    if (id != worker && Live(other, now) && !(confirmed && other.unconfirmed))
      others_min = std::min(others_min, other.clock);
  }
  return others_min;
}

uint64_t ClockCoordinator::IncarnationForLocked(const Report& report) {
  uint64_t incarnation = report.incarnation;
  if (report.assign_incarnation) {
    incarnation = (term_ << 32) | (++incarnations_given_ & 0xffffffffu);
    auto it = workers_.find(report.worker);
    if (it != workers_.end())
      incarnation = std::max(incarnation, it->second.incarnation + 1);
  }
  return incarnation;
}

absl::StatusOr<ClockCoordinator::ReportingWorker>
ClockCoordinator::FindOrAddWorkerLocked(const Report& report,
                                        uint64_t incarnation, absl::Time now) {
  auto it = workers_.find(report.worker);
  if (it != workers_.end() && incarnation < it->second.incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", report.worker, " incarnation ", incarnation,
                     " was superseded by incarnation ", it->second.incarnation,
                     " (another process took this worker index)"));
  }
  ReportingWorker reporting;
  if (it == workers_.end()) {
    if (!MakeRoom(now)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator already keeps ", workers_.size(),
                       " live workers (--max_workers); worker ", report.worker,
                       " cannot join"));
    }
    it = workers_.try_emplace(report.worker).first;
    it->second.incarnation = incarnation;
    reporting.newcomer = true;
  }
  reporting.worker = &it->second;
  if (incarnation > reporting.worker->incarnation) {
    absl::Status started =
        StartIncarnationLocked(report, incarnation, now, &reporting);
    if (!started.ok()) return started;
  }
  return reporting;
}

absl::Status ClockCoordinator::StartIncarnationLocked(
    const Report& report, uint64_t incarnation, absl::Time now,
    ReportingWorker* reporting) {
  Worker& worker = *reporting->worker;
  if (report.resume && Live(worker, now) && !worker.finished) {
    // Its last process may still be pushing the step at its clock (a
    // replacement pod that starts while the old one drains): wait for it
    // to leave or lapse, the caller retrying.
    return absl::UnavailableError(
        absl::StrCat("worker ", report.worker,
                     "'s last process still holds its lease "
                     "(for ",
                     absl::FormatDuration(absl::Ceil(worker.lease_end - now,
                                                     absl::Milliseconds(1))),
                     "): going on from its clock once it has left"));
  }
  const Worker previous = worker;
  worker = Worker();
  worker.incarnation = incarnation;
  reporting->newcomer = true;
  // A restart goes on from where the last incarnation stopped (a record
  // without an input position, of an older worker, is not gone on from).
  if (report.resume && !previous.finished && previous.clock > 0 &&
      previous.examples > 0) {
    worker.clock = previous.clock;
    worker.examples = previous.examples;
    worker.input_position = previous.input_position;
    reporting->newcomer = false;
    reporting->resumed = true;
  }
  return absl::OkStatus();
}

void ClockCoordinator::ApplyReportLocked(const Report& report,
                                         int64_t others_min, absl::Time now,
                                         const ReportingWorker& reporting) {
  Worker& worker = *reporting.worker;
  worker.unconfirmed = false;
  // A newcomer that has done no step starts at the live minimum.
  if (reporting.newcomer && report.clock == 0 && others_min != kNoClock) {
    worker.clock = others_min;
  }
  worker.clock = std::max(worker.clock, report.clock);
  if (report.examples >= worker.examples) {
    worker.examples = report.examples;
    worker.input_position = report.input_position;
  }
  worker.finished = worker.finished || report.finished;
  // Idle during a cut and behind it: held at its clock for the rest of the
  // cut (ViewOfLocked), which counts it as there.
  // A report that is not idle before the cut is ready lets it go on to the
  // cut (input came): others at a bounded staleness may wait for its steps.
  if (report.idle && ActiveCut(now) != 0 && worker.clock < cut_) {
    worker.held_in_cut = cut_id_;
  } else if (!report.idle && !cut_ready_) {
    worker.held_in_cut = 0;
  }
  worker.lease = report.lease;
  // Leaving: counted out at once, as if its lease had lapsed.
  worker.lease_end = report.leaving ? now : now + report.lease;
  dirty_ = true;
}

ClockCoordinator::View ClockCoordinator::ViewOfLocked(const Worker& worker,
                                                      int64_t others_min,
                                                      absl::Time now) {
  View view;
  view.clock = worker.clock;
  view.examples = worker.examples;
  view.input_position = worker.input_position;
  view.min_clock =
      Live(worker, now) ? std::min(others_min, worker.clock) : others_min;
  if (view.min_clock == kNoClock) view.min_clock = worker.clock;
  for (const auto& [id, other] : workers_) {
    view.live_workers += Live(other, now) ? 1 : 0;
    view.finished_workers += other.finished ? 1 : 0;
  }
  view.hold_at = ActiveCut(now);
  // Once every live worker held at the cut, the shards are writing their
  // parts: a worker behind it (one whose lease had lapsed, or a newcomer)
  // must push nothing more until the cut ends.
  // So is a worker held in the cut since it reported idle.
  if (view.hold_at != 0 && worker.clock < view.hold_at &&
      (cut_ready_ || worker.held_in_cut == cut_id_)) {
    view.hold_at = worker.clock > 0 ? worker.clock : -1;
  }
  return view;
}

void ClockCoordinator::SaveIfDueLocked(absl::Time now) {
  if (!options_.state_path.empty() &&
      now - last_save_ >= options_.save_interval) {
    if (absl::Status saved = SaveLocked(); !saved.ok()) {
      LOG_EVERY_N(WARNING, 100) << saved;
    }
  }
}

std::vector<ClockCoordinator::WorkerClock> ClockCoordinator::Snapshot() {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked(options_.now());
}

std::vector<ClockCoordinator::WorkerClock> ClockCoordinator::SnapshotLocked(
    absl::Time now) {
  std::vector<WorkerClock> clocks;
  for (const auto& [id, worker] : workers_) {
    clocks.push_back({id, worker.clock, worker.examples, worker.input_position,
                      Live(worker, now), worker.finished});
  }
  std::sort(clocks.begin(), clocks.end(),
            [](const WorkerClock& a, const WorkerClock& b) {
              return a.worker < b.worker;
            });
  return clocks;
}

int64_t ClockCoordinator::ActiveCut(absl::Time now) {
  if (cut_ != 0 && now > cut_lease_end_) {
    LOG(WARNING) << "the cut at clock " << cut_
                 << " ran out of its lease; workers go on";
    cut_ = 0;
    cut_id_ = 0;
    cut_ready_ = false;
  }
  return cut_;
}

absl::StatusOr<ClockCoordinator::BegunCut> ClockCoordinator::BeginCut(
    absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(options_.monotonic_now());
  RETURN_IF_ERROR(ServingLocked());
  const absl::Time now = options_.now();
  // Another cut ends soon: a caller may wait for it (UNAVAILABLE, as for
  // a coordinator that just restarted).
  if (ActiveCut(now) != 0) {
    return absl::UnavailableError(
        absl::StrCat("a cut at clock ", cut_,
                     " is being taken already (a checkpoint or "
                     "export in progress): try again once it ends"));
  }
  for (const auto& [id, worker] : workers_) {
    if (worker.unconfirmed && Live(worker, now)) {
      return absl::UnavailableError(absl::StrCat(
          "the coordinator restarted and worker ", id,
          " has not reported since (its saved clock may be behind pushes it "
          "made): try again once it has, or in ",
          absl::FormatDuration(
              absl::Ceil(worker.lease_end - now, absl::Seconds(1)))));
    }
  }
  if (now < relearning_until_) {
    return absl::UnavailableError(absl::StrCat(
        "the coordinator started without its state and is still learning "
        "which workers there are: try again in ",
        absl::FormatDuration(
            absl::Ceil(relearning_until_ - now, absl::Seconds(1)))));
  }
  // Past every unfinished worker's clock, live or not: the step a worker
  // may be pushing now is its clock, so none has sent a push of the cut.
  // Finished workers push nothing more; when every worker has finished,
  // the cut is past them all, so that it still names where training got.
  int64_t furthest_unfinished = -1;
  int64_t furthest = 0;
  for (const auto& [id, worker] : workers_) {
    furthest = std::max(furthest, worker.clock);
    if (!worker.finished) {
      furthest_unfinished = std::max(furthest_unfinished, worker.clock);
    }
  }
  cut_ = (furthest_unfinished >= 0 ? furthest_unfinished : furthest) + 1;
  cut_id_ = ++next_cut_id_;
  cut_ready_ = false;
  cut_lease_ = lease;
  cut_lease_end_ = now + lease;
  LOG(INFO) << "cut at clock " << cut_ << ": workers hold there";
  return BegunCut{cut_, cut_id_};
}

ClockCoordinator::CutStatus ClockCoordinator::GetCutStatus() {
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(options_.monotonic_now());
  const absl::Time now = options_.now();
  CutStatus status;
  status.cut = ActiveCut(now);
  if (status.cut == 0) return status;
  status.id = cut_id_;
  cut_lease_end_ = now + cut_lease_;
  status.workers = SnapshotLocked(now);
  const uint64_t cut_id = cut_id_;
  status.ready = std::all_of(workers_.begin(), workers_.end(),
                             [&](const auto& id_and_worker) {
                               const Worker& w = id_and_worker.second;
                               return !Live(w, now) || w.clock >= status.cut ||
                                      w.held_in_cut == cut_id;
                             });
  cut_ready_ = cut_ready_ || status.ready;
  return status;
}

absl::Status ClockCoordinator::Serving() {
  absl::MutexLock lock(&mu_);
  return ServingLocked();
}

absl::Status ClockCoordinator::ServingLocked() {
  if (!options_.elected) return absl::OkStatus();
  if (!leading_) {
    return absl::UnavailableError(
        "this shard is not the job's clock coordinator (etcd's "
        "/ps/<job>/coordinator names the one that is)");
  }
  if (options_.monotonic_now() >= leading_until_) {
    // Paused past its lease, or cut off from etcd: another shard may lead.
    return absl::UnavailableError(
        "this shard's coordinator lease in etcd is not renewed: another "
        "shard may have taken over");
  }
  return absl::OkStatus();
}

uint64_t ClockCoordinator::NextTerm(uint64_t min_term) {
  absl::MutexLock lock(&mu_);
  return std::max(term_ + 1, min_term);
}

uint64_t ClockCoordinator::Lead(
    const std::vector<cluster::RegisteredWorker>& workers, uint64_t min_term,
    absl::Time leading_until) {
  std::vector<ExpectedWorker> expected;
  expected.reserve(workers.size());
  for (const cluster::RegisteredWorker& worker : workers) {
    expected.push_back({worker.index, worker.lease});
  }
  return TakeOver(expected, min_term, leading_until);
}

uint64_t ClockCoordinator::TakeOver(const std::vector<ExpectedWorker>& expected,
                                    uint64_t min_term,
                                    absl::Time leading_until) {
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(options_.monotonic_now());
  const absl::Time now = options_.now();
  absl::flat_hash_map<uint32_t, absl::Duration> registered;
  for (const ExpectedWorker& worker : expected)
    registered[worker.worker] = worker.lease;
  // The clocks kept may be behind what the workers did under another
  // coordinator: each counts once its worker reports again. One that is
  // not registered has no process: it counts as lapsed.
  for (auto& [id, worker] : workers_) {
    if (worker.finished) continue;
    worker.unconfirmed = registered.contains(id);
    worker.lease_end = worker.unconfirmed ? now + worker.lease : now;
  }
  size_t added = 0;
  for (const auto& [id, lease] : registered) {
    if (workers_.contains(id) || !MakeRoom(now)) continue;
    Worker& worker = workers_[id];
    worker.lease = lease;
    worker.lease_end = now + lease;
    worker.unconfirmed = true;
    ++added;
  }
  cut_ = 0;
  cut_id_ = 0;
  cut_ready_ = false;
  term_ = std::max(term_ + 1, min_term);
  incarnations_given_ = 0;
  leading_ = true;
  leading_until_ = leading_until;
  dirty_ = true;
  if (!options_.state_path.empty()) {
    if (absl::Status saved = SaveLocked(); !saved.ok())
      LOG(ERROR) << "saving the coordinator's term: " << saved;
  }
  LOG(INFO) << "coordinator: leading at term " << term_ << ", waiting for "
            << workers_.size() << " workers to report (" << added
            << " registered in etcd and not kept here)";
  return term_;
}

void ClockCoordinator::ExtendLeadership(absl::Time leading_until) {
  absl::MutexLock lock(&mu_);
  leading_until_ = std::max(leading_until_, leading_until);
}

void ClockCoordinator::StepDown() {
  absl::MutexLock lock(&mu_);
  if (leading_) LOG(WARNING) << "coordinator: no longer leading";
  leading_ = false;
}

void ClockCoordinator::NoticePause() {
  absl::MutexLock lock(&mu_);
  NoticePauseLocked(options_.monotonic_now());
}

void ClockCoordinator::NoticePauseLocked(absl::Time monotonic_now) {
  const absl::Duration gap = monotonic_now - last_tick_;
  last_tick_ = monotonic_now;
  if (gap <= options_.pause_threshold || gap == absl::InfiniteDuration())
    return;
  LOG(WARNING) << "the coordinator did not run for "
               << absl::FormatDuration(gap)
               << " (paused?): leases are extended by that much";
  // Only leases that ran when the pause began (now - gap, in options.now's
  // time): a worker that had left or lapsed stays out.
  const absl::Time paused_at = options_.now() - gap;
  for (auto& [id, worker] : workers_) {
    if (worker.lease_end > paused_at) worker.lease_end += gap;
  }
  if (cut_ != 0) cut_lease_end_ += gap;
}

bool ClockCoordinator::EndCut(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (cut_ == 0 || (id != 0 && id != cut_id_)) return false;
  cut_ = 0;
  cut_id_ = 0;
  cut_ready_ = false;
  return true;
}

absl::Status ClockCoordinator::Save() {
  absl::MutexLock lock(&mu_);
  if (options_.state_path.empty()) return absl::OkStatus();
  return SaveLocked();
}

absl::Status ClockCoordinator::SaveLocked() {
  last_save_ = options_.now();
  if (!dirty_) return absl::OkStatus();
  // Version 2 while no worker follows a directory, so that the release
  // before this one can still read it (a rollback).
  bool positions = false;
  for (const auto& [id, worker] : workers_)
    positions = positions || !worker.input_position.file.empty();
  std::string text = absl::StrCat(positions ? kStateHeader : kStateHeaderV2,
                                  "\nepoch ", term_, "\n");
  for (const auto& [id, worker] : workers_) {
    absl::StrAppend(
        &text, id, " ", worker.incarnation, " ", worker.clock, " ",
        worker.examples, " ", worker.finished ? 1 : 0, " ",
        std::max<int64_t>(1, absl::ToInt64Milliseconds(worker.lease)));
    if (positions) {
      absl::StrAppend(&text, " ", EncodeFile(worker.input_position.file), " ",
                      worker.input_position.file_examples);
    }
    absl::StrAppend(&text, "\n");
  }
  // Written aside, synced and renamed over: a crash, even of the machine,
  // leaves the old state or the new.
  if (absl::Status written = WriteFileDurably(options_.state_path, text);
      !written.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot save the coordinator state: ", written.message()));
  }
  dirty_ = false;
  return absl::OkStatus();
}

}  // namespace ps::server
