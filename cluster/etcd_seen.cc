#include "cluster/etcd_seen.h"

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace ps::cluster {
namespace {

constexpr char kEtcdSeenFile[] = "/ETCD_SEEN";

}  // namespace

absl::StatusOr<std::optional<net::EtcdPosition>> ReadEtcdSeen(
    const std::string& data_dir) {
  std::ifstream in(data_dir + kEtcdSeenFile);
  if (!in) return std::optional<net::EtcdPosition>();
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ');
  net::EtcdPosition seen;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &seen.cluster_id) ||
      !absl::SimpleAtoi(parts[1], &seen.revision)) {
    return absl::DataLossError(absl::StrCat(data_dir, kEtcdSeenFile, ": \"",
                                            text,
                                            "\" is not CLUSTER_ID REVISION"));
  }
  return std::optional<net::EtcdPosition>(seen);
}

absl::Status WriteEtcdSeen(const std::string& data_dir,
                           const net::EtcdPosition& now) {
  return WriteFileDurably(
      data_dir + kEtcdSeenFile,
      absl::StrCat(now.cluster_id, " ", now.revision, "\n"));
}

absl::Status CheckEtcdWentOn(const net::EtcdPosition& seen,
                             const net::EtcdPosition& now) {
  if (now.cluster_id != seen.cluster_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd is another cluster (id ", now.cluster_id,
        ") than the one this data dir last saw (id ", seen.cluster_id,
        "): restored from a snapshot, or another etcd. Its fences may be "
        "older than this shard's; --accept_etcd_rollback starts anyway"));
  }
  if (now.revision < seen.revision) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd went backwards: its revision is ", now.revision,
        ", this data dir saw ", seen.revision,
        " (restored from an older snapshot?). Its fences may be older than "
        "this shard's; --accept_etcd_rollback starts anyway"));
  }
  return absl::OkStatus();
}

absl::Status CheckStoreWentOn(const std::string& data_dir,
                              CoordinationStore& store, bool accept_rollback) {
  ASSIGN_OR_RETURN(const std::optional<net::EtcdPosition> seen,
                   ReadEtcdSeen(data_dir));
  if (!seen.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const net::EtcdPosition now, store.Position());
  absl::Status went_on = CheckEtcdWentOn(*seen, now);
  if (!went_on.ok() && accept_rollback) {
    LOG(WARNING) << went_on.message() << "; starting (--accept_etcd_rollback)";
    return absl::OkStatus();
  }
  return went_on;
}

void RecordStoreSeen(const std::string& data_dir, CoordinationStore& store,
                     bool unchecked) {
  absl::StatusOr<net::EtcdPosition> now = store.Position();
  if (!now.ok()) return;
  if (!unchecked) {
    absl::StatusOr<std::optional<net::EtcdPosition>> seen =
        ReadEtcdSeen(data_dir);
    if (seen.ok() && seen->has_value()) {
      if (absl::Status went_on = CheckEtcdWentOn(**seen, *now); !went_on.ok()) {
        LOG_EVERY_N(ERROR, 30) << went_on.message();
        return;
      }
    }
  }
  if (absl::Status written = WriteEtcdSeen(data_dir, *now); !written.ok()) {
    LOG_EVERY_N(WARNING, 30) << "recording etcd's revision: " << written;
  }
}

}  // namespace ps::cluster
