// ps_server: one parameter-server shard. See README.md and --help.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/address_list.h"
#include "base/build_info.h"
#include "base/durable_file.h"
#include "base/exit_codes.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "net/etcd_client.h"
#include "net/etcd_security_flags.h"
#include "net/shard_directory.h"
#include "server/etcd_seen.h"
#include "server/server_flags.h"
#include "server/shard_server.h"

namespace {

// A bad flag: exit 64.
int Fail(const std::string& message) {
  return ps::FailUsage("ps_server", message);
}

// A shard that cannot start or stop cleanly: 69 or 70 (base/exit_codes.h).
int Fail(const absl::Status& status) {
  return ps::FailWith("ps_server", status);
}

// Parses the command line and sets up logging.
void InitProcess(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One parameter-server shard: sparse embedding tables over RocksDB, "
      "served over gRPC.\n\nExample:\n  ps_server --data_dir=/tmp/shard0 "
      "--listen=127.0.0.1:0 --shard_index=0 --num_shards=2");
  ps::SetVersionFlag("ps_server",
                     {"server/server_flags.cc", "net/server_tls_flags.cc",
                      "net/etcd_security_flags.cc"});
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with deadlock detection on, which records every
  // lock acquisition in a graph; the tests keep it, the binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
}

// Blocks the shutdown signals (SIGTERM, SIGINT) in this thread and every
// thread it creates later (gRPC's included); returns them for sigwait().
sigset_t BlockShutdownSignals() {
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  return shutdown_signals;
}

// Prints where the shard serves (the lines scripts and tests wait for) and
// logs it.
void AnnounceServing(const ps::server::ServerOptions& options,
                     const ps::server::ShardServer& server) {
  const std::string address = options.listen_address;
  const std::string host = address.substr(0, address.rfind(':'));
  std::printf("ps_server listening on %s:%d\n", host.c_str(), server.port());
  if (!options.health_listen.empty()) {
    std::printf(
        "ps_server health on %s:%d\n",
        options.health_listen.substr(0, options.health_listen.rfind(':'))
            .c_str(),
        server.health_port());
  }
  if (!options.metrics_listen.empty()) {
    std::printf("ps_server metrics on %s\n", server.metrics_address().c_str());
  }
  std::fflush(stdout);
  LOG(INFO) << "shard " << options.shard_index << " of " << options.num_shards
            << " serving " << options.store.data_dir << " on " << host << ":"
            << server.port() << " (durability="
            << (options.store.durability == ps::embedding::Durability::kWal
                    ? "wal"
                    : "periodic")
            << ")";
}

// The shard generation (net/shard_directory.h) a data dir last served at
// (or, in a replica's copy, the one its promotion is raising to), in its
// GENERATION file: generation 0 and not `served` without one.
constexpr char kGenerationFile[] = "/GENERATION";

struct DataDirGeneration {
  bool served = false;
  ps::net::ShardGeneration at;
  // Whether it is etcd's `now`: the data dir holds the shard's newest rows.
  bool Is(const ps::net::ShardGeneration& now) const {
    return served && at.generation == now.generation &&
           at.promotion == now.promotion;
  }
};

absl::StatusOr<DataDirGeneration> ReadDataDirGeneration(
    const std::string& data_dir) {
  DataDirGeneration read;
  std::ifstream in(data_dir + kGenerationFile);
  if (!in) return read;
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  absl::StatusOr<ps::net::ShardGeneration> parsed =
      ps::net::ParseGeneration(text);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(data_dir, kGenerationFile, ": ",
                                            parsed.status().message()));
  }
  read.served = true;
  read.at = *std::move(parsed);
  return read;
}

absl::Status WriteDataDirGeneration(const std::string& data_dir,
                                    uint64_t generation,
                                    const std::string& promotion) {
  return ps::WriteFileDurably(
      data_dir + kGenerationFile,
      ps::net::GenerationText(generation, promotion) + "\n");
}

// A promotion's token: what tells it from another one to the same
// generation.
std::string NewPromotionToken() {
  absl::BitGen random;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(random));
}

// What this shard says of itself in etcd: its address, index and count.
ps::net::ShardRecord OwnRecord(const ps::server::ServerOptions& options,
                               const std::string& advertise_address, int port) {
  ps::net::ShardRecord record;
  record.index = static_cast<int>(options.shard_index);
  record.num_shards =
      static_cast<int>(std::max(options.num_shards, options.shard_index + 1));
  // The flags' check made sure a wildcard --listen has --advertise_address.
  record.address = advertise_address;
  if (record.address.empty()) {
    record.address = absl::StrCat(
        options.listen_address.substr(0, options.listen_address.rfind(':')),
        ":", port);
  }
  return record;
}

// Under --etcd, a replica's watch of its primary's registration: once the
// key is gone (the primary stopped, or was paused or died past its lease),
// the replica is promoted (ShardServer::Promote()), registered in the
// primary's place, fenced by that registration, and runs for the
// coordinator. If another process took the index first (the primary came
// back, or another replica was promoted), or the shard is registered at
// another address than the one this replica follows, the replica cannot
// follow any more: it stops, to be copied again.
class PrimaryWatch {
 public:
  // `membership`: the job, the lease, whether the shard's processes find
  // their roles (replicas), and whether to take the shard over even when
  // the recorded in-sync set does not name this replica.
  // `primary_address`: the address this replica follows.
  PrimaryWatch(ps::net::EtcdClient* etcd, ps::server::ShardServer* server,
               ps::net::ShardRecord own, std::string primary_address,
               std::string data_dir,
               ps::server::EtcdMembershipOptions membership)
      : etcd_(etcd),
        server_(server),
        own_(std::move(own)),
        primary_address_(std::move(primary_address)),
        data_dir_(std::move(data_dir)),
        membership_(std::move(membership)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PrimaryWatch() { Stop(); }

  void Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }
  // Set once promoted: the registration (released before the server
  // stops, after FenceBy(nullptr)).
  std::unique_ptr<ps::net::LeasedKey> TakeRegistration() {
    return std::move(registration_);
  }
  // Set once promoted (null before, and while promoting).
  const ps::net::LeasedKey* registration() const {
    return promoted_.load() ? registration_.get() : nullptr;
  }

 private:
  void Run() {
    const std::string& job = membership_.job;
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      // Under --replicas a restart finds the role again (and copies anew).
      if (absl::Status following = server_->FollowingError();
          !following.ok() && membership_.replicas > 0) {
        LOG(ERROR) << "this replica stopped following its primary ("
                   << following << "); exiting, to be restarted and copy "
                   << "the shard again";
        failed_ = true;
        kill(getpid(), SIGTERM);
        return;
      }
      absl::StatusOr<ps::net::ShardRecord> primary =
          ps::net::FindShard(*etcd_, job, own_.index);
      if (primary.ok() && primary->address != primary_address_) {
        // Another process serves the shard (a replica promoted while this
        // one looked away): the feed followed is gone for good, so waiting
        // out --replica_follow_retry on it only keeps this replica out of
        // the new primary's in-sync set longer.
        LOG(ERROR) << "shard " << own_.index << " is served by "
                   << primary->address << " now, not by " << primary_address_
                   << " that this replica follows; exiting, to be restarted "
                      "and copy the shard from it";
        failed_ = true;
        kill(getpid(), SIGTERM);
        return;
      }
      if (!absl::IsNotFound(primary.status())) continue;
      // A shard that left the job (drained, the last one) and stopped:
      // nothing to take over; this replica stops too, as an operator
      // scaling the job down expects (exit 0).
      if (absl::StatusOr<uint32_t> shards = ps::net::MapShardCount(*etcd_, job);
          shards.ok() && *shards != 0 &&
          own_.index >= static_cast<int>(*shards)) {
        LOG(WARNING) << "shard " << own_.index
                     << " left the job (its slot map counts " << *shards
                     << " shards): this replica has nothing to take over "
                        "and stops";
        kill(getpid(), SIGTERM);
        return;
      }
      LOG(WARNING) << "shard " << own_.index
                   << "'s registration is gone: promoting this replica";
      if (absl::Status promoted = TakeOver(job); !promoted.ok()) {
        LOG(ERROR) << "promoting this replica failed (" << promoted
                   << "); stopping, to be copied again";
        failed_ = true;
        kill(getpid(), SIGTERM);
      }
      return;
    }
  }

  // Stops following, raises the shard's generation (so that the old
  // primary never takes the shard back), registers in its place, and only
  // then takes pushes. A failure before the registration leaves a replica
  // (its data dir still one), to be copied again.
  absl::Status TakeOver(const std::string& job) {
    const absl::Duration lease = membership_.lease;
    RETURN_IF_ERROR(server_->StopFollowing());
    const std::string promotion = NewPromotionToken();
    absl::StatusOr<uint64_t> raised_to;
    // The in-sync set may change between the check and the raise (a
    // replica added, or this one dropped): checked again, a few times.
    for (int attempt = 0; attempt < 3; ++attempt) {
      ASSIGN_OR_RETURN(const ps::net::ShardGeneration seen,
                       ps::net::ReadShardGeneration(*etcd_, job, own_.index));
      // The raise holds only while the in-sync set is as checked: a
      // primary that drops this replica meanwhile is not replaced by it.
      ASSIGN_OR_RETURN(const std::optional<int64_t> in_sync_revision,
                       CheckInSync(job, seen));
      // The promotion is written into the data dir before etcd: once etcd
      // holds it, however it is cut short, the data dir is the newest and
      // a start finishes it (ChooseRole()).
      RETURN_IF_ERROR(
          WriteDataDirGeneration(data_dir_, seen.generation + 1, promotion));
      raised_to = ps::net::RaiseShardGeneration(*etcd_, job, own_.index, seen,
                                                promotion, in_sync_revision);
      if (!absl::IsAborted(raised_to.status())) break;
    }
    ASSIGN_OR_RETURN(const uint64_t generation, std::move(raised_to));
    ASSIGN_OR_RETURN(const ps::net::ShardGeneration raised,
                     ps::net::ReadShardGeneration(*etcd_, job, own_.index));
    if (raised.generation != generation || raised.promotion != promotion) {
      return absl::AbortedError(
          absl::StrCat("shard ", own_.index, "'s generation rose past ",
                       generation, " at once (another promotion)"));
    }
    // The generation is raised: this replica alone may take the shard, so
    // etcd out of reach for a moment is waited out.
    const absl::Time give_up = absl::Now() + std::max(lease, absl::Seconds(10));
    while (true) {
      absl::StatusOr<std::unique_ptr<ps::net::LeasedKey>> registered =
          ps::net::RegisterShard(etcd_, job, own_, lease, raised);
      if (registered.ok()) {
        registration_ = *std::move(registered);
        break;
      }
      const bool transient = absl::IsUnavailable(registered.status()) ||
                             absl::IsDeadlineExceeded(registered.status());
      if (!transient || absl::Now() >= give_up) return registered.status();
      LOG(WARNING) << "registering the promoted replica: "
                   << registered.status() << "; retrying";
      absl::SleepFor(absl::Milliseconds(250));
    }
    server_->FenceBy(registration_.get());
    promoted_ = true;
    RETURN_IF_ERROR(server_->Promote());
    RETURN_IF_ERROR(server_->RecordInSyncSet());
    LOG(INFO) << "registered in etcd as " << ps::net::ShardsPrefix(job)
              << own_.index << " = " << own_.address
              << " (promoted; generation " << generation << ")";
    return server_->CampaignForCoordinator(own_.address, lease);
  }

  // The in-sync set's mod revision when the primary's recorded set (at
  // generation `seen`) names this replica; nothing when it does not but
  // --allow_unclean_promotion says to go on anyway; FAILED_PRECONDITION
  // otherwise: the replica may lack acknowledged pushes.
  absl::StatusOr<std::optional<int64_t>> CheckInSync(
      const std::string& job, const ps::net::ShardGeneration& seen) {
    ASSIGN_OR_RETURN(const auto ids, server_->FeedAndFollower());
    absl::StatusOr<ps::net::InSyncSet> set =
        ps::net::ReadInSyncSet(*etcd_, job, own_.index);
    if (!set.ok() && !absl::IsNotFound(set.status())) return set.status();
    if (set.ok() && set->generation == seen.generation &&
        set->Holds(ids.first, ids.second)) {
      return std::optional<int64_t>(set->mod_revision);
    }
    const std::string why =
        set.ok()
            ? absl::StrCat("shard ", own_.index, "'s recorded in-sync set (",
                           ps::net::InSyncText(*set),
                           ") does not name this replica (feed ", ids.first,
                           ", follower ", ids.second, ")")
            : absl::StrCat("shard ", own_.index,
                           " has no recorded in-sync set");
    if (membership_.allow_unclean_promotion) {
      LOG(WARNING) << why
                   << "; promoting anyway (--allow_unclean_promotion): "
                      "pushes the primary acknowledged may be lost";
      return std::optional<int64_t>();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        why,
        ": it may lack pushes the primary acknowledged, so it is not "
        "promoted (--allow_unclean_promotion promotes it anyway)"));
  }

  ps::net::EtcdClient* const etcd_;
  ps::server::ShardServer* const server_;
  const ps::net::ShardRecord own_;
  const std::string primary_address_;
  const std::string data_dir_;
  const ps::server::EtcdMembershipOptions membership_;
  std::unique_ptr<ps::net::LeasedKey> registration_;
  absl::Notification stop_;
  std::thread thread_;

  std::atomic<bool> promoted_{false};

 public:
  std::atomic<bool> failed_{false};
};

// The shard's record in etcd while it serves (--etcd), or none; a
// replica's watch of its primary instead.
struct EtcdPresence {
  std::unique_ptr<ps::net::EtcdClient> etcd;
  std::unique_ptr<ps::net::LeasedKey> registration;
  std::unique_ptr<PrimaryWatch> watch;
  // Under --replicas, a new shard's claim (ChooseRole()), held until this
  // process registered as its primary.
  std::unique_ptr<ps::net::LeasedKey> claim;
};

// With --etcd: a client of the job's etcd, set in `options` so that the
// shard follows the job's slot map from its start.
absl::StatusOr<EtcdPresence> ConnectToEtcd(
    const ps::server::EtcdMembershipOptions& membership,
    ps::server::ServerOptions* options) {
  EtcdPresence presence;
  if (!membership.enabled()) return presence;
  ps::net::EtcdOptions etcd_options;
  etcd_options.endpoints = ps::SplitAddressList(membership.endpoints);
  RETURN_IF_ERROR(ps::net::AddEtcdSecurityFromFlags(&etcd_options));
  ASSIGN_OR_RETURN(presence.etcd, ps::net::EtcdClient::Connect(etcd_options));
  options->etcd = presence.etcd.get();
  options->job = membership.job;
  // A replica outlasts its dead primary's lease, to be promoted.
  options->replica_follow_retry =
      std::max(options->replica_follow_retry, 3 * membership.lease);
  return presence;
}

// Under --etcd: refuses (FAILED_PRECONDITION, exit 70) a data dir whose
// etcd went backwards since it last saw it, unless `accept_rollback`
// (--accept_etcd_rollback).
absl::Status CheckEtcdWentOn(const std::string& data_dir,
                             ps::net::EtcdClient& etcd, bool accept_rollback) {
  ASSIGN_OR_RETURN(const std::optional<ps::net::EtcdPosition> seen,
                   ps::server::ReadEtcdSeen(data_dir));
  if (!seen.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const ps::net::EtcdPosition now, etcd.Position());
  absl::Status went_on = ps::server::CheckEtcdWentOn(*seen, now);
  if (!went_on.ok() && accept_rollback) {
    LOG(WARNING) << went_on.message() << "; starting (--accept_etcd_rollback)";
    return absl::OkStatus();
  }
  return went_on;
}

// Under --etcd: records where etcd is in the data dir (after a check that
// it went on, unless `unchecked`); a failure is logged, not fatal.
void RecordEtcdSeen(const std::string& data_dir, ps::net::EtcdClient& etcd,
                    bool unchecked) {
  absl::StatusOr<ps::net::EtcdPosition> now = etcd.Position();
  if (!now.ok()) return;
  if (!unchecked) {
    absl::StatusOr<std::optional<ps::net::EtcdPosition>> seen =
        ps::server::ReadEtcdSeen(data_dir);
    if (seen.ok() && seen->has_value()) {
      if (absl::Status went_on = ps::server::CheckEtcdWentOn(**seen, *now);
          !went_on.ok()) {
        LOG_EVERY_N(ERROR, 30) << went_on.message();
        return;
      }
    }
  }
  if (absl::Status written = ps::server::WriteEtcdSeen(data_dir, *now);
      !written.ok()) {
    LOG_EVERY_N(WARNING, 30) << "recording etcd's revision: " << written;
  }
}

// --replica_of_shard=N under --etcd: the address shard N of the job is
// registered at (waiting up to --join_wait_s for it), and this replica's index.
absl::Status FindPrimary(const ps::server::EtcdMembershipOptions& membership,
                         ps::server::ServerOptions* options,
                         const EtcdPresence& presence) {
  // The flags' check made sure an index comes with etcd.
  if (membership.replica_of_shard < 0 || presence.etcd == nullptr) {
    return absl::OkStatus();
  }
  const uint32_t index = static_cast<uint32_t>(membership.replica_of_shard);
  const absl::Time give_up = absl::Now() + membership.join_wait;
  while (true) {
    absl::StatusOr<ps::net::ShardRecord> primary = ps::net::FindShard(
        *presence.etcd, membership.job, static_cast<int>(index));
    if (primary.ok()) {
      options->replica_of = primary->address;
      options->shard_index = index;
      options->num_shards = static_cast<uint32_t>(primary->num_shards);
      return absl::OkStatus();
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", membership.job,
          " is not registered in etcd: ", primary.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// The address this process will register under, where the options say it
// before the server starts (empty for --listen on port 0).
std::string AdvertisedAddress(
    const ps::server::ServerOptions& options,
    const ps::server::EtcdMembershipOptions& membership) {
  if (!membership.advertise_address.empty()) {
    return membership.advertise_address;
  }
  if (absl::EndsWith(options.listen_address, ":0")) return "";
  return options.listen_address;
}

// ChooseRole()'s replica role: a replica of shard `index`, registered as
// `primary`; a data dir of an older generation is emptied for the copy, one
// of the current generation refused.
absl::Status FollowRegisteredPrimary(int index,
                                     const ps::net::ShardRecord& primary,
                                     const DataDirGeneration& own,
                                     const ps::net::ShardGeneration& generation,
                                     bool replica_copy,
                                     ps::server::ServerOptions* options,
                                     int* replica_of_shard) {
  const std::string& dir = options->store.data_dir;
  std::error_code error;
  const bool holds_rows =
      std::filesystem::exists(dir) && !std::filesystem::is_empty(dir, error);
  if (holds_rows && !replica_copy) {
    if (!own.served || own.at.generation >= generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", index, " is served by ", primary.address, ", and ", dir,
          " holds the shard's rows of its current generation too: give this "
          "replica an empty --data_dir"));
    }
    options->discard_superseded_data_dir = true;
  }
  if (!options->restore_from.empty()) {
    LOG(WARNING) << "shard " << index
                 << " is served: this replica copies it, not --restore_from";
    options->restore_from.clear();
  }
  // FindPrimary() looks the address up (again).
  *replica_of_shard = index;
  LOG(INFO) << "shard " << index << " is served by " << primary.address
            << " (generation " << generation.generation
            << "): this process is its replica";
  return absl::OkStatus();
}

// --replicas under --etcd: whether this process serves its shard as the
// primary or (setting membership->replica_of_shard) as a replica of the
// process registered as the shard. Only a data dir that holds the shard's
// newest rows becomes the primary; a replica's copy does only by its promotion
// (PrimaryWatch), which a start finishes once etcd holds it, never
// otherwise (it might lack what the primary took since it stopped
// following).
absl::Status ChooseRole(ps::server::EtcdMembershipOptions* membership,
                        ps::server::ServerOptions* options,
                        EtcdPresence* presence) {
  if (membership->replicas == 0) return absl::OkStatus();
  const std::string& job = membership->job;
  const int index = static_cast<int>(options->shard_index);
  const std::string& dir = options->store.data_dir;
  const std::string own_address = AdvertisedAddress(*options, *membership);
  const absl::Duration lease = membership->lease;
  const absl::Time give_up = absl::Now() + membership->join_wait;
  ps::net::EtcdClient& etcd = *presence->etcd;
  while (true) {
    // The registration first: a promotion raises the generation before it
    // registers, so the generation read next is at least the registered
    // process's.
    absl::StatusOr<ps::net::ShardRecord> primary =
        ps::net::FindShard(etcd, job, index);
    if (!primary.ok() && !absl::IsNotFound(primary.status())) {
      return primary.status();
    }
    ASSIGN_OR_RETURN(const ps::net::ShardGeneration generation,
                     ps::net::ReadShardGeneration(etcd, job, index));
    const bool replica_copy = ps::server::IsReplicaDataDir(dir);
    ASSIGN_OR_RETURN(const DataDirGeneration own, ReadDataDirGeneration(dir));
    // (A replica's copy holds a generation only while promoted.)
    if (own.served && !replica_copy &&
        own.at.generation > generation.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " served shard ", index, " at generation ", own.at.generation,
          ", newer than etcd's ", generation.generation,
          ": etcd lost its state, or --job names another job"));
    }
    const bool newest = own.Is(generation);
    std::string waiting_for;
    if (primary.ok() && primary->address != own_address) {
      return FollowRegisteredPrimary(index, *primary, own, generation,
                                     replica_copy, options,
                                     &membership->replica_of_shard);
    } else if (newest && generation.mod_revision != 0) {
      // No other process serves the shard (or this one's previous run,
      // whose lease RegisterShard() waits out). A replica's copy at the
      // shard's generation is one whose promotion raised it and was then
      // cut short: only it holds that promotion's token. (One cut short
      // before etcd took it is not finished: the primary it left may have
      // served since, at the old generation.)
      return absl::OkStatus();
    } else if (!replica_copy && generation.mod_revision == 0 &&
               (!own.served || newest)) {
      // A new shard (no generation yet): one process claims it, a data dir
      // that served it at generation 0 (a first registration cut short) or
      // an empty one.
      absl::StatusOr<std::unique_ptr<ps::net::LeasedKey>> claim =
          ps::net::ClaimNewShard(presence->etcd.get(), job, index, lease);
      if (claim.ok()) {
        LOG(INFO) << "shard " << index
                  << " is new: this process claimed it, as its primary";
        presence->claim = *std::move(claim);
        return absl::OkStatus();
      }
      // Another process claimed it, or registered as it, first.
      if (!absl::IsAlreadyExists(claim.status()) &&
          !absl::IsFailedPrecondition(claim.status())) {
        return claim.status();
      }
      waiting_for = " is new, and another process claimed the shard";
    } else {
      waiting_for = replica_copy ? " holds a replica's copy, which becomes the "
                                   "primary only by a promotion etcd holds"
                                 : absl::StrCat(
                                       " does not hold the shard's newest "
                                       "rows (generation ",
                                       generation.generation, ")");
    }
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", index, " of job ", job,
          ": this process can be neither its primary nor a replica yet: ", dir,
          waiting_for, ". Waited --join_wait_s"));
    }
    LOG_EVERY_N(INFO, 40) << "shard " << index << ": " << dir << waiting_for;
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// With --etcd: registers the shard under its job and runs for the job's
// clock coordinator.
absl::Status RegisterInEtcd(const ps::server::ServerOptions& options,
                            const ps::server::EtcdMembershipOptions& membership,
                            ps::server::ShardServer& server,
                            EtcdPresence* presence) {
  if (presence->etcd == nullptr) return absl::OkStatus();
  const ps::net::ShardRecord record =
      OwnRecord(options, membership.advertise_address, server.port());
  if (!options.replica_of.empty()) {
    // The primary holds the index; this replica takes it over when the
    // primary's registration goes.
    presence->watch = std::make_unique<PrimaryWatch>(
        presence->etcd.get(), &server, record, options.replica_of,
        options.store.data_dir, membership);
    return absl::OkStatus();
  }
  // A data dir the shard failed over from (a replica took its place since
  // it last served) is stale: it must not serve the shard again.
  ASSIGN_OR_RETURN(const ps::net::ShardGeneration generation,
                   ps::net::ReadShardGeneration(*presence->etcd, membership.job,
                                                record.index));
  ASSIGN_OR_RETURN(const DataDirGeneration own,
                   ReadDataDirGeneration(options.store.data_dir));
  const uint64_t own_generation = own.at.generation;
  if (generation.generation > own_generation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", record.index, " failed over to a replica (generation ",
        generation.generation, ") since ", options.store.data_dir,
        " last served it (generation ", own_generation,
        "): its rows are stale. Start this process as a replica "
        "(--replica_of_shard=",
        record.index, ") on an empty --data_dir"));
  }
  if (own.served && own_generation == generation.generation &&
      own.at.promotion != generation.promotion) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.store.data_dir, " was being promoted to shard ", record.index,
        "'s generation ", own_generation,
        ", which another replica's promotion took: its rows are stale. Start "
        "this process as a replica on an empty --data_dir"));
  }
  if (own_generation > generation.generation) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.store.data_dir, " served shard ", record.index,
                     " at generation ", own_generation, ", newer than etcd's ",
                     generation.generation,
                     ": etcd lost its state, or --job names another job"));
  }
  // Written before the registration: a crash between leaves a data dir
  // that may serve again (nothing was acknowledged: pushes wait for the
  // registration).
  RETURN_IF_ERROR(WriteDataDirGeneration(
      options.store.data_dir, generation.generation, generation.promotion));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ps::net::LeasedKey> registered,
      ps::net::RegisterShard(presence->etcd.get(), membership.job, record,
                             membership.lease, generation));
  presence->registration = std::move(registered);
  presence->claim.reset();
  // Before any push is taken: from now on no push is acknowledged that a
  // replica the record names lacks.
  RETURN_IF_ERROR(server.RecordInSyncSet());
  LOG(INFO) << "registered in etcd as " << ps::net::ShardsPrefix(membership.job)
            << record.index << " = " << record.address;
  server.FenceBy(presence->registration.get());
  RETURN_IF_ERROR(server.JoinJob(membership.join_wait));
  return server.CampaignForCoordinator(record.address, membership.lease);
}

// Waits for one of `shutdown_signals` (or an admin drain, which raises
// SIGTERM), then leaves etcd (if registered), drains for --drain_seconds and
// stops the server; meanwhile, under --etcd, records where etcd is in
// `data_dir` every 10 s. The exit code: 0 once it stopped cleanly, 70
// otherwise.
int ServeUntilSignal(const sigset_t& shutdown_signals,
                     const ps::server::ServerProcessOptions& process,
                     std::unique_ptr<ps::server::ShardServer> server,
                     EtcdPresence presence) {
  const std::string& data_dir = process.server.store.data_dir;
  // Under --replicas a primary whose registration is lost for good (a
  // replica took the shard while it was paused or cut off) stops, to start
  // again as a replica.
  auto registration_lost = [&presence, &process] {
    const ps::net::LeasedKey* registration =
        presence.registration != nullptr ? presence.registration.get()
        : presence.watch != nullptr      ? presence.watch->registration()
                                         : nullptr;
    return process.etcd.replicas > 0 && registration != nullptr &&
           registration->lost();
  };
  int signal_number = 0;
  bool lost = false;
  for (int second = 1;; ++second) {
    const timespec one_second = {1, 0};
    signal_number = sigtimedwait(&shutdown_signals, nullptr, &one_second);
    if (signal_number > 0) break;
    // Where etcd is, every 10 s: a restore from a snapshot older than
    // that is refused at the next start.
    if (presence.etcd != nullptr && second % 10 == 0) {
      RecordEtcdSeen(data_dir, *presence.etcd, /*unchecked=*/false);
    }
    if (registration_lost()) {
      LOG(ERROR) << "this shard's registration is lost for good (another "
                    "process serves the shard): stopping, to start again "
                    "as a replica";
      lost = true;
      break;
    }
  }
  bool failed = lost;
  if (presence.watch != nullptr) {
    presence.watch->Stop();
    failed = failed || presence.watch->failed_.load();
    presence.registration = presence.watch->TakeRegistration();
  }
  // The etcd client outlives the server, which follows the slot map with it.
  auto keep_etcd = std::move(presence.etcd);
  const absl::Duration drain = process.drain;
  LOG(INFO) << (lost ? std::string("the shard is lost")
                     : absl::StrCat("signal ", signal_number,
                                    " (or an admin drain)"))
            << ": draining for up to " << absl::ToDoubleSeconds(drain) << " s";
  // Still registered (and fenced by it) while pushes stop and the replicas
  // catch up: one promoted once this shard lets go has every push it
  // acknowledged.
  server->HandOver(absl::Now() + drain / 2);
  absl::Status stopped = server->Shutdown(drain / 2);
  server->FenceBy(nullptr);
  // Workers that look the shards up from now on do not find this one.
  presence.registration.reset();
  server.reset();
  if (!stopped.ok()) {
    LOG(ERROR) << "shutdown: " << stopped;
    return ps::kExitFailed;
  }
  if (failed) return ps::kExitFailed;
  LOG(INFO) << "stopped cleanly";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  InitProcess(argc, argv);
  const sigset_t shutdown_signals = BlockShutdownSignals();
  absl::StatusOr<ps::server::ServerProcessOptions> process =
      ps::server::ServerProcessOptionsFromFlags();
  if (!process.ok()) return Fail(std::string(process.status().message()));
  // A stop asked over the admin API takes the path SIGTERM takes.
  process->server.drain = [] { kill(getpid(), SIGTERM); };
  ps::server::ServerOptions& options = process->server;
  ps::server::EtcdMembershipOptions& membership = process->etcd;

  absl::StatusOr<EtcdPresence> presence = ConnectToEtcd(membership, &options);
  if (!presence.ok()) return Fail(std::string(presence.status().message()));
  if (presence->etcd != nullptr) {
    if (absl::Status went_on =
            CheckEtcdWentOn(options.store.data_dir, *presence->etcd,
                            membership.accept_etcd_rollback);
        !went_on.ok()) {
      return Fail(went_on);
    }
  }
  if (absl::Status role = ChooseRole(&membership, &options, &*presence);
      !role.ok()) {
    return Fail(role);
  }
  if (absl::Status found = FindPrimary(membership, &options, *presence);
      !found.ok()) {
    return Fail(found);
  }
  auto server = ps::server::ShardServer::Start(options);
  // Options that do not go together are a bad command (64), as flags are.
  if (!server.ok() && absl::IsInvalidArgument(server.status()))
    return Fail(std::string(server.status().message()));
  // Anything else (a port in use, a data dir of another shard): 70; 69
  // means a shard this binary needed did not answer, which is not this.
  if (!server.ok()) {
    Fail(server.status());
    return ps::kExitFailed;
  }
  const absl::Status registered =
      RegisterInEtcd(options, membership, **server, &*presence);
  if (absl::IsInvalidArgument(registered))
    return Fail(std::string(registered.message()));
  if (!registered.ok()) return Fail(registered);
  if (presence->etcd != nullptr) {
    RecordEtcdSeen(options.store.data_dir, *presence->etcd,
                   /*unchecked=*/membership.accept_etcd_rollback);
  }
  AnnounceServing(options, **server);
  return ServeUntilSignal(shutdown_signals, *process, *std::move(server),
                          *std::move(presence));
}
