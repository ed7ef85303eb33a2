#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/exit_codes.h"
#include "base/latency_quantile.h"
#include "base/manifest.h"
#include "base/optimizer.h"
#include "base/routing.h"
#include "grpcpp/client_context.h"
#include "ops/admin_command.h"
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {

using ::ps::LatencyQuantileSeconds;

namespace {

// The counters and gauges of ShardStatsResponse that `stats` shows.
struct StatField {
  const char* name;
  uint64_t (ps::ShardStatsResponse::*get)() const;
  bool counter;  // a rate is shown for counters
};

constexpr StatField kStatFields[] = {
    {"pull_requests", &ps::ShardStatsResponse::pull_requests, true},
    {"push_requests", &ps::ShardStatsResponse::push_requests, true},
    {"rows_pulled", &ps::ShardStatsResponse::rows_pulled, true},
    {"rows_pushed", &ps::ShardStatsResponse::rows_pushed, true},
    {"hot_tier_hits", &ps::ShardStatsResponse::hot_tier_hits, true},
    {"hot_tier_misses", &ps::ShardStatsResponse::hot_tier_misses, true},
    {"disk_lookups", &ps::ShardStatsResponse::disk_lookups, true},
    {"duplicate_pushes", &ps::ShardStatsResponse::duplicate_pushes, true},
    {"rows_admitted", &ps::ShardStatsResponse::rows_admitted, true},
    {"keys_held_back", &ps::ShardStatsResponse::keys_held_back, true},
    {"rows_expired_in_memory", &ps::ShardStatsResponse::rows_expired_in_memory,
     true},
    {"rows_expired_on_disk", &ps::ShardStatsResponse::rows_expired_on_disk,
     true},
    {"hot_tier_bytes", &ps::ShardStatsResponse::hot_tier_bytes, false},
    {"hot_tier_budget_bytes", &ps::ShardStatsResponse::hot_tier_budget_bytes,
     false},
    {"hot_tier_allocated_bytes",
     &ps::ShardStatsResponse::hot_tier_allocated_bytes, false},
    {"rocksdb_live_bytes", &ps::ShardStatsResponse::rocksdb_live_bytes, false},
    {"push_log_bytes", &ps::ShardStatsResponse::push_log_bytes, false},
    {"push_log_dropped_bytes", &ps::ShardStatsResponse::push_log_dropped_bytes,
     false},
};

// One method's calls over the interval, summed over the shards.
struct MethodTotal {
  explicit MethodTotal(std::string method) : method(std::move(method)) {}
  std::string method;
  uint64_t calls = 0, errors = 0;
  double calls_per_second = 0;
  std::vector<uint64_t> latency_buckets;
};

// What `stats` shows, summed over the shards that answered.
struct StatsSummary {
  std::vector<double> totals = std::vector<double>(std::size(kStatFields));
  std::vector<double> rates = std::vector<double>(std::size(kStatFields));
  std::vector<MethodTotal> methods;  // called in the interval, most first
  std::vector<double> bounds;        // of the latency buckets
  // Shards by the commit they run (more than one during a rolling update).
  std::map<std::string, std::vector<int>> versions;
  // One line per shard that replicates or is replicated.
  std::vector<std::string> replication;
  int answered = 0;
};

// Every shard's ShardStats, in shard order.
void SampleStats(const Cluster& cluster,
                 std::vector<ShardStatsResponse>* responses,
                 std::vector<ShardAnswer>* answers) {
  responses->resize(cluster.servers.size());
  answers->clear();
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    ShardAnswer answer(cluster.servers[i]);
    answer.status = cluster.channels->shard(i).ShardStats(
        cluster.Context().get(), ShardStatsRequest(), &(*responses)[i]);
    answers->push_back(std::move(answer));
  }
}

// Adds one shard's per-method calls and latencies between `then` and
// `now` (`seconds` apart) to `summary`.
void AddMethods(const ShardStatsResponse& now, const ShardStatsResponse& then,
                double seconds, StatsSummary* summary) {
  std::vector<double>& bounds = summary->bounds;
  std::vector<MethodTotal>& methods = summary->methods;
  if (bounds.empty()) {
    bounds.assign(now.latency_bounds_seconds().begin(),
                  now.latency_bounds_seconds().end());
  }
  const bool same_bounds = std::equal(bounds.begin(), bounds.end(),
                                      now.latency_bounds_seconds().begin(),
                                      now.latency_bounds_seconds().end());
  for (const auto& method : now.methods()) {
    const ps::ShardStatsResponse::Method* earlier = nullptr;
    for (const auto& m : then.methods())
      if (m.method() == method.method()) earlier = &m;
    auto total = std::find_if(methods.begin(), methods.end(), [&](auto& t) {
      return t.method == method.method();
    });
    if (total == methods.end()) {
      methods.push_back(MethodTotal(method.method()));
      methods.back().latency_buckets.assign(bounds.size() + 1, 0);
      total = methods.end() - 1;
    }
    const uint64_t calls =
        method.calls() - (earlier != nullptr ? earlier->calls() : 0);
    total->calls += calls;
    total->errors +=
        method.errors() - (earlier != nullptr ? earlier->errors() : 0);
    if (seconds > 0) total->calls_per_second += calls / seconds;
    if (!same_bounds ||
        method.latency_buckets_size() != static_cast<int>(bounds.size() + 1))
      continue;
    for (int b = 0; b < method.latency_buckets_size(); ++b) {
      const bool has_earlier =
          earlier != nullptr &&
          earlier->latency_buckets_size() == method.latency_buckets_size();
      total->latency_buckets[b] +=
          method.latency_buckets(b) -
          (has_earlier ? earlier->latency_buckets(b) : 0);
    }
  }
}

// Sums the shards' samples: `after` (and `before`, `interval` seconds
// earlier, for rates) into `summary`; fills each answer's fields for --json.
StatsSummary Summarize(double interval,
                       const std::vector<ShardStatsResponse>& before,
                       const std::vector<ShardStatsResponse>& after,
                       std::vector<ShardAnswer>* answers) {
  StatsSummary summary;
  for (size_t s = 0; s < after.size(); ++s) {
    ShardAnswer& answer = (*answers)[s];
    if (!answer.status.ok()) continue;
    const ShardStatsResponse& now = after[s];
    // The sample before, unless there is none or the shard restarted.
    const bool has_before = interval > 0 && before[s].uptime_seconds() > 0 &&
                            before[s].uptime_seconds() < now.uptime_seconds();
    const ShardStatsResponse empty;
    const ShardStatsResponse& then = has_before ? before[s] : empty;
    const double seconds = now.uptime_seconds() - then.uptime_seconds();
    ++summary.answered;
    for (size_t f = 0; f < std::size(kStatFields); ++f) {
      const StatField& field = kStatFields[f];
      const uint64_t value = (now.*field.get)();
      summary.totals[f] += value;
      answer.fields[field.name] = value;
      if (field.counter && seconds > 0) {
        const uint64_t earlier = (then.*field.get)();
        summary.rates[f] +=
            (value >= earlier ? value - earlier : value) / seconds;
      }
    }
    answer.fields["shard_index"] = now.shard_index();
    answer.fields["uptime_seconds"] = now.uptime_seconds();
    answer.fields["build_commit"] = now.build_commit();
    answer.fields["build_time"] = now.build_time();
    summary.versions[now.build_commit()].push_back(
        static_cast<int>(now.shard_index()));
    const ps::ShardStatsResponse::Replication& replication = now.replication();
    if (!replication.role().empty()) {
      answer.fields["replication_role"] = replication.role();
      answer.fields["replication_lag_entries"] = replication.lag_entries();
      answer.fields["replication_applied_sequence"] =
          replication.applied_sequence();
      answer.fields["replication_head_sequence"] = replication.head_sequence();
    }
    if (replication.role() == "primary" && replication.replicas() > 0) {
      answer.fields["replicas"] = replication.replicas();
      answer.fields["replicas_in_sync"] = replication.replicas_in_sync();
      answer.fields["pushes_without_replica"] =
          replication.pushes_without_replica();
      answer.fields["pushes_replication_timed_out"] =
          replication.pushes_replication_timed_out();
      summary.replication.push_back(absl::StrFormat(
          "shard %d (%s): primary, %s replication, %d replica(s), %d in "
          "sync, lag %d entries; pushes answered with no replica in sync %d, "
          "replicas too slow %d",
          now.shard_index(), answer.server, replication.mode(),
          replication.replicas(), replication.replicas_in_sync(),
          replication.lag_entries(), replication.pushes_without_replica(),
          replication.pushes_replication_timed_out()));
    } else if (absl::StartsWith(replication.role(), "replica")) {
      if (!replication.error().empty())
        answer.fields["replication_error"] = replication.error();
      summary.replication.push_back(absl::StrFormat(
          "shard %d (%s): %s, applied %d of %d entries%s", now.shard_index(),
          answer.server, replication.role(), replication.applied_sequence(),
          replication.head_sequence(),
          replication.error().empty()
              ? ""
              : absl::StrCat("; stopped: ", replication.error())));
    }
    AddMethods(now, then, seconds, &summary);
  }
  // Methods not called in the interval say nothing.
  std::vector<MethodTotal>& methods = summary.methods;
  methods.erase(std::remove_if(methods.begin(), methods.end(),
                               [](const MethodTotal& method) {
                                 return method.calls == 0;
                               }),
                methods.end());
  std::sort(methods.begin(), methods.end(),
            [](const MethodTotal& a, const MethodTotal& b) {
              return a.calls > b.calls;
            });
  return summary;
}

double Quantile(const StatsSummary& summary, const MethodTotal& method,
                double q) {
  return LatencyQuantileSeconds(summary.bounds, method.latency_buckets, q);
}

void PrintStatsJson(const StatsSummary& summary, double interval,
                    const std::vector<ShardAnswer>& answers) {
  Json total = Json::object(), per_second = Json::object();
  for (size_t f = 0; f < std::size(kStatFields); ++f) {
    total[kStatFields[f].name] = static_cast<uint64_t>(summary.totals[f]);
    if (kStatFields[f].counter)
      per_second[kStatFields[f].name] = summary.rates[f];
  }
  Json method_json = Json::array();
  for (const MethodTotal& method : summary.methods) {
    method_json.push_back(
        Json{{"method", method.method},
             {"calls", method.calls},
             {"errors", method.errors},
             {"calls_per_second", method.calls_per_second},
             {"p50_seconds", Quantile(summary, method, 0.5)},
             {"p99_seconds", Quantile(summary, method, 0.99)}});
  }
  std::printf("%s\n", Dump({{"interval_seconds", interval},
                            {"shards_answered", summary.answered},
                            {"total", std::move(total)},
                            {"per_second", std::move(per_second)},
                            {"methods", std::move(method_json)},
                            {"shards", ShardAnswersJson(answers)}})
                          .c_str());
}

void PrintStatsTable(const StatsSummary& summary, double interval,
                     size_t shards) {
  std::printf(
      "%d of %zu shards; rates and latencies %s\n", summary.answered, shards,
      interval > 0 ? absl::StrFormat("over the last %.2f s", interval).c_str()
                   : "since each shard started");
  for (const auto& [commit, on] : summary.versions) {
    std::printf("build %s on shard%s %s\n",
                commit.empty() ? "(not reported)" : commit.c_str(),
                on.size() == 1 ? "" : "s", absl::StrJoin(on, ",").c_str());
  }
  for (const std::string& line : summary.replication) {
    std::printf("%s\n", line.c_str());
  }
  std::printf("%-24s %16s %14s\n", "", "total", "per s");
  for (size_t f = 0; f < std::size(kStatFields); ++f) {
    if (kStatFields[f].counter) {
      std::printf("%-24s %16.0f %14.1f\n", kStatFields[f].name,
                  summary.totals[f], summary.rates[f]);
    } else {
      std::printf("%-24s %16.0f\n", kStatFields[f].name, summary.totals[f]);
    }
  }
  std::printf("\n%-44s %10s %8s %10s %10s %10s\n", "method", "calls", "errors",
              "calls/s", "p50 ms", "p99 ms");
  for (const MethodTotal& method : summary.methods) {
    std::printf("%-44s %10llu %8llu %10.1f %10.3f %10.3f\n",
                method.method.c_str(),
                static_cast<unsigned long long>(method.calls),
                static_cast<unsigned long long>(method.errors),
                method.calls_per_second, 1e3 * Quantile(summary, method, 0.5),
                1e3 * Quantile(summary, method, 0.99));
  }
}

}  // namespace

// `stats`: every shard's counters, summed, with rates and per-method
// latency percentiles over --interval_s (since each shard started for 0).
int Stats(const Cluster& cluster) {
  const double interval = cluster.options.interval_s;
  if (!(interval >= 0) || interval > 3600)
    return Fail("--interval_s must be between 0 and 3600");
  std::vector<ShardStatsResponse> before, after;
  std::vector<ShardAnswer> first, answers;
  if (interval > 0) {
    SampleStats(cluster, &before, &first);
    absl::SleepFor(absl::Seconds(interval));
  }
  SampleStats(cluster, &after, &answers);
  // A shard that missed either sample has no rate: it counts as failed.
  for (size_t i = 0; i < first.size(); ++i)
    if (!first[i].status.ok()) answers[i].status = first[i].status;
  const StatsSummary summary = Summarize(interval, before, after, &answers);
  const int code = ReportFailures("stats", answers);
  if (cluster.options.json) {
    PrintStatsJson(summary, interval, answers);
  } else {
    PrintStatsTable(summary, interval, cluster.servers.size());
  }
  return code;
}

namespace {

// The workers' clocks, from the coordinator shard.
grpc::Status AskClocks(const Cluster& cluster,
                       ps::WorkerClocksResponse* response) {
  return cluster.channels->coordinator().WorkerClocks(
      cluster.Context().get(), ps::WorkerClocksRequest(), response);
}

const char* WorkerState(const ps::WorkerClocksResponse::Worker& worker) {
  return worker.live()       ? "live"
         : worker.finished() ? "finished"
                             : "lease expired";
}

}  // namespace

// `clocks`: the workers' clocks, from the coordinator shard.
int Clocks(const Cluster& cluster) {
  ps::WorkerClocksResponse response;
  ShardAnswer answer(cluster.coordinator);
  answer.status = AskClocks(cluster, &response);
  if (answer.status.ok()) {
    if (cluster.options.json) {
      Json workers = Json::array();
      for (const auto& worker : response.workers()) {
        workers.push_back(Json{{"worker", worker.worker()},
                               {"clock", worker.clock()},
                               {"state", WorkerState(worker)}});
      }
      std::printf("%s\n", Dump({{"coordinator", cluster.coordinator},
                                {"workers", std::move(workers)},
                                {"clock_spread", response.clock_spread()}})
                              .c_str());
    } else {
      for (const auto& worker : response.workers()) {
        std::printf("worker %u clock %lld %s\n", worker.worker(),
                    static_cast<long long>(worker.clock()),
                    WorkerState(worker));
      }
      std::printf("spread among live workers: %lld\n",
                  static_cast<long long>(response.clock_spread()));
    }
  }
  return ReportFailures("clocks", {answer});
}

// `stop`: every shard stops as SIGTERM stops it. A shard of a release
// before Admin.Stop is asked by the call's former name, Drain; the JSON
// keeps the key "draining" of that release beside "stopping", for scripts.
int Stop(const Cluster& cluster) {
  return OnEveryShard(
      cluster, "stop",
      [&](ps::Admin::Stub& admin, Json* fields) {
        *fields = {{"stopping", true}, {"draining", true}};
        ps::StopResponse response;
        const grpc::Status stopped =
            admin.Stop(cluster.Context().get(), ps::StopRequest(), &response);
        if (stopped.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
          return stopped;
        }
        ps::DrainResponse drained;
        return admin.Drain(cluster.Context().get(), ps::DrainRequest(),
                           &drained);
      },
      [](const Json&) {
        return std::string(
            "stopping (health NOT_SERVING; calls in flight finish, dirty rows "
            "are written back, then it exits)");
      });
}

}  // namespace ps::ops
