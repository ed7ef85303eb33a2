// A randomized fault schedule (a nemesis, as Jepsen's): etcd, three shards
// of two processes each (ps_server --replicas=1 --replication=sync, which
// find their roles), and two workers' clients pushing +1 to every key over
// and over, counting what was acknowledged. Every few seconds a fault is
// drawn from the seed: a primary killed (kill -9; with its disk or not), a
// replica killed, a primary paused past its lease then resumed, etcd killed
// and started again, a slot move, a rebalance, a shard drained, a shard
// added (then a rebalance), a move whose ps_admin is killed mid-move,
// latency on a primary's links, a checkpoint. Every process is
// reached through a proxy of its own (it advertises the proxy's address),
// which is how a link turns slow. A supervisor starts again, on its data
// dir, every process that exited, and nothing else; a shard that left the
// job (drained, the last one) is stopped, as an operator scales down. At
// the end every key holds at least the pushes acknowledged and at most
// those plus the ones whose answer never came (a push that failed after its
// retries may be applied or not); anything else is a lost or a doubled
// update, and fails the test, as does a fault after which pushes do not go
// on within 120 s. PS_CHAOS_FAULTS (chaos.sh --faults) draws from some kinds
// only.
//
//   PS_CHAOS_SEED=S PS_CHAOS_SECONDS=N bazel run //tests:random_faults_test
//
// or deploy/chaos.sh --random --seed=S --minutes=M. The schedule and a table
// (faults by kind, recovery times, pushes, lost, doubled) are printed; the
// seed replays the same schedule (the timing of what it meets varies).

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/counting_pusher.h"
#include "tests/delay_proxy.h"
#include "tests/etcd_process.h"
#include "tests/ps_admin_run.h"
#include "tests/random_fault_kinds.h"
#include "tests/server_process.h"
#include "tests/test_files.h"

namespace ps::testing {
namespace {

constexpr char kJob[] = "nemesis";
constexpr int kDim = 2;
constexpr char kTable[] = "t";
constexpr int kShards = 3;
// Shards added by the schedule stop at this count.
constexpr int kMaxShards = 5;
// A move whose ps_admin died ends by itself this long after.
constexpr char kMoveLease[] = "--move_lease_s=10";
constexpr int kLeaseSeconds = 2;

class RandomFaultsTest : public ::testing::Test {
 protected:
  // One machine of a shard, as a StatefulSet's pod: its data dir and its
  // address stay; the supervisor starts it again once it exits, a second
  // after (and not more often), until its shard left the job (retired).
  struct Process {
    std::string dir;
    int shard = 0;
    int port = 0;
    int starts = 0;
    bool retired = false;
    absl::Time exited_at = absl::InfinitePast();
    // In front of `port`: the address the process advertises.
    std::unique_ptr<DelayProxy> proxy;
    std::unique_ptr<ServerProcess> server;
  };

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd =
        EtcdProcess::Start("random_faults_etcd");
    ASSERT_OK(etcd);
    etcd_ = *std::move(etcd);
    absl::StatusOr<std::unique_ptr<cluster::CoordinationStore>> client =
        etcd_->Connect();
    ASSERT_OK(client);
    client_ = *std::move(client);
    for (uint64_t i = 0; i < 600; ++i) keys_.push_back(i * 2654435761ULL + 7);
    dir_ = FreshTestDir("random_faults");
  }

  std::vector<std::string> Flags(const Process& process) const {
    return {"--etcd=" + etcd_->endpoint(),
            absl::StrCat("--job=", kJob),
            absl::StrCat("--etcd_lease_s=", kLeaseSeconds),
            "--cache_mb=32",
            "--data_dir=" + process.dir,
            absl::StrCat("--shard_index=", process.shard),
            absl::StrCat("--num_shards=", kShards),
            "--replicas=1",
            "--replication=sync",
            absl::StrCat("--listen=127.0.0.1:", process.port),
            "--advertise_address=" + process.proxy->address()};
  }

  // The two processes of shard `shard` (new ones, or the ones it had before
  // it left the job, on their data dirs), started at once: one claims the
  // shard, one follows.
  void StartShard(int shard) {
    std::vector<Process*> pair;
    for (Process& process : processes_)
      if (process.shard == shard) pair.push_back(&process);
    if (pair.empty()) {
      const std::vector<int> ports = UnusedLoopbackPorts(2);
      for (int copy = 0; copy < 2; ++copy) {
        Process& process = processes_.emplace_back();
        process.shard = shard;
        process.port = ports[copy];
        process.dir = absl::StrCat(dir_, "/shard", shard, "_", copy);
        absl::StatusOr<std::unique_ptr<DelayProxy>> proxy = DelayProxy::Start(
            absl::StrCat("127.0.0.1:", process.port), absl::ZeroDuration());
        EXPECT_OK(proxy);
        if (!proxy.ok()) return;
        process.proxy = *std::move(proxy);
        pair.push_back(&process);
      }
    }
    std::vector<std::thread> starting;
    for (Process* process : pair) {
      process->retired = false;
      starting.emplace_back([this, process] { Start(*process); });
    }
    for (std::thread& thread : starting) thread.join();
  }

  // Sleeps `length`, supervising meanwhile.
  void WaitSupervising(absl::Duration length) {
    const absl::Time end = absl::Now() + length;
    while (absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(100));
      Supervise();
    }
  }

  // "shard1_0": a process's data dir, short.
  static std::string Name(const Process& process) {
    return std::filesystem::path(process.dir).filename().string();
  }

  // Starts `process` on its data dir, as a supervisor would.
  void Start(Process& process) {
    auto started = ServerProcess::Start(
        Flags(process), absl::Seconds(120),
        absl::StrCat(process.dir, ".log", ++process.starts));
    if (started.ok()) {
      process.server = *std::move(started);
    } else {
      Say(absl::StrCat("  could not start ", Name(process), ": ",
                       started.status().ToString()));
      process.server.reset();
    }
  }

  std::unique_ptr<client::PsClient> Connect(uint64_t incarnation) {
    return ConnectThroughEtcd(*client_, kJob, incarnation, kTable, kDim);
  }

  static std::string Role(const ServerProcess& server) {
    auto admin = Admin::NewStub(server.channel());
    ShardStatsResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    if (!admin->ShardStats(&context, ShardStatsRequest(), &response).ok())
      return "";
    return response.replication().role();
  }

  // The running process of shard `shard` whose role is `primary` (or a
  // replica), or null.
  Process* Find(int shard, bool primary) {
    for (Process& process : processes_) {
      if (process.shard != shard || process.server == nullptr) continue;
      const std::string role = Role(*process.server);
      if (role.empty()) continue;
      if ((role == "primary") == primary) return &process;
    }
    return nullptr;
  }

  // Starts again every process that exited, a second after.
  void Supervise() {
    for (Process& process : processes_) {
      if (process.retired) continue;
      int code = 0;
      if (process.server != nullptr) {
        if (!process.server->Exited(&code)) continue;
        Say(absl::StrCat("  supervisor: ", Name(process), " exited (", code,
                         ")"));
        process.server.reset();
        process.exited_at = absl::Now();
      }
      if (absl::Now() - process.exited_at < absl::Seconds(1)) continue;
      Start(process);
      process.exited_at = absl::Now();
    }
  }

  int RunAdmin(const std::vector<std::string>& args, const std::string& name) {
    return RunToCompletion(AdminArgv(args),
                           absl::StrCat(dir_, "/", name, ".log"),
                           absl::Minutes(2));
  }

  std::vector<std::string> AdminArgv(const std::vector<std::string>& args) {
    return PsAdminArgv(AdminCluster::Etcd(etcd_->endpoint(), kJob), args);
  }

  void Say(const std::string& line) {
    const std::string stamped = absl::StrFormat(
        "t=%6.1fs %s", absl::ToDoubleSeconds(absl::Now() - began_), line);
    std::printf("%s\n", stamped.c_str());
    std::fflush(stdout);
  }

  // Applies `fault`; false when it could not be (no primary found, say).
  bool Apply(Fault fault, std::mt19937_64& random) {
    const int shard = static_cast<int>(random() % shards_);
    switch (fault) {
      case Fault::kKillPrimary:
      case Fault::kKillPrimaryAndDisk:
      case Fault::kPausePrimary:
      case Fault::kKillReplica: {
        Process* process = Find(shard, fault != Fault::kKillReplica);
        if (process == nullptr) return false;
        Say(absl::StrCat(FaultName(fault), ": shard ", shard, " (",
                         Name(*process), ")"));
        if (fault == Fault::kPausePrimary) {
          kill(process->server->pid(), SIGSTOP);
          absl::SleepFor(absl::Seconds(3 * kLeaseSeconds));
          kill(process->server->pid(), SIGCONT);
          return true;
        }
        process->server->SignalAndWait(SIGKILL);
        process->server.reset();
        process->exited_at = absl::Now();
        if (fault == Fault::kKillPrimaryAndDisk)
          std::filesystem::remove_all(process->dir);
        return true;
      }
      case Fault::kRestartEtcd:
        Say(FaultName(fault));
        etcd_->Stop(SIGKILL);
        absl::SleepFor(absl::Seconds(1));
        return etcd_->Restart().ok();
      case Fault::kMoveSlots: {
        const uint32_t first = static_cast<uint32_t>(random() % 16) * 1024;
        const int to = static_cast<int>(random() % shards_);
        Say(absl::StrCat(FaultName(fault), " --slots=", first, "-",
                         first + 1023, " --to=", to));
        const int code = RunAdmin(
            {"move-slots", absl::StrCat("--slots=", first, "-", first + 1023),
             absl::StrCat("--to=", to), kMoveLease},
            absl::StrCat("move", ++admin_runs_));
        Say(absl::StrCat("  move-slots exited ", code));
        return true;
      }
      case Fault::kRebalance: {
        Say(FaultName(fault));
        const int code = RunAdmin({"rebalance", kMoveLease},
                                  absl::StrCat("rebalance", ++admin_runs_));
        Say(absl::StrCat("  rebalance exited ", code));
        return true;
      }
      case Fault::kCheckpoint: {
        Say(FaultName(fault));
        const int code =
            RunAdmin({"checkpoint",
                      absl::StrCat("--dir=", dir_, "/ckpt-", ++admin_runs_)},
                     absl::StrCat("checkpoint", admin_runs_));
        Say(absl::StrCat("  checkpoint exited ", code));
        return true;
      }
      case Fault::kDrainShard: {
        if (shards_ < 2) return false;
        Say(absl::StrCat(FaultName(fault), " --shard=", shard));
        const int code = RunAdmin(
            {"drain-shard", absl::StrCat("--shard=", shard), kMoveLease},
            absl::StrCat("drain", ++admin_runs_));
        Say(absl::StrCat("  drain-shard exited ", code));
        // Emptied, the job's last shard leaves it: stopped, as an operator
        // scales the StatefulSet down.
        absl::StatusOr<std::vector<std::string>> left =
            cluster::FindShards(*client_, kJob, absl::Seconds(30));
        if (!left.ok())
          Say("  looking the shards up: " + left.status().ToString());
        if (code == 0 && shard == shards_ - 1 && left.ok() &&
            static_cast<int>(left->size()) < shards_) {
          // The replica first: stopped after its primary, it would take
          // the shard over.
          for (const bool primary : {false, true}) {
            for (Process& process : processes_) {
              if (process.shard != shard || process.retired) continue;
              if (process.server != nullptr &&
                  (Role(*process.server) == "primary") != primary) {
                continue;
              }
              process.retired = true;
              if (process.server != nullptr)
                process.server->SignalAndWait(SIGTERM);
              process.server.reset();
            }
          }
          --shards_;
          Say(absl::StrCat("  shard ", shard, " left the job; stopped"));
        }
        return true;
      }
      case Fault::kAddShard: {
        if (shards_ >= kMaxShards) return false;
        const int added = shards_;
        Say(absl::StrCat(FaultName(fault), ": shard ", added));
        StartShard(added);
        ++shards_;
        const int code = RunAdmin({"rebalance", kMoveLease},
                                  absl::StrCat("rebalance", ++admin_runs_));
        Say(absl::StrCat("  rebalance exited ", code));
        return true;
      }
      case Fault::kKillMover: {
        const uint32_t first = static_cast<uint32_t>(random() % 16) * 1024;
        const int to = static_cast<int>(random() % shards_);
        const bool rebalance = random() % 2 == 0;
        // This cluster's moves take well under a second: a kill within it.
        const absl::Duration after =
            absl::Milliseconds(10 + static_cast<int>(random() % 600));
        const std::vector<std::string> args =
            rebalance ? std::vector<std::string>{"rebalance", kMoveLease}
                      : std::vector<std::string>{
                            "move-slots",
                            absl::StrCat("--slots=", first, "-", first + 1023),
                            absl::StrCat("--to=", to), kMoveLease};
        Say(absl::StrCat(
            FaultName(fault), ": ", args[0],
            rebalance ? "" : absl::StrCat(" ", args[1], " ", args[2]),
            ", killed after ", absl::FormatDuration(after)));
        absl::StatusOr<std::unique_ptr<ChildProcess>> mover =
            ChildProcess::Start(
                AdminArgv(args), false,
                absl::StrCat(dir_, "/killed_mover", ++admin_runs_, ".log"));
        if (!mover.ok()) return false;
        int code = 0;
        if (WaitUntil([&] { return (*mover)->Exited(&code); }, after,
                      absl::Milliseconds(20))) {
          Say(absl::StrCat("  it finished first (", code, ")"));
        } else {
          (*mover)->SignalAndWait(SIGKILL);
        }
        return true;
      }
      case Fault::kSlowLink: {
        // Its proxy slows what comes in: workers' calls and its replica's
        // reads of the feed (nothing dials a replica).
        Process* slow = Find(shard, /*primary=*/true);
        if (slow == nullptr) return false;
        const absl::Duration delay =
            absl::Milliseconds(50 + static_cast<int>(random() % 250));
        Say(absl::StrCat(FaultName(fault), ": ", Name(*slow), " +",
                         absl::FormatDuration(delay), " each way for 8s"));
        slow->proxy->set_delay(delay);
        WaitSupervising(absl::Seconds(8));
        slow->proxy->set_delay(absl::ZeroDuration());
        return true;
      }
      default:
        return false;
    }
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<cluster::CoordinationStore> client_;
  std::vector<uint64_t> keys_;
  std::string dir_;
  // A deque: adding a shard keeps references to the others valid.
  std::deque<Process> processes_;
  // Shards in the job: 0 to shards_ - 1.
  int shards_ = kShards;
  absl::Time began_ = absl::Now();
  int admin_runs_ = 0;
};

TEST_F(RandomFaultsTest, NoAcknowledgedPushIsLostOrDoubled) {
  const uint64_t seed = static_cast<uint64_t>(EnvNumber("PS_CHAOS_SEED", 1));
  const absl::Duration length =
      absl::Seconds(EnvNumber("PS_CHAOS_SECONDS", 60));
  const absl::Duration interval =
      absl::Seconds(EnvNumber("PS_CHAOS_INTERVAL_S", 6));
  absl::StatusOr<std::vector<Fault>> kinds = KindsToDraw();
  ASSERT_OK(kinds);
  std::mt19937_64 random(seed);
  began_ = absl::Now();
  Say(absl::StrCat("seed ", seed, ", ", absl::FormatDuration(length),
                   ", a fault every ", absl::FormatDuration(interval)));

  for (int shard = 0; shard < kShards; ++shard) StartShard(shard);
  for (const Process& process : processes_)
    ASSERT_NE(process.server, nullptr) << process.dir;
  // Two workers, each pushing AddOne() to every key over and over; a push
  // that failed after the client's retries is counted and pushed again.
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::unique_ptr<CountingPusher>> pushers;
  for (uint32_t w = 0; w < 2; ++w) {
    clients.push_back(Connect(100 + w));
    ASSERT_NE(clients.back(), nullptr);
    pushers.push_back(std::make_unique<CountingPusher>(
        clients.back().get(), keys_,
        [w](client::PsClient& client, const std::vector<uint64_t>& keys) {
          return AddOne(client, kTable, kDim, keys, w);
        },
        CountingPusher::OnFailure::kCountAndGoOn));
  }
  struct Stats {
    int drawn = 0;
    int applied = 0;
    std::vector<double> recovery_s;
    int not_recovered = 0;
  };
  std::map<Fault, Stats> stats;
  const absl::Time end = began_ + length;
  while (absl::Now() < end) {
    const Fault fault = (*kinds)[random() % kinds->size()];
    Stats& kind = stats[fault];
    ++kind.drawn;
    const absl::Time at = absl::Now();
    if (Apply(fault, random)) ++kind.applied;
    Supervise();
    // Recovered once each worker had pushes acknowledged again.
    std::vector<int> before;
    for (auto& pusher : pushers) before.push_back(pusher->acknowledged());
    auto recovered = [&] {
      for (size_t w = 0; w < pushers.size(); ++w)
        if (pushers[w]->acknowledged() < before[w] + 2) return false;
      return true;
    };
    WaitUntil(
        [&] {
          Supervise();
          return recovered();
        },
        at + absl::Seconds(120) - absl::Now(), absl::Milliseconds(50));
    if (recovered()) {
      kind.recovery_s.push_back(absl::ToDoubleSeconds(absl::Now() - at));
    } else {
      ++kind.not_recovered;
      Say("  pushes did not resume within 120 s");
    }
    WaitSupervising(at + interval - absl::Now());
  }
  for (auto& pusher : pushers) pusher->Stop().IgnoreError();
  int total = 0, unknown = 0;
  for (auto& pusher : pushers) {
    total += pusher->acknowledged();
    unknown += pusher->unknown();
  }

  // Every key, read where the map now puts it (a pull through a new client).
  std::unique_ptr<client::PsClient> reader = Connect(900);
  ASSERT_NE(reader, nullptr);
  std::vector<float> rows(keys_.size() * kDim);
  client::TrainingClient::TableRows pull;
  pull.table = kTable;
  pull.keys = keys_;
  pull.dim = kDim;
  pull.rows = rows.data();
  ASSERT_OK(reader->Pull({&pull, 1}));
  int lost = 0, doubled = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    const float value = rows[i * kDim];
    if (value < total) ++lost;
    if (value > total + unknown) ++doubled;
  }

  std::printf(
      "\n| fault | --faults name | drawn | applied | recovery s (median, "
      "max) | not recovered |\n| --- | --- | --- | --- | --- | --- |\n");
  for (auto& [fault, kind] : stats) {
    std::sort(kind.recovery_s.begin(), kind.recovery_s.end());
    const std::string recovery =
        kind.recovery_s.empty()
            ? "-"
            : absl::StrFormat("%.1f, %.1f",
                              kind.recovery_s[kind.recovery_s.size() / 2],
                              kind.recovery_s.back());
    std::printf("| %s | %s | %d | %d | %s | %d |\n", FaultName(fault),
                NamesOf(fault).short_name, kind.drawn, kind.applied,
                recovery.c_str(), kind.not_recovered);
  }
  std::printf(
      "\nseed %llu: pushes acknowledged %d, unknown (failed after retries) "
      "%d; keys %zu: lost %d, doubled %d\n",
      static_cast<unsigned long long>(seed), total, unknown, keys_.size(), lost,
      doubled);
  int not_recovered = 0;
  for (const auto& [fault, kind] : stats) not_recovered += kind.not_recovered;
  EXPECT_EQ(not_recovered, 0)
      << "seed " << seed << ": pushes stopped for good after a fault";
  EXPECT_EQ(lost, 0) << "seed " << seed;
  EXPECT_EQ(doubled, 0) << "seed " << seed;
  EXPECT_GT(total, 0);
}

}  // namespace
}  // namespace ps::testing
