#include "ops/admin_command.h"

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
#include "ops/checkpoint.h"
#include "proto/admin.grpc.pb.h"

namespace ps::ops {

// A bad flag: exit 64.
int Fail(const std::string& message) {
  return ps::FailUsage("ps_admin", message);
}

// A command the cluster refused or could not answer: 69 for a shard
// unreachable, else 70 (base/exit_codes.h).
int Fail(const absl::Status& status) {
  return ps::FailWith("ps_admin", status);
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

// Runs `call` on every shard and prints what each did: `done` in words, or
// the fields the call filled in for --json.
int OnEveryShard(
    const Cluster& cluster, const std::string& command,
    const std::function<grpc::Status(ps::Admin::Stub&, Json*)>& call,
    const std::function<std::string(const Json&)>& done) {
  // One shard after the other, as an operator would: a drain or a
  // compaction (expire) never takes every shard at the same moment.
  std::vector<ShardAnswer> answers;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    ShardAnswer answer(cluster.servers[i]);
    answer.status = call(cluster.channels->shard(i), &answer.fields);
    if (answer.status.ok() && !cluster.options.json) {
      std::printf("%s: %s\n", answer.server.c_str(),
                  done(answer.fields).c_str());
    }
    answers.push_back(std::move(answer));
  }
  if (cluster.options.json) {
    std::printf("%s\n", Dump({{"command", command},
                              {"shards", ShardAnswersJson(answers)}})
                            .c_str());
  }
  return ReportFailures(command, answers);
}

}  // namespace ps::ops
