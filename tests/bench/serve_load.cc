// serve_load: drives ps_serve (proto/serving.proto) from N client threads,
// each with its own channel, for a fixed time, and prints one JSON line:
// calls, lines (Predict) or rows (Lookup) per second, and the calls' p50
// and p99 latency. For tests/bench/online_bench.sh.
//
//   serve_load --address=HOST:PORT --lines=FILE [--clients=4] [--seconds=10]
//              [--lines_per_call=256] [--lookup_table=NAME --keys_per_call=N]
//
// Predict sends the file's lines in turn, --lines_per_call per call. With
// --lookup_table, Lookup asks for --keys_per_call keys per call, drawn from
// a fixed pseudo-random sequence over the first 2^20 key values and each
// file line's hash (a mix of rows the model holds and rows it does not).

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/lock_mode.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "proto/serving.grpc.pb.h"

ABSL_FLAG(std::string, address, "", "ps_serve's HOST:PORT.");
ABSL_FLAG(std::string, lines, "", "Click-log lines to send (Predict).");
ABSL_FLAG(int32_t, clients, 4, "Client threads, each with its own channel.");
ABSL_FLAG(double, seconds, 10, "How long to send for.");
ABSL_FLAG(int32_t, lines_per_call, 256, "Predict: lines per call.");
ABSL_FLAG(std::string, lookup_table, "",
          "Lookup instead of Predict, in this table.");
ABSL_FLAG(int32_t, keys_per_call, 1024, "Lookup: keys per call.");

namespace {

struct ThreadResult {
  int64_t calls = 0;
  int64_t items = 0;
  int64_t errors = 0;
  std::vector<double> latencies_ms;
};

void Drive(const std::string& address, const std::vector<std::string>& lines,
           int thread, absl::Time until, ThreadResult* result) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(256 << 20);
  // A channel of its own (distinct arguments keep gRPC from sharing one).
  arguments.SetInt("ps.serve_load.thread", thread);
  auto stub = ps::Serving::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), arguments));
  const std::string table = absl::GetFlag(FLAGS_lookup_table);
  const int per_call = table.empty() ? absl::GetFlag(FLAGS_lines_per_call)
                                     : absl::GetFlag(FLAGS_keys_per_call);
  size_t next = static_cast<size_t>(thread) * 7919;
  uint64_t key_state = 0x9E3779B97F4A7C15ull * (thread + 1);
  while (absl::Now() < until) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    const absl::Time start = absl::Now();
    grpc::Status status;
    if (table.empty()) {
      ps::PredictRequest request;
      for (int i = 0; i < per_call; ++i)
        request.add_lines(lines[next++ % lines.size()]);
      ps::PredictResponse response;
      status = stub->Predict(&context, request, &response);
    } else {
      ps::LookupRequest request;
      request.set_table(table);
      for (int i = 0; i < per_call; ++i) {
        key_state = key_state * 6364136223846793005ull + 1442695040888963407ull;
        request.add_keys(key_state >> 44);
      }
      ps::LookupResponse response;
      status = stub->Lookup(&context, request, &response);
    }
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (!status.ok()) {
      if (++result->errors == 1) {
        std::fprintf(stderr, "serve_load: %s\n",
                     status.error_message().c_str());
      }
      continue;
    }
    ++result->calls;
    result->items += per_call;
    result->latencies_ms.push_back(ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  absl::ParseCommandLine(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  std::vector<std::string> lines;
  {
    std::ifstream in(absl::GetFlag(FLAGS_lines));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  if (address.empty() ||
      (absl::GetFlag(FLAGS_lookup_table).empty() && lines.empty())) {
    std::fprintf(stderr, "serve_load: --address and --lines are required\n");
    return 64;
  }
  const int clients = std::max(1, absl::GetFlag(FLAGS_clients));
  const absl::Time start = absl::Now();
  const absl::Time until = start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<ThreadResult> results(clients);
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back(Drive, address, std::cref(lines), t, until,
                         &results[t]);
  for (auto& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ThreadResult all;
  for (const ThreadResult& result : results) {
    all.calls += result.calls;
    all.items += result.items;
    all.errors += result.errors;
    all.latencies_ms.insert(all.latencies_ms.end(), result.latencies_ms.begin(),
                            result.latencies_ms.end());
  }
  std::sort(all.latencies_ms.begin(), all.latencies_ms.end());
  auto quantile = [&](double q) {
    if (all.latencies_ms.empty()) return 0.0;
    return all.latencies_ms[std::min(
        all.latencies_ms.size() - 1,
        static_cast<size_t>(q * all.latencies_ms.size()))];
  };
  std::printf(
      "{\"clients\": %d, \"calls\": %lld, \"errors\": %lld, "
      "\"items_per_sec\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f}\n",
      clients, static_cast<long long>(all.calls),
      static_cast<long long>(all.errors), all.items / seconds, quantile(0.5),
      quantile(0.99));
  return all.calls > 0 ? 0 : 1;
}
