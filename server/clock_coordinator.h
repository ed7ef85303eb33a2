// File: server/clock_coordinator.h
//
// ClockCoordinator keeps the workers' clocks for bounded staleness (stale
// synchronous parallel). Each worker reports its clock (steps whose pushes
// were acknowledged) with a lease; the coordinator answers the minimum clock
// among live workers. A worker is live until it says it finished or its lease
// runs out without a report, so a dead worker stops holding the others back.
//
// Who a worker is: its index and its process's incarnation (a number that
// grows from one start of the worker to the next). A worker the coordinator
// has not seen, or a new incarnation, reporting clock 0 starts at the live
// minimum (elastic training: a newcomer does not hold the others back). Any
// other report is the worker's real clock: a worker whose lease lapsed (a
// long evaluation, a network partition) and that comes back is counted at
// the clock it reports, not ahead of it. A finished worker stays finished
// for its incarnation; an incarnation older than the newest seen is refused.
//
// The state (every worker's incarnation, clock, lease and whether it
// finished) is written to `state_path`, atomically and synced, at most every
// `save_interval` and by Save(), and read back at Open(): a restarted
// coordinator shard knows its workers, whose leases start anew. At most
// `max_workers` workers are kept; past it, finished or expired workers are
// forgotten, oldest first, and a new worker when all are live is refused.
//
// Cuts, for checkpoints: BeginCut() picks a clock one past the furthest
// unfinished worker's (every worker's, once all have finished), and every
// report answers it as `hold_at` until EndCut() (or the cut's lease runs out):
// a worker pushes no step at or past it, and its earlier steps go on, so that
// every live worker reaches the cut and holds there (CutStatus().ready). No
// push of a later step is then in flight, and every push before it was
// acknowledged. A worker that reports it is idle (waiting for input, every
// step it began acknowledged) during the cut is held where it is instead,
// answered hold_at = its clock: a followed directory with nothing new does
// not keep a cut waiting for a step that may never come. Once the cut is
// ready it holds there until the cut ends; before, a report that is not
// idle (input came) lets it go on to the cut, which others at a bounded
// staleness may be waiting for.
//
// Elected (under --etcd, cluster/coordinator_election.h): every shard has a
// coordinator, and only the one that leads answers. TakeOver() makes it
// lead: it goes on from what it kept, every worker it kept or is told of
// counted unconfirmed (its clock there, or 0, holding the others and every
// cut back) until that worker reports, and its incarnations above every
// earlier coordinator's.
//
// Thread-safe.

#ifndef PS_SERVER_CLOCK_COORDINATOR_H_
#define PS_SERVER_CLOCK_COORDINATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cluster/coordinator_election.h"

namespace ps::server {

struct CoordinatorOptions {
  // Where the state is kept. Empty: in memory only. Default: empty.
  std::string state_path;
  // Most workers kept. Default: 4096.
  size_t max_workers = 4096;
  // Least time between two writes of the state by Report(). Default: 100 ms.
  absl::Duration save_interval = absl::Milliseconds(100);
  // After starting without the state it had (an unreadable state file),
  // how long cuts are refused so that every live worker has reported again
  // (longer than the workers' leases). Default: 60 s.
  absl::Duration relearn_time = absl::Seconds(60);
  // A gap longer than this between two NoticePause() calls is a pause of
  // this process (SIGSTOP, a paused VM), which leases do not count.
  // Default: 2 s.
  absl::Duration pause_threshold = absl::Seconds(2);
  // A clock that runs on while the process is stopped (CLOCK_MONOTONIC),
  // for NoticePause(), which every call also makes. Default: steady_clock.
  std::function<absl::Time()> monotonic_now = [] {
    return absl::UnixEpoch() +
           absl::FromChrono(
               std::chrono::steady_clock::now().time_since_epoch());
  };
  // The time source (tests inject one). Default: absl::Now.
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // Answers only while it leads (TakeOver() to StepDown(), within the
  // leadership's end by monotonic_now). Default: false (always answers).
  bool elected = false;
};

class ClockCoordinator final : public cluster::Leadership {
 public:
  // Where a worker that follows a directory is in it (proto/ps.proto's
  // InputPosition): recorded, saved and resumed with its examples.
  struct InputPosition {
    std::string file;
    int64_t file_examples = 0;
  };

  struct Report {
    uint32_t worker = 0;
    // 0: unknown (a client that does not say); treated as one incarnation.
    uint64_t incarnation = 0;
    int64_t clock = 0;
    // Examples trained on in the steps `clock` counts, and where they end
    // in a followed directory.
    int64_t examples = 0;
    InputPosition input_position;
    bool finished = false;
    // Stops before its end: its lease ends now, it is not finished.
    bool leaving = false;
    // A new incarnation that takes over the last one's clock and examples,
    // unless that one finished (View::resumed).
    bool resume = false;
    // The report's incarnation is to be assigned (View::incarnation).
    bool assign_incarnation = false;
    // The worker waits for input with every step it began acknowledged,
    // and starts no push before it has this report's answer (ClockRequest
    // in proto/ps.proto): during a cut it is held where it is.
    bool idle = false;
    absl::Duration lease;
  };

  struct View {
    int64_t min_clock = 0;
    uint32_t live_workers = 0;
    uint32_t finished_workers = 0;
    // The reporting worker's recorded clock, examples and input position.
    int64_t clock = 0;
    int64_t examples = 0;
    InputPosition input_position;
    // Push no step >= hold_at (0: no cut; -1: no step at all).
    int64_t hold_at = 0;
    // The incarnation the report was recorded under (assigned, if asked).
    uint64_t incarnation = 0;
    // The report took over the last incarnation's clock and examples.
    bool resumed = false;
  };

  struct WorkerClock {
    uint32_t worker = 0;
    int64_t clock = 0;
    int64_t examples = 0;
    InputPosition input_position;
    bool live = false;
    bool finished = false;
  };

  struct CutStatus {
    // 0: no cut.
    int64_t cut = 0;
    // Which cut it is: unique to each BeginCut() of this coordinator.
    uint64_t id = 0;
    bool ready = false;
    std::vector<WorkerClock> workers;
  };

  struct BegunCut {
    int64_t cut = 0;
    uint64_t id = 0;
  };

  // A worker that a coordinator taking over is told of (registered in
  // etcd): it waits for its report.
  struct ExpectedWorker {
    uint32_t worker = 0;
    absl::Duration lease;
  };

  // Starts empty, or from the state at options.state_path if it exists. A
  // state file that does not parse is set aside (".unreadable", logged) and
  // the coordinator starts empty: the workers' reports rebuild it.
  static absl::StatusOr<std::unique_ptr<ClockCoordinator>> Open(
      const CoordinatorOptions& options);

  // Records the report (clocks never go back), renews the worker's lease,
  // and returns the live minimum. FAILED_PRECONDITION for a superseded
  // incarnation; RESOURCE_EXHAUSTED for a new worker when max_workers are
  // live; INVALID_ARGUMENT for a lease that is not positive.
  absl::StatusOr<View> Record(const Report& report);

  // Every worker kept, for the admin service.
  std::vector<WorkerClock> Snapshot();

  // Starts a cut that lasts `lease` without a GetCutStatus(); returns its
  // clock and id. FAILED_PRECONDITION while another cut is being taken;
  // UNAVAILABLE for options.relearn_time after starting without its state.
  absl::StatusOr<BegunCut> BeginCut(absl::Duration lease);
  // The cut (renewing its lease) and whether every live worker holds at it.
  // Once it has been ready, a worker behind the cut that reports is told to
  // hold where it is (hold_at = its clock, or -1 at clock 0).
  CutStatus GetCutStatus();
  // Ends the cut `id` (0: whichever is being taken): workers go on. False
  // if no such cut is being taken (it ran out, or another began).
  bool EndCut(uint64_t id);

  // Writes the state to state_path now if it changed since the last write.
  absl::Status Save();

  // OK while this coordinator answers: always, unless options.elected and
  // it does not lead now (UNAVAILABLE, saying so). Record() and BeginCut()
  // check it; the admin service checks it before the other calls.
  absl::Status Serving();

  // The term TakeOver(min_term) would lead at: above this coordinator's
  // last, and at least `min_term`.
  uint64_t NextTerm(uint64_t min_term) override;

  // Starts leading, until StepDown() or `leading_until` (by
  // options.monotonic_now; ExtendLeadership() moves it). Each unfinished
  // worker kept that is among `expected` is unconfirmed again, its lease
  // starting anew, and one that is not counts as lapsed; each of
  // `expected` not kept is added at clock 0, unconfirmed, under its lease.
  // A cut in progress is dropped. Incarnations given out from now on have
  // the term NextTerm(min_term); returns it (saved before returning).
  uint64_t TakeOver(const std::vector<ExpectedWorker>& expected,
                    uint64_t min_term, absl::Time leading_until);
  // TakeOver() with `workers` expected, each under its lease (an
  // election's win).
  uint64_t Lead(const std::vector<cluster::RegisteredWorker>& workers,
                uint64_t min_term, absl::Time leading_until) override;
  void ExtendLeadership(absl::Time leading_until) override;
  void StepDown() override;

  // Called periodically (ShardServer: every 100 ms), and by every other
  // call first: a gap of more than options.pause_threshold of
  // options.monotonic_now since the last one means this process did not run
  // (SIGSTOP, a paused VM), and every
  // lease and the cut's lease are extended by it, so that leases lapse only
  // while the coordinator runs.
  void NoticePause();

 private:
  struct Worker {
    uint64_t incarnation = 0;
    int64_t clock = 0;
    int64_t examples = 0;
    // Goes with `examples`.
    InputPosition input_position;
    absl::Duration lease;
    absl::Time lease_end;
    bool finished = false;
    // Read from the state file and not heard from since this coordinator
    // started: its clock there may be older than the pushes it made.
    bool unconfirmed = false;
    // The cut (its id) an idle report of it came in during, behind it: it
    // holds at its clock, and the cut counts it, until a report that is not
    // idle comes before the cut is ready, or the cut ends.
    uint64_t held_in_cut = 0;
  };

  explicit ClockCoordinator(const CoordinatorOptions& options)
      : options_(options) {}

  bool Live(const Worker& worker, absl::Time now) const {
    return !worker.finished && worker.lease_end > now;
  }
  // Makes room for one more worker; false if every worker kept is live.
  bool MakeRoom(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cut, or 0 (ending one whose lease ran out).
  int64_t ActiveCut(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<WorkerClock> SnapshotLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Load();
  absl::Status ServingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NoticePause(), under the lock, at `monotonic_now`.
  void NoticePauseLocked(absl::Time monotonic_now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Record()'s stages, each called with the lock Record() holds.

  // The reporting worker's entry, as Record() found or made it: `newcomer`
  // if it is new or a new incarnation that does not go on from the last
  // one's clock, `resumed` if it does.
  struct ReportingWorker {
    Worker* worker = nullptr;
    bool newcomer = false;
    bool resumed = false;
  };
  // The least clock among live workers other than `worker` (only those
  // that reported since this coordinator started leading, if `confirmed`);
  // the largest int64_t (kNoClock) if there are none.
  int64_t OthersLiveMinimumLocked(uint32_t worker, absl::Time now,
                                  bool confirmed = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The incarnation the report is recorded under: its own, or one given
  // out now if it asks for one (above the worker's last).
  uint64_t IncarnationForLocked(const Report& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reporting worker's entry, added if new (making room) and started
  // anew for a newer incarnation. FAILED_PRECONDITION for a superseded
  // incarnation, RESOURCE_EXHAUSTED when every worker kept is live,
  // UNAVAILABLE while the last incarnation it resumes holds its lease.
  absl::StatusOr<ReportingWorker> FindOrAddWorkerLocked(const Report& report,
                                                        uint64_t incarnation,
                                                        absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces reporting->worker by a new incarnation's entry, which goes on
  // from the last one's clock and examples if the report resumes an
  // unfinished one. UNAVAILABLE (nothing changed) while that one is live.
  absl::Status StartIncarnationLocked(const Report& report,
                                      uint64_t incarnation, absl::Time now,
                                      ReportingWorker* reporting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the report's clock, examples, finish and lease in the worker's
  // entry (clocks never go back; a newcomer at clock 0 starts at
  // `others_min`, the confirmed workers' minimum).
  void ApplyReportLocked(const Report& report, int64_t others_min,
                         absl::Time now, const ReportingWorker& reporting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What Record() answers for `worker`, all but the incarnation and
  // `resumed`; ends a cut whose lease ran out.
  View ViewOfLocked(const Worker& worker, int64_t others_min, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves the state if there is a state_path and save_interval has passed
  // since the last save; a failure is logged.
  void SaveIfDueLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_save_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t cut_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cut_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Ids start from the time this coordinator started, so that a client of
  // an earlier one cannot end a cut of this one.
  uint64_t next_cut_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Until when cuts are refused (see CoordinatorOptions::relearn_time).
  absl::Time relearning_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Incarnations given out are term_ << 32 | (1 + a count): term_ grows
  // at every Open() and is saved before any is given, so they grow across
  // restarts, and starts at the wall clock's microseconds >> 32 or more, so
  // they are above the wall-clock incarnations of older workers.
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t incarnations_given_ ABSL_GUARDED_BY(mu_) = 0;
  // NoticePause()'s last call.
  absl::Time last_tick_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Whether GetCutStatus() found every live worker at cut_.
  bool cut_ready_ ABSL_GUARDED_BY(mu_) = false;
  // options_.elected: whether it leads, and until when (monotonic_now).
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time leading_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration cut_lease_ ABSL_GUARDED_BY(mu_);
  absl::Time cut_lease_end_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_CLOCK_COORDINATOR_H_
