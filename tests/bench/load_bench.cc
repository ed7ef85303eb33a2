// load_bench: many concurrent clients against running shards for a while:
// pullers and pushers through the workers' PsClient (routing, retries,
// exactly-once pushes) and admin clients asking every shard for its stats.
// Prints, per operation, calls, errors, calls/s, p50 and p99 latency, and
// each shard's peak resident memory (from /proc) against its budget.
// tests/bench/load_bench.sh starts the shards and runs it.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/lock_mode.h"
#include "client/ps_client.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "net/grpc_status.h"
#include "proto/admin.grpc.pb.h"

ABSL_FLAG(std::string, servers, "", "Shards, comma-separated, in order.");
ABSL_FLAG(std::string, pids, "", "The shards' process ids, for their RSS.");
ABSL_FLAG(int32_t, seconds, 60, "How long the load runs.");
ABSL_FLAG(int32_t, pullers, 16, "Clients pulling.");
ABSL_FLAG(int32_t, pushers, 12, "Clients pushing.");
ABSL_FLAG(int32_t, admins, 4, "Clients asking every shard for its stats.");
ABSL_FLAG(int32_t, keys, 1024, "Keys per pull or push.");
ABSL_FLAG(int32_t, first_worker, 100,
          "The pushers push as workers first_worker, first_worker + 1, ...: "
          "several load_bench processes against one cluster need their own.");
ABSL_FLAG(uint64_t, seed, 0,
          "Added to every client's random seed: processes with different "
          "seeds draw different keys.");
ABSL_FLAG(int32_t, dim, 16, "Row dimension.");
ABSL_FLAG(int64_t, key_space, 1000000, "Keys are drawn from [0, this).");
ABSL_FLAG(int64_t, budget_mb, 0,
          "Each shard's memory budget (hot tier, RocksDB, in-flight cap), "
          "to compare its peak RSS with.");

namespace {

struct Op {
  explicit Op(const char* name) : name(name) {}
  const char* const name;
  absl::Mutex mu;
  std::vector<double> latencies_ms ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> errors{0};
  // Rows of the calls that succeeded.
  std::atomic<int64_t> rows{0};
  std::string first_error ABSL_GUARDED_BY(mu);

  void Record(absl::Duration latency, const absl::Status& status,
              size_t call_rows = 0) {
    absl::MutexLock lock(&mu);
    if (status.ok()) {
      latencies_ms.push_back(absl::ToDoubleMilliseconds(latency));
      rows += static_cast<int64_t>(call_rows);
    } else {
      ++errors;
      if (first_error.empty()) first_error = status.ToString();
    }
  }
};

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * values.size()))];
}

size_t PeakRss(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

// A sorted set of up to --keys keys drawn from [0, --key_space).
std::vector<uint64_t> DrawKeys(std::mt19937_64& rng) {
  std::vector<uint64_t> keys(absl::GetFlag(FLAGS_keys));
  for (auto& key : keys) key = rng() % absl::GetFlag(FLAGS_key_space);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// Pulls through `client` until `end`.
void Pull(ps::client::PsClient& client, uint64_t seed, absl::Time end, Op& op) {
  const int dim = absl::GetFlag(FLAGS_dim);
  std::mt19937_64 rng(seed);
  std::vector<float> rows;
  while (absl::Now() < end) {
    const std::vector<uint64_t> keys = DrawKeys(rng);
    rows.resize(keys.size() * dim);
    const ps::client::PsClient::TableRows request = {"load", keys, dim,
                                                     rows.data()};
    const absl::Time start = absl::Now();
    const absl::Status status = client.Pull({request});
    op.Record(absl::Now() - start, status, keys.size());
  }
}

// Pushes as worker `worker` until `end`, through a client of its own
// (exactly-once state is per worker).
void Push(const ps::client::ClientOptions& options, uint32_t worker,
          uint64_t seed, absl::Time end, Op& op) {
  const int dim = absl::GetFlag(FLAGS_dim);
  auto pusher = ps::client::PsClient::Connect(options);
  if (!pusher.ok()) {
    op.Record(absl::ZeroDuration(), pusher.status());
    return;
  }
  std::mt19937_64 rng(seed);
  int64_t step = 0;
  while (absl::Now() < end) {
    const std::vector<uint64_t> keys = DrawKeys(rng);
    const std::vector<float> gradients(keys.size() * dim, 0.01f);
    const ps::client::PsClient::TableGradients request = {"load", keys,
                                                          gradients, dim};
    const absl::Time start = absl::Now();
    const absl::Status status = (*pusher)->Push({request}, worker, step++);
    op.Record(absl::Now() - start, status, keys.size());
  }
}

// Asks every shard for its stats, every 20 ms, until `end`.
void AskStats(const std::vector<std::string>& servers, absl::Time end, Op& op) {
  std::vector<std::unique_ptr<ps::Admin::Stub>> admins;
  for (const std::string& server : servers) {
    admins.push_back(ps::Admin::NewStub(
        grpc::CreateChannel(server, grpc::InsecureChannelCredentials())));
  }
  while (absl::Now() < end) {
    for (auto& admin : admins) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      ps::ShardStatsResponse response;
      const absl::Time start = absl::Now();
      const grpc::Status status =
          admin->ShardStats(&context, ps::ShardStatsRequest(), &response);
      op.Record(absl::Now() - start, ps::net::FromGrpcStatus(status, "stats"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// Prints a row per operation (run by `clients` clients for `seconds`);
// returns the errors.
int64_t PrintOps(std::initializer_list<std::pair<Op*, int>> ops,
                 double seconds) {
  std::printf(
      "| op | clients | calls | errors | calls/s | rows/s | p50 ms | p99 ms "
      "|\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  int64_t errors = 0;
  for (const auto& [op, clients] : ops) {
    absl::MutexLock lock(&op->mu);
    std::printf("| %s | %d | %zu | %lld | %.0f | %.0f | %.2f | %.2f |\n",
                op->name, clients, op->latencies_ms.size(),
                static_cast<long long>(op->errors.load()),
                op->latencies_ms.size() / seconds, op->rows.load() / seconds,
                Percentile(op->latencies_ms, 0.5),
                Percentile(op->latencies_ms, 0.99));
    errors += op->errors.load();
    if (!op->first_error.empty())
      std::fprintf(stderr, "%s: first error: %s\n", op->name,
                   op->first_error.c_str());
  }
  return errors;
}

// Each shard's peak RSS (--pids) against --budget_mb.
void PrintMemory() {
  const std::vector<std::string> pids =
      absl::StrSplit(absl::GetFlag(FLAGS_pids), ',', absl::SkipWhitespace());
  const int64_t budget = absl::GetFlag(FLAGS_budget_mb);
  std::printf("\n| shard | peak RSS MiB | budget MiB | RSS / budget |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (size_t s = 0; s < pids.size(); ++s) {
    const double rss = PeakRss(pids[s]) / 1048576.0;
    std::printf("| %zu | %.0f | %lld | %.2f |\n", s, rss,
                static_cast<long long>(budget), budget > 0 ? rss / budget : 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipWhitespace());
  if (servers.empty()) {
    std::fprintf(stderr, "load_bench: --servers is required\n");
    return 2;
  }
  ps::client::ClientOptions options;
  options.servers = servers;
  auto client = ps::client::PsClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "load_bench: %s\n",
                 client.status().ToString().c_str());
    return 2;
  }
  ps::TableSpec spec;
  spec.set_name("load");
  spec.set_dim(absl::GetFlag(FLAGS_dim));
  spec.mutable_optimizer()->set_kind(ps::OptimizerSpec::ADAGRAD);
  if (absl::Status declared = (*client)->DeclareTable(spec); !declared.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", declared.ToString().c_str());
    return 2;
  }

  Op pull("pull"), push("push"), stats("admin stats");
  const int pullers = absl::GetFlag(FLAGS_pullers);
  const int pushers = absl::GetFlag(FLAGS_pushers);
  const int admins = absl::GetFlag(FLAGS_admins);
  const int first_worker = absl::GetFlag(FLAGS_first_worker);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < pullers; ++c)
    threads.emplace_back([&, c] { Pull(**client, seed + c, end, pull); });
  for (int c = 0; c < pushers; ++c) {
    threads.emplace_back([&, c] {
      Push(options, static_cast<uint32_t>(first_worker + c), seed + 1000 + c,
           end, push);
    });
  }
  for (int c = 0; c < admins; ++c)
    threads.emplace_back([&] { AskStats(servers, end, stats); });
  for (auto& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t errors =
      PrintOps({{&pull, pullers}, {&push, pushers}, {&stats, admins}}, seconds);
  PrintMemory();
  return errors == 0 ? 0 : 1;
}
