// File: cluster/coordinator_election.h
//
// Under --etcd, the job's clock coordinator is whichever shard holds the key
// /ps/<job>/coordinator (cluster/shard_directory.h's CoordinatorKey), which it
// creates by a compare-and-swap under an etcd lease of its own and keeps
// alive by renewing it. Every shard runs an election: while another holds
// the key it looks again every `poll`; once the holder's lease ran out
// (killed, paused, cut off) the key goes and the first shard to create it
// leads. Winning calls Leadership::Lead() with the workers
// registered in etcd and a term above every earlier coordinator's (kept
// at /ps/<job>/coordinator_epoch); each renewal extends the leadership by
// the lease's time left, measured from before the renewal was sent, so a
// coordinator stops answering before etcd could let another lead. A key
// that goes while its holder's lease lives (deleted by hand) is taken, but
// not led from until that lease (recorded at /ps/<job>/coordinator_lease)
// is gone, or two leases have passed: the old coordinator, finding
// the key another's at its next renewal, stops answering and revokes it.
//
// Does not own the client or the coordinator, which must outlive it.
// Thread-safe.

#ifndef PS_CLUSTER_COORDINATOR_ELECTION_H_
#define PS_CLUSTER_COORDINATOR_ELECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"

namespace ps::cluster {

struct ElectionOptions {
  std::string job;
  // Who this shard is, as the key says it: "<shard_index> <address>".
  uint32_t shard_index = 0;
  std::string address;
  // The lease that holds the key: a coordinator that dies is replaced
  // this long after. Default: 10 s (ps_server --etcd_lease_s).
  absl::Duration ttl = absl::Seconds(10);
  // How often a shard that does not lead looks at the key. Default: 250 ms.
  absl::Duration poll = absl::Milliseconds(250);
};

// "/ps/<job>/coordinator_epoch": the last elected coordinator's term (the
// key keeps the name every release reads).
std::string CoordinatorTermKey(const std::string& job);
// "/ps/<job>/coordinator_lease": the etcd lease it holds its key under.
std::string CoordinatorLeaseKey(const std::string& job);

// What an election drives: the job's clock coordinator
// (server::ClockCoordinator implements it).
class Leadership {
 public:
  virtual ~Leadership() = default;
  // The term leading would start at: above this coordinator's last, and at
  // least `min_term`.
  virtual uint64_t NextTerm(uint64_t min_term) = 0;
  // Starts leading at NextTerm(min_term), expecting `workers` (those
  // registered in etcd), until StepDown() or `leading_until`; the term.
  virtual uint64_t Lead(const std::vector<RegisteredWorker>& workers,
                        uint64_t min_term, absl::Time leading_until) = 0;
  // Leads on until `leading_until` (a renewal of the key's lease).
  virtual void ExtendLeadership(absl::Time leading_until) = 0;
  virtual void StepDown() = 0;
};

class CoordinatorElection {
 public:
  // Starts campaigning on a thread of its own. INVALID_ARGUMENT for a bad
  // job or a ttl under a second.
  static absl::StatusOr<std::unique_ptr<CoordinatorElection>> Start(
      CoordinationStore* etcd, Leadership* clocks,
      const ElectionOptions& options);

  // Steps down and gives the key up (revoking its lease), so that another
  // shard leads at once.
  ~CoordinatorElection();

  bool leading() const { return leading_.load(); }

 private:
  CoordinatorElection(CoordinationStore* etcd, Leadership* clocks,
                      const ElectionOptions& options)
      : etcd_(etcd), clocks_(clocks), options_(options) {}
  void Run();
  // One try at taking the key; whether it was taken.
  bool Campaign();
  // Renews the lease of a leader; false once leadership is lost.
  bool Renew();
  // TakeOver() with what etcd knows: the last term (this one recorded
  // above it first) and the registered workers. False, the key given up,
  // when either cannot be read or the term not recorded.
  bool Lead(absl::Time leading_until);
  // Whether the coordinator that held the key under `lease` (another's) may
  // still answer: its lease lives, or etcd cannot say, for at most two
  // leases and a second of waiting.
  bool LastLeaderMayAnswer(int64_t lease);

  CoordinationStore* const etcd_;
  Leadership* const clocks_;
  const ElectionOptions options_;
  std::string key_, value_;
  int64_t lease_ = 0;  // the thread's
  // The thread's: the lease of the last other holder of the key seen, which
  // this shard waits out before it leads (0: none to wait for), and since
  // when it has waited (InfinitePast: not waiting).
  int64_t holder_lease_ = 0;
  absl::Time waiting_since_ = absl::InfinitePast();
  std::atomic<bool> leading_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ps::cluster

#endif  // PS_CLUSTER_COORDINATOR_ELECTION_H_
