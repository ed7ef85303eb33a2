// ps_admin: asks ps_server shards over their admin API.
//
//   ps_admin --servers=127.0.0.1:50051 tables
//   ps_admin --servers=HOST:PORT,HOST:PORT stats    (summed over the shards)
//   ps_admin --servers=... --json stats             (one JSON object)
//   ps_admin --servers=... row --table=wide_deep.embedding --key=12345
//   ps_admin --servers=... clocks          (on the coordinator shard)
//   ps_admin --servers=... --token_file=F set-lr --table=T --lr=0.01
//   ps_admin --servers=... --token_file=F drop-table --table=T [--force]
//   ps_admin --servers=... --token_file=F expire --table=T
//   ps_admin --servers=... --token_file=F drain

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
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/build_info.h"
#include "base/exit_codes.h"
#include "base/latency_quantile.h"
#include "base/manifest.h"
#include "base/optimizer.h"
#include "base/routing.h"
#include "grpcpp/client_context.h"
#include "net/admin_channel.h"
#include "net/tls_credentials.h"
#include "nlohmann/json.hpp"
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"

ABSL_FLAG(std::string, servers, "127.0.0.1:50051",
          "host:port of the shards, comma-separated in shard order; every "
          "shard is asked and the answers are added up.");
ABSL_FLAG(std::string, table, "",
          "For `row`, `set-lr` and `drop-table`: the table.");
ABSL_FLAG(uint64_t, key, 0, "For `row`: the key.");
ABSL_FLAG(bool, json, false,
          "Print one JSON object (numbers as numbers) instead of tables.");
ABSL_FLAG(double, interval_s, 1.0,
          "For `stats`: rates and latency percentiles over this many seconds "
          "(two samples); 0: since each shard started.");
ABSL_FLAG(double, lr, 0.0,
          "For `set-lr`: the learning rate (positive), from the next push on.");
ABSL_FLAG(bool, force, false,
          "For `drop-table`: drop even while workers hold leases.");
ABSL_FLAG(int32_t, timeout_s, 10, "Deadline of each call.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate that signed the shards' certificates: talk TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for shards that require one (with "
          "--tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name the shards' certificates carry, when it is not the host "
          "in --servers.");
ABSL_FLAG(std::string, dir, "",
          "For `checkpoint`: the directory to write (a path on the shards' "
          "file system); for `checkpoints`: a checkpoint or a directory of "
          "them.");
ABSL_FLAG(int32_t, checkpoints_to_keep, 0,
          "For `checkpoint`: once it is written, delete all but the newest N "
          "finished checkpoints (ckpt-* directories) beside --dir, as this "
          "process sees them (a volume it shares with the shards). Default "
          "0: keep all.");
ABSL_FLAG(int32_t, hold_timeout_s, 300,
          "For `checkpoint` and `export`: how long to wait for the cut to "
          "start (a coordinator that just restarted waits for its workers to "
          "report again) and for every live worker to reach it.");
ABSL_FLAG(std::string, model, "",
          "For `export`: the model (its tables' prefix, e.g. wide_deep); "
          "default: the only one.");
ABSL_FLAG(std::string, format, "fp32",
          "For `export`: the weights as fp32 or fp16.");
ABSL_FLAG(std::string, coordinator, "",
          "The coordinator shard, if not the first of --servers.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the admin token (the shards' --admin_token_file), "
          "sent with every call; calls that change a shard need it.");

namespace {

using ps::LatencyQuantileSeconds;

// A bad flag: exit 64.
int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_admin: %s\n", message.c_str());
  return ps::kExitUsage;
}

// A command the cluster refused or could not answer: 69 for a shard
// unreachable, else 70 (base/exit_codes.h).
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_admin: %s\n", std::string(status.message()).c_str());
  return ps::ExitCodeFor(status);
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    default:
      return "see the code";
  }
}

// --- JSON (nlohmann's): objects keep their keys in the order they are set.

using Json = nlohmann::ordered_json;

// `json` on one line. Invalid UTF-8 in a string (a path, a shard's message)
// becomes U+FFFD rather than an exception; a NaN or an infinity is null.
std::string Dump(const Json& json) {
  return json.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                   Json::error_handler_t::replace);
}

// A float as the double nearest its shortest decimal form, so that 0.01f is
// written 0.01 and not 0.009999999776482582.
double Decimal(float value) {
  if (!std::isfinite(value)) return value;
  char text[32];
  const char* end = std::to_chars(text, text + sizeof(text), value).ptr;
  double decimal = value;
  std::from_chars(text, end, decimal);
  return decimal;
}

// --- Talking to the shards. ---

struct Cluster {
  std::vector<std::string> servers;
  std::string coordinator;  // --coordinator, or the first of servers
  ps::TlsFiles tls;
  std::string token;  // sent with every call; empty for none
  bool json = false;
  std::optional<ps::net::AdminChannels> channels;

  // A call's context with its deadline (--timeout_s, or `at_least` if
  // longer) and the token.
  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration at_least = absl::ZeroDuration()) const {
    return channels->Context(
        std::max(at_least, absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  }
};

// What one shard answered: its reply in JSON (or its error), for --json.
struct ShardAnswer {
  explicit ShardAnswer(std::string server) : server(std::move(server)) {}
  std::string server;
  grpc::Status status;
  Json fields = Json::object();  // the reply, when status is ok
};

// Each shard's answer: {"server": ..., its reply's fields} or {"server":
// ..., "error": {"code": ..., "message": ...}}.
Json ShardAnswersJson(const std::vector<ShardAnswer>& answers) {
  Json shards = Json::array();
  for (const ShardAnswer& answer : answers) {
    Json shard = {{"server", answer.server}};
    if (answer.status.ok()) {
      for (const auto& [key, value] : answer.fields.items()) shard[key] = value;
    } else {
      shard["error"] = {{"code", StatusCodeName(answer.status.error_code())},
                        {"message", answer.status.error_message()}};
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

// Reports the shards that failed on stderr; returns the exit code.
int ReportFailures(const std::string& command,
                   const std::vector<ShardAnswer>& answers) {
  int failures = 0;
  bool unreachable = false;
  for (const ShardAnswer& answer : answers) {
    if (answer.status.ok()) continue;
    std::fprintf(stderr, "ps_admin: %s on %s: %s (%s)\n", command.c_str(),
                 answer.server.c_str(), answer.status.error_message().c_str(),
                 StatusCodeName(answer.status.error_code()));
    ++failures;
    if (answer.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        answer.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      unreachable = true;
    }
  }
  if (failures == 0) return ps::kExitDone;
  return unreachable ? ps::kExitUnavailable : ps::kExitFailed;
}

// `tables`: every table with its rows and bytes added up over the shards.
int Tables(const Cluster& cluster) {
  struct Total {
    ps::TableSpec spec;
    float learning_rate = 0;
    bool mixed_rates = false;
    uint64_t rows = 0, disk_bytes = 0;
    int shards = 0;
  };
  std::vector<Total> totals;
  std::vector<ShardAnswer> answers;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    const std::string& server = cluster.servers[i];
    ps::ListTablesResponse response;
    ShardAnswer answer(server);
    answer.status = cluster.channels->shard(i).ListTables(
        cluster.Context().get(), ps::ListTablesRequest(), &response);
    Json tables = Json::array();
    for (const ps::TableInfo& table : response.tables()) {
      auto total = std::find_if(totals.begin(), totals.end(), [&](auto& t) {
        return t.spec.name() == table.spec().name();
      });
      if (total == totals.end()) {
        totals.push_back(Total{table.spec(), table.learning_rate()});
        total = totals.end() - 1;
      }
      total->mixed_rates |= total->learning_rate != table.learning_rate();
      total->rows += table.estimated_rows();
      total->disk_bytes += table.disk_bytes();
      ++total->shards;
      tables.push_back(Json{{"name", table.spec().name()},
                            {"rows", table.estimated_rows()},
                            {"disk_bytes", table.disk_bytes()},
                            {"learning_rate", Decimal(table.learning_rate())}});
    }
    answer.fields = {{"tables", std::move(tables)}};
    answers.push_back(std::move(answer));
  }
  if (cluster.json) {
    Json tables = Json::array();
    for (const Total& total : totals) {
      tables.push_back(
          Json{{"name", total.spec.name()},
               {"dim", total.spec.dim()},
               {"optimizer", ps::OptimizerName(total.spec.optimizer().kind())},
               {"learning_rate", total.mixed_rates
                                     ? Json(nullptr)
                                     : Json(Decimal(total.learning_rate))},
               {"declared_learning_rate",
                Decimal(total.spec.optimizer().learning_rate())},
               {"rows", total.rows},
               {"disk_bytes", total.disk_bytes},
               {"shards", total.shards}});
    }
    std::printf("%s\n", Dump({{"tables", std::move(tables)},
                              {"shards", ShardAnswersJson(answers)}})
                            .c_str());
  } else {
    std::printf("%-40s %6s %-8s %10s %14s %14s %7s\n", "table", "dim",
                "optimizer", "lr", "rows (est.)", "disk bytes", "shards");
    for (const Total& total : totals) {
      std::printf(
          "%-40s %6u %-8s %10s %14llu %14llu %7d\n", total.spec.name().c_str(),
          total.spec.dim(), ps::OptimizerName(total.spec.optimizer().kind()),
          total.mixed_rates ? "mixed"
                            : absl::StrCat(total.learning_rate).c_str(),
          static_cast<unsigned long long>(total.rows),
          static_cast<unsigned long long>(total.disk_bytes), total.shards);
    }
  }
  return ReportFailures("tables", answers);
}

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

// `stats`: every shard's counters, summed, with rates and per-method
// latency percentiles over --interval_s (since each shard started for 0).
int Stats(const Cluster& cluster) {
  const double interval = absl::GetFlag(FLAGS_interval_s);
  if (!(interval >= 0) || interval > 3600)
    return Fail("--interval_s must be between 0 and 3600");
  auto sample = [&](std::vector<ps::ShardStatsResponse>* responses,
                    std::vector<ShardAnswer>* answers) {
    responses->resize(cluster.servers.size());
    answers->clear();
    for (size_t i = 0; i < cluster.servers.size(); ++i) {
      ShardAnswer answer(cluster.servers[i]);
      answer.status = cluster.channels->shard(i).ShardStats(
          cluster.Context().get(), ps::ShardStatsRequest(), &(*responses)[i]);
      answers->push_back(std::move(answer));
    }
  };
  std::vector<ps::ShardStatsResponse> before, after;
  std::vector<ShardAnswer> first, answers;
  if (interval > 0) {
    sample(&before, &first);
    absl::SleepFor(absl::Seconds(interval));
  }
  sample(&after, &answers);
  // A shard that missed either sample has no rate: it counts as failed.
  for (size_t i = 0; i < first.size(); ++i)
    if (!first[i].status.ok()) answers[i].status = first[i].status;

  std::vector<double> totals(std::size(kStatFields), 0.0);
  std::vector<double> rates(std::size(kStatFields), 0.0);
  std::vector<MethodTotal> methods;
  std::vector<double> bounds;
  // Shards by the commit they run (more than one during a rolling update).
  std::map<std::string, std::vector<int>> versions;
  int answered = 0;
  for (size_t s = 0; s < after.size(); ++s) {
    ShardAnswer& answer = answers[s];
    if (!answer.status.ok()) continue;
    const ps::ShardStatsResponse& now = after[s];
    // The sample before, unless there is none or the shard restarted.
    const bool has_before = interval > 0 && before[s].uptime_seconds() > 0 &&
                            before[s].uptime_seconds() < now.uptime_seconds();
    const ps::ShardStatsResponse empty;
    const ps::ShardStatsResponse& then = has_before ? before[s] : empty;
    const double seconds = now.uptime_seconds() - then.uptime_seconds();
    ++answered;
    for (size_t f = 0; f < std::size(kStatFields); ++f) {
      const StatField& field = kStatFields[f];
      const uint64_t value = (now.*field.get)();
      totals[f] += value;
      answer.fields[field.name] = value;
      if (field.counter && seconds > 0) {
        const uint64_t earlier = (then.*field.get)();
        rates[f] += (value >= earlier ? value - earlier : value) / seconds;
      }
    }
    answer.fields["shard_index"] = now.shard_index();
    answer.fields["uptime_seconds"] = now.uptime_seconds();
    answer.fields["build_commit"] = now.build_commit();
    answer.fields["build_time"] = now.build_time();
    versions[now.build_commit()].push_back(static_cast<int>(now.shard_index()));
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
  // Methods not called in the interval say nothing.
  methods.erase(std::remove_if(methods.begin(), methods.end(),
                               [](const MethodTotal& method) {
                                 return method.calls == 0;
                               }),
                methods.end());
  std::sort(methods.begin(), methods.end(),
            [](const MethodTotal& a, const MethodTotal& b) {
              return a.calls > b.calls;
            });
  auto quantile = [&](const MethodTotal& method, double q) {
    return LatencyQuantileSeconds(bounds, method.latency_buckets, q);
  };
  const int code = ReportFailures("stats", answers);
  if (cluster.json) {
    Json total = Json::object(), per_second = Json::object();
    for (size_t f = 0; f < std::size(kStatFields); ++f) {
      total[kStatFields[f].name] = static_cast<uint64_t>(totals[f]);
      if (kStatFields[f].counter) per_second[kStatFields[f].name] = rates[f];
    }
    Json method_json = Json::array();
    for (const MethodTotal& method : methods) {
      method_json.push_back(Json{{"method", method.method},
                                 {"calls", method.calls},
                                 {"errors", method.errors},
                                 {"calls_per_second", method.calls_per_second},
                                 {"p50_seconds", quantile(method, 0.5)},
                                 {"p99_seconds", quantile(method, 0.99)}});
    }
    std::printf("%s\n", Dump({{"interval_seconds", interval},
                              {"shards_answered", answered},
                              {"total", std::move(total)},
                              {"per_second", std::move(per_second)},
                              {"methods", std::move(method_json)},
                              {"shards", ShardAnswersJson(answers)}})
                            .c_str());
    return code;
  }
  std::printf("%d of %zu shards; rates and latencies %s\n", answered,
              cluster.servers.size(),
              interval > 0
                  ? absl::StrFormat("over the last %.2f s", interval).c_str()
                  : "since each shard started");
  for (const auto& [commit, shards] : versions) {
    std::printf("build %s on shard%s %s\n",
                commit.empty() ? "(not reported)" : commit.c_str(),
                shards.size() == 1 ? "" : "s",
                absl::StrJoin(shards, ",").c_str());
  }
  std::printf("%-24s %16s %14s\n", "", "total", "per s");
  for (size_t f = 0; f < std::size(kStatFields); ++f) {
    if (kStatFields[f].counter) {
      std::printf("%-24s %16.0f %14.1f\n", kStatFields[f].name, totals[f],
                  rates[f]);
    } else {
      std::printf("%-24s %16.0f\n", kStatFields[f].name, totals[f]);
    }
  }
  std::printf("\n%-44s %10s %8s %10s %10s %10s\n", "method", "calls", "errors",
              "calls/s", "p50 ms", "p99 ms");
  for (const MethodTotal& method : methods) {
    std::printf(
        "%-44s %10llu %8llu %10.1f %10.3f %10.3f\n", method.method.c_str(),
        static_cast<unsigned long long>(method.calls),
        static_cast<unsigned long long>(method.errors), method.calls_per_second,
        1e3 * quantile(method, 0.5), 1e3 * quantile(method, 0.99));
  }
  return code;
}

// `row`: one row, from the shard that owns its key.
int Row(const Cluster& cluster) {
  const uint64_t key = absl::GetFlag(FLAGS_key);
  const size_t owner = ps::ShardForKey(key, cluster.servers.size());
  const std::string& server = cluster.servers[owner];
  ps::GetRowRequest request;
  request.set_table(absl::GetFlag(FLAGS_table));
  request.set_key(key);
  request.set_optimizer_state(true);
  ps::GetRowResponse response;
  ShardAnswer answer(server);
  answer.status = cluster.channels->shard(owner).GetRow(cluster.Context().get(),
                                                        request, &response);
  auto floats = [](const auto& values) {
    Json numbers = Json::array();
    for (float value : values) numbers.push_back(Decimal(value));
    return numbers;
  };
  if (answer.status.ok()) {
    if (cluster.json) {
      std::printf(
          "%s\n",
          Dump({{"server", server},
                {"table", request.table()},
                {"key", key},
                {"stored", response.stored()},
                {"values", floats(response.values())},
                {"optimizer_state", floats(response.optimizer_state())}})
              .c_str());
    } else {
      std::printf("%s [%s]\n",
                  response.stored() ? "stored" : "initial value (never pushed)",
                  absl::StrJoin(response.values(), ", ").c_str());
      if (response.optimizer_state_size() > 0) {
        std::printf("optimizer state [%s]\n",
                    absl::StrJoin(response.optimizer_state(), ", ").c_str());
      }
    }
  }
  return ReportFailures("row", {answer});
}

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

// `clocks`: the workers' clocks, from the coordinator shard.
int Clocks(const Cluster& cluster) {
  ps::WorkerClocksResponse response;
  ShardAnswer answer(cluster.coordinator);
  answer.status = AskClocks(cluster, &response);
  if (answer.status.ok()) {
    if (cluster.json) {
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

// Runs `call` on every shard and prints what each did: `done` in words, or
// the fields the call filled in for --json.
int OnEveryShard(
    const Cluster& cluster, const std::string& command,
    const std::function<grpc::Status(ps::Admin::Stub&, Json*)>& call,
    const std::function<std::string(const Json&)>& done) {
  std::vector<ShardAnswer> answers;
  for (const std::string& server : cluster.servers)
    answers.emplace_back(server);
  cluster.channels->OnEveryShard([&](size_t i) {
    answers[i].status = call(cluster.channels->shard(i), &answers[i].fields);
  });
  for (const ShardAnswer& answer : answers) {
    if (answer.status.ok() && !cluster.json) {
      std::printf("%s: %s\n", answer.server.c_str(),
                  done(answer.fields).c_str());
    }
  }
  if (cluster.json) {
    std::printf("%s\n", Dump({{"command", command},
                              {"shards", ShardAnswersJson(answers)}})
                            .c_str());
  }
  return ReportFailures(command, answers);
}

// `set-lr`: a table's learning rate on every shard, live.
int SetLearningRate(const Cluster& cluster) {
  ps::SetLearningRateRequest request;
  request.set_table(absl::GetFlag(FLAGS_table));
  request.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_lr)));
  return OnEveryShard(
      cluster, "set-lr",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::SetLearningRateResponse response;
        grpc::Status status =
            admin.SetLearningRate(cluster.Context().get(), request, &response);
        *fields = {{"learning_rate", Decimal(request.learning_rate())},
                   {"previous_learning_rate",
                    Decimal(response.previous_learning_rate())}};
        return status;
      },
      [&](const Json& fields) {
        return absl::StrCat("learning rate of ", request.table(), " is ",
                            Dump(fields["learning_rate"]), " (was ",
                            Dump(fields["previous_learning_rate"]),
                            ") from the next push on");
      });
}

// `drop-table`: a table and its rows on every shard; refused while workers
// hold leases unless --force.
int DropTable(const Cluster& cluster) {
  ps::DropTableRequest request;
  request.set_table(absl::GetFlag(FLAGS_table));
  request.set_force(absl::GetFlag(FLAGS_force));
  if (!request.force()) {
    // Only the shard the workers coordinate through knows their leases:
    // ask every shard (and --coordinator) before any drops anything.
    std::vector<std::pair<std::string, ps::Admin::Stub*>> asked;
    for (size_t i = 0; i < cluster.servers.size(); ++i)
      asked.emplace_back(cluster.servers[i], &cluster.channels->shard(i));
    if (std::find(cluster.servers.begin(), cluster.servers.end(),
                  cluster.coordinator) == cluster.servers.end()) {
      asked.emplace_back(cluster.coordinator, &cluster.channels->coordinator());
    }
    std::vector<std::string> live;
    for (const auto& [server, stub] : asked) {
      ps::WorkerClocksResponse clocks;
      const grpc::Status status = stub->WorkerClocks(
          cluster.Context().get(), ps::WorkerClocksRequest(), &clocks);
      if (!status.ok()) {
        return Fail(absl::UnavailableError(absl::StrCat(
            "cannot ask ", server, " whether workers are training (",
            status.error_message(),
            "); nothing was dropped (--force drops without asking)")));
      }
      for (const auto& worker : clocks.workers()) {
        if (worker.live())
          live.push_back(absl::StrCat(worker.worker(), " (on ", server, ")"));
      }
    }
    if (!live.empty()) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "worker(s) ", absl::StrJoin(live, ", "),
          " hold leases and may be training ", request.table(),
          ": nothing was dropped; stop them first, or add --force")));
    }
  }
  // A shard without the table has nothing to drop: running the command
  // again after a shard failed finishes the job.
  int held = 0;
  const int code = OnEveryShard(
      cluster, "drop-table",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::DropTableResponse response;
        grpc::Status status =
            admin.DropTable(cluster.Context().get(), request, &response);
        const bool absent = status.error_code() == grpc::StatusCode::NOT_FOUND;
        held += status.ok();
        *fields = {{"table", request.table()}, {"dropped", status.ok()}};
        return absent ? grpc::Status::OK : status;
      },
      [&](const Json& fields) {
        return fields["dropped"] == true
                   ? absl::StrCat("dropped ", request.table())
                   : absl::StrCat("has no table ", request.table());
      });
  if (code == 0 && held == 0) {
    return Fail(absl::NotFoundError(
        absl::StrCat("no shard has a table named ", request.table())));
  }
  return code;
}

// `expire`: a table's expired rows dropped now on every shard.
int Expire(const Cluster& cluster) {
  ps::ExpireTableRequest request;
  request.set_table(absl::GetFlag(FLAGS_table));
  return OnEveryShard(
      cluster, "expire",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::ExpireTableResponse response;
        // A compaction of a big table takes minutes.
        grpc::Status status = admin.ExpireTable(
            cluster.Context(absl::Hours(1)).get(), request, &response);
        *fields = {{"rows_in_memory", response.rows_in_memory()},
                   {"rows_on_disk", response.rows_on_disk()}};
        return status;
      },
      [&](const Json& fields) {
        return absl::StrCat(request.table(), ": ",
                            Dump(fields["rows_in_memory"]),
                            " expired rows dropped from memory, ",
                            Dump(fields["rows_on_disk"]), " from disk");
      });
}

// `drain`: every shard stops as SIGTERM stops it.
int Drain(const Cluster& cluster) {
  return OnEveryShard(
      cluster, "drain",
      [&](ps::Admin::Stub& admin, Json* fields) {
        ps::DrainResponse response;
        *fields = {{"draining", true}};
        return admin.Drain(cluster.Context().get(), ps::DrainRequest(),
                           &response);
      },
      [](const Json&) {
        return std::string(
            "draining (health NOT_SERVING; calls in flight finish, dirty rows "
            "are written back, then it exits)");
      });
}

// Each worker's clock in `manifest` and whether it had finished or its
// lease had lapsed, as JSON.
Json WorkersJson(const ps::CheckpointManifest& manifest) {
  Json workers = Json::array();
  for (const auto& worker : manifest.workers()) {
    workers.push_back(Json{{"worker", worker.worker()},
                           {"clock", worker.clock()},
                           {"state", worker.finished() ? "finished"
                                     : worker.live()   ? "live"
                                                       : "lapsed"}});
  }
  return workers;
}

// `checkpoint`: one consistent checkpoint of every shard in --servers.
int Checkpoint(const Cluster& cluster) {
  ps::CheckpointOptions options;
  options.servers = cluster.servers;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.dir = absl::GetFlag(FLAGS_dir);
  options.tls = cluster.tls;
  options.token = cluster.token;
  options.progress = true;
  if (absl::GetFlag(FLAGS_hold_timeout_s) <= 0)
    return Fail("--hold_timeout_s must be positive");
  options.hold_timeout = absl::Seconds(absl::GetFlag(FLAGS_hold_timeout_s));
  absl::StatusOr<ps::CheckpointManifest> manifest = ps::TakeCheckpoint(options);
  if (!manifest.ok()) return Fail(manifest.status());
  if (const int keep = absl::GetFlag(FLAGS_checkpoints_to_keep); keep > 0) {
    const std::string parent =
        std::filesystem::path(options.dir).lexically_normal().parent_path();
    for (const std::string& removed : ps::PruneCheckpoints(parent, keep))
      std::fprintf(stderr, "removed the older checkpoint %s\n",
                   removed.c_str());
  }
  uint64_t bytes = 0;
  for (const auto& shard : manifest->shards()) bytes += shard.bytes();
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n",
                Dump({{"dir", options.dir},
                      {"cut", manifest->cut()},
                      {"shards", manifest->num_shards()},
                      {"bytes", bytes},
                      {"hold_seconds", manifest->hold_seconds()},
                      {"snapshot_seconds", manifest->snapshot_seconds()},
                      {"workers", WorkersJson(*manifest)}})
                    .c_str());
    return 0;
  }
  std::printf(
      "checkpoint at clock %lld in %s: %u shards, %llu bytes; workers held "
      "%.3f s for the cut, shards wrote their parts in %.3f s\n",
      static_cast<long long>(manifest->cut()), options.dir.c_str(),
      manifest->num_shards(), static_cast<unsigned long long>(bytes),
      manifest->hold_seconds(), manifest->snapshot_seconds());
  for (const auto& worker : manifest->workers()) {
    if (!worker.finished() && !worker.live()) {
      std::printf(
          "warning: worker %u's lease had lapsed at clock %lld: it was not "
          "waited for, and a step it had in flight may be on some shards "
          "only\n",
          worker.worker(), static_cast<long long>(worker.clock()));
    }
  }
  return 0;
}

// `export`: one model's weights at one cut, for serving.
int Export(const Cluster& cluster) {
  ps::ExportOptions options;
  options.cluster.servers = cluster.servers;
  options.cluster.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.cluster.dir = absl::GetFlag(FLAGS_dir);
  options.cluster.tls = cluster.tls;
  options.cluster.token = cluster.token;
  options.cluster.progress = true;
  if (absl::GetFlag(FLAGS_hold_timeout_s) <= 0)
    return Fail("--hold_timeout_s must be positive");
  options.cluster.hold_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_hold_timeout_s));
  options.model = absl::GetFlag(FLAGS_model);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "fp32" && format != "fp16")
    return Fail("--format must be fp32 or fp16, not " + format);
  options.fp16 = format == "fp16";
  absl::StatusOr<ps::ExportManifest> manifest = ps::TakeExport(options);
  if (!manifest.ok()) return Fail(manifest.status());
  uint64_t rows = 0, bytes = 0;
  for (const auto& table : manifest->tables()) {
    rows += table.rows();
    bytes += table.bytes();
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", Dump({{"model", manifest->model_name()},
                              {"dir", options.cluster.dir},
                              {"cut", manifest->cut()},
                              {"tables", manifest->tables_size()},
                              {"rows", rows},
                              {"bytes", bytes},
                              {"format", format},
                              {"hold_seconds", manifest->hold_seconds()},
                              {"export_seconds", manifest->export_seconds()}})
                            .c_str());
    return 0;
  }
  std::printf(
      "exported %s at clock %lld into %s: %zu tables, %llu rows, %llu bytes "
      "(%s); workers held %.3f s for the cut, the shards wrote in %.3f s\n",
      manifest->model_name().c_str(), static_cast<long long>(manifest->cut()),
      options.cluster.dir.c_str(), static_cast<size_t>(manifest->tables_size()),
      static_cast<unsigned long long>(rows),
      static_cast<unsigned long long>(bytes), format.c_str(),
      manifest->hold_seconds(), manifest->export_seconds());
  return 0;
}

// "0:16 1:16 2:9(finished)": each worker's clock in `manifest`, marked
// when it had finished or its lease had lapsed.
std::string WorkerClocks(const ps::CheckpointManifest& manifest) {
  std::vector<std::string> clocks;
  for (const auto& worker : manifest.workers()) {
    clocks.push_back(absl::StrCat(
        worker.worker(), ":", worker.clock(),
        worker.finished() ? "(finished)" : (worker.live() ? "" : "(lapsed)")));
  }
  return absl::StrJoin(clocks, " ");
}

// `checkpoints`: the checkpoint in --dir, or those in its subdirectories.
int ListCheckpoints() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::vector<std::string> candidates = {dir};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (entry.is_directory()) candidates.push_back(entry.path().string());
  std::sort(candidates.begin() + 1, candidates.end());
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    std::printf("%-40s %10s %7s %14s  %-25s  %s\n", "checkpoint", "clock",
                "shards", "bytes", "taken", "worker clocks");
  }
  Json listed = Json::array();
  int found = 0;
  for (const std::string& candidate : candidates) {
    absl::StatusOr<ps::CheckpointManifest> manifest =
        ps::ReadManifest(candidate);
    if (!manifest.ok()) continue;
    uint64_t bytes = 0;
    for (const auto& shard : manifest->shards()) bytes += shard.bytes();
    ++found;
    if (json) {
      listed.push_back(Json{{"path", candidate},
                            {"cut", manifest->cut()},
                            {"shards", manifest->num_shards()},
                            {"bytes", bytes},
                            {"created_at", manifest->created_at()},
                            {"workers", WorkersJson(*manifest)}});
      continue;
    }
    std::printf("%-40s %10lld %7u %14llu  %-25s  %s\n", candidate.c_str(),
                static_cast<long long>(manifest->cut()), manifest->num_shards(),
                static_cast<unsigned long long>(bytes),
                manifest->created_at().c_str(),
                WorkerClocks(*manifest).c_str());
  }
  if (found == 0) return Fail("no checkpoint in " + dir);
  if (json)
    std::printf("%s\n", Dump({{"checkpoints", std::move(listed)}}).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Asks ps_server shards: ps_admin [--servers=HOST:PORT,...] [--json] "
      "COMMAND\n"
      "  tables       every table, rows and bytes added up over the shards\n"
      "  stats        counters summed over the shards, rates and p50/p99 per "
      "method over --interval_s\n"
      "  row          --table --key: one row, from the shard that owns it\n"
      "  clocks       the workers' clocks (the coordinator shard: the first "
      "of --servers or --coordinator)\n"
      "  set-lr       --table --lr: the table's learning rate from the next "
      "push on\n"
      "  drop-table   --table [--force]: drop it and its rows; refused while "
      "workers hold leases unless --force\n"
      "  expire       --table: drop its expired rows now (a compaction)\n"
      "  drain        each shard stops as SIGTERM stops it\n"
      "  checkpoint   --dir [--checkpoints_to_keep=N]: a consistent "
      "checkpoint of every shard\n"
      "  checkpoints  --dir: the checkpoints in a directory\n"
      "  export       --dir [--format=fp16] [--model]: one model's weights "
      "for ps_predict\n"
      "Commands that change a shard need --token_file when the shards have "
      "--admin_token_file.");
  ps::SetVersionFlag("ps_admin");
  std::vector<char*> commands = absl::ParseCommandLine(argc, argv);
  static constexpr absl::string_view kCommands[] = {
      "tables", "stats", "row",        "clocks",      "set-lr", "drop-table",
      "expire", "drain", "checkpoint", "checkpoints", "export"};
  const std::string known = absl::StrJoin(kCommands, ", ");
  if (commands.size() != 2) return Fail("give one command: " + known);
  const std::string command = commands[1];
  if (std::find(std::begin(kCommands), std::end(kCommands), command) ==
      std::end(kCommands)) {
    return Fail("unknown command '" + command + "': use " + known);
  }
  if ((command == "checkpoint" || command == "checkpoints" ||
       command == "export") &&
      absl::GetFlag(FLAGS_dir).empty()) {
    return Fail(command + " needs --dir");
  }
  if (command == "checkpoints") return ListCheckpoints();
  if (absl::GetFlag(FLAGS_checkpoints_to_keep) < 0)
    return Fail("--checkpoints_to_keep must be >= 0 (0 keeps all)");
  if ((command == "row" || command == "set-lr" || command == "drop-table" ||
       command == "expire") &&
      absl::GetFlag(FLAGS_table).empty()) {
    return Fail(command + " needs --table");
  }
  if (command == "set-lr") {
    const double lr = absl::GetFlag(FLAGS_lr);
    if (!(lr > 0) || !std::isfinite(lr) ||
        lr > std::numeric_limits<float>::max()) {
      return Fail("set-lr needs --lr, a positive learning rate");
    }
  }
  Cluster cluster;
  cluster.json = absl::GetFlag(FLAGS_json);
  cluster.tls.ca = absl::GetFlag(FLAGS_tls_ca);
  cluster.tls.cert = absl::GetFlag(FLAGS_tls_cert);
  cluster.tls.key = absl::GetFlag(FLAGS_tls_key);
  cluster.tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ps::ReadTokenFile(path);
    if (!token.ok()) return Fail(token.status().ToString());
    cluster.token = *std::move(token);
  }
  cluster.servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipWhitespace());
  if (cluster.servers.empty()) return Fail("--servers names no shard");
  cluster.coordinator = absl::GetFlag(FLAGS_coordinator).empty()
                            ? cluster.servers[0]
                            : absl::GetFlag(FLAGS_coordinator);
  // Fails for TLS files that cannot be read and for a token that would
  // leave loopback in plaintext: bad flags, either way.
  absl::StatusOr<ps::net::AdminChannels> channels =
      ps::net::AdminChannels::Connect(cluster.servers, cluster.coordinator,
                                      cluster.tls, cluster.token);
  if (!channels.ok()) return Fail(std::string(channels.status().message()));
  cluster.channels = *std::move(channels);
  if (command == "checkpoint") return Checkpoint(cluster);
  if (command == "export") return Export(cluster);
  if (command == "tables") return Tables(cluster);
  if (command == "stats") return Stats(cluster);
  if (command == "row") return Row(cluster);
  if (command == "clocks") return Clocks(cluster);
  if (command == "set-lr") return SetLearningRate(cluster);
  if (command == "drop-table") return DropTable(cluster);
  if (command == "expire") return Expire(cluster);
  return Drain(cluster);
}
