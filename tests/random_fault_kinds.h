// The faults random_faults_test draws from: their kinds, the names its
// schedule prints and PS_CHAOS_FAULTS (deploy/chaos.sh --faults) picks them
// by, and the environment numbers that size a run.

#ifndef PS_TESTS_RANDOM_FAULT_KINDS_H_
#define PS_TESTS_RANDOM_FAULT_KINDS_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ps::testing {

// `name` from the environment as a number, or `fallback`.
inline int64_t EnvNumber(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  int64_t value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

enum class Fault {
  kKillPrimary,
  kKillPrimaryAndDisk,
  kKillReplica,
  kPausePrimary,
  kRestartEtcd,
  kMoveSlots,
  kRebalance,
  kCheckpoint,
  kDrainShard,
  kAddShard,
  kKillMover,
  kSlowLink,
  kCount,
};

// What the schedule prints, and the short name PS_CHAOS_FAULTS (chaos.sh
// --faults) picks a kind by.
struct FaultNames {
  const char* line;
  const char* short_name;
};

inline FaultNames NamesOf(Fault fault) {
  switch (fault) {
    case Fault::kKillPrimary:
      return {"kill -9 a primary", "kill-primary"};
    case Fault::kKillPrimaryAndDisk:
      return {"kill -9 a primary, disk lost", "kill-primary-disk"};
    case Fault::kKillReplica:
      return {"kill -9 a replica", "kill-replica"};
    case Fault::kPausePrimary:
      return {"SIGSTOP a primary past its lease", "pause-primary"};
    case Fault::kRestartEtcd:
      return {"kill -9 etcd, start it again", "restart-etcd"};
    case Fault::kMoveSlots:
      return {"ps_admin move-slots", "move-slots"};
    case Fault::kRebalance:
      return {"ps_admin rebalance", "rebalance"};
    case Fault::kCheckpoint:
      return {"ps_admin checkpoint", "checkpoint"};
    case Fault::kDrainShard:
      return {"ps_admin drain-shard", "drain-shard"};
    case Fault::kAddShard:
      return {"a shard added, then rebalance", "add-shard"};
    case Fault::kKillMover:
      return {"kill -9 ps_admin mid-move", "kill-mover"};
    case Fault::kSlowLink:
      return {"latency on a primary's links", "slow-link"};
    default:
      return {"?", "?"};
  }
}

inline const char* FaultName(Fault fault) { return NamesOf(fault).line; }

// The kinds PS_CHAOS_FAULTS names (comma-separated short names; empty or
// unset: every kind), or INVALID_ARGUMENT naming one it does not know.
inline absl::StatusOr<std::vector<Fault>> KindsToDraw() {
  std::vector<Fault> every;
  for (int kind = 0; kind < static_cast<int>(Fault::kCount); ++kind)
    every.push_back(static_cast<Fault>(kind));
  const char* text = std::getenv("PS_CHAOS_FAULTS");
  if (text == nullptr || *text == '\0') return every;
  std::vector<Fault> chosen;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    auto found = std::find_if(every.begin(), every.end(), [&](Fault fault) {
      return name == NamesOf(fault).short_name;
    });
    if (found == every.end()) {
      std::string known;
      for (Fault fault : every)
        absl::StrAppend(&known, known.empty() ? "" : ", ",
                        NamesOf(fault).short_name);
      return absl::InvalidArgumentError(
          absl::StrCat("PS_CHAOS_FAULTS: no fault is called \"", name,
                       "\"; one of ", known));
    }
    chosen.push_back(*found);
  }
  return chosen;
}

}  // namespace ps::testing

#endif  // PS_TESTS_RANDOM_FAULT_KINDS_H_
