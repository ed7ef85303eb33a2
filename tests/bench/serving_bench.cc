// serving_bench: pull and push rows/s of a ps_server shard against Redis
// holding the same rows as binary values, side by side, plus the machine's
// loopback bandwidth as the ceiling. Started by tests/bench/serving_bench.sh,
// which starts the servers; prints markdown table rows.
//
// Keys are drawn with a power law (Zipf-like, exponent --zipf) over the
// table's rows, 4096 per request. Pull: ps.Pull / Redis MGET. Push: ps.Push
// (SGD applied on the server) / Redis MGET + SGD on the client + MSET, in one
// pipelined round trip each (read-modify-write).

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/heap_policy.h"
#include "base/lock_mode.h"
#include "base/wire_format.h"
#include "client/pull_reply.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"
#include "proto/ps.grpc.pb.h"

ABSL_FLAG(std::string, ps, "", "ps_server host:port.");
ABSL_FLAG(std::string, system, "ps_server",
          "Name of the server behind --ps, for the table.");
ABSL_FLAG(std::string, label, "hot tier",
          "What this ps_server's configuration is.");
ABSL_FLAG(int32_t, redis_port, 0, "Redis port on 127.0.0.1; 0: skip Redis.");
ABSL_FLAG(int32_t, dim, 16, "Row dimension.");
ABSL_FLAG(std::string, wire_format, "fp32",
          "How ps_server's rows and gradients travel: fp32, fp16 or bf16.");
ABSL_FLAG(int64_t, rows, 500000, "Rows in the table.");
ABSL_FLAG(bool, store_rows, true,
          "Store the table's rows (push zeros) before measuring; false when "
          "another run against the same server stored them.");
ABSL_FLAG(double, settle_s, 0,
          "Seconds to wait after storing the table's rows before measuring: "
          "the shard writes the stored rows back to RocksDB meanwhile, work "
          "a serving shard is done with.");
ABSL_FLAG(int32_t, batch, 4096, "Keys per request.");
ABSL_FLAG(double, zipf, 1.05, "Power-law exponent of key popularity.");
ABSL_FLAG(bool, distinct_keys, true,
          "Each batch's keys are distinct, as a worker's are (it sums a "
          "batch's repeated keys before it pushes) and as ps-lite requires; "
          "false: drawn with repeats (about half of a 4096-key batch over "
          "500000 rows at --zipf=1.05), which a shard counts once.");
ABSL_FLAG(double, seconds, 3, "Seconds per measurement.");
ABSL_FLAG(std::vector<std::string>, clients,
          (std::vector<std::string>{"1", "4"}),
          "Concurrent client counts to measure.");
ABSL_FLAG(std::vector<std::string>, ops,
          (std::vector<std::string>{"pull", "push"}),
          "Operations to measure (for profiling one of them).");
ABSL_FLAG(bool, loopback, false,
          "Only measure the loopback TCP bandwidth (bytes/s).");

namespace {

struct Result {
  double rows_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// Keys 0..rows-1 with power-law popularity, scrambled so that popular keys
// are spread over the key space.
class KeyDrawer {
 public:
  KeyDrawer(int64_t rows, double exponent, uint64_t seed)
      : rows_(rows), exponent_(exponent), rng_(seed) {}
  uint64_t Next() {
    const double u = uniform_(rng_);
    const double x =
        std::pow(1.0 + u * (std::pow(rows_ + 1.0, 1.0 - exponent_) - 1.0),
                 1.0 / (1.0 - exponent_));
    const uint64_t rank =
        std::min<int64_t>(static_cast<int64_t>(x) - 1, rows_ - 1);
    return (rank * 0x9E3779B97F4A7C15ULL) % static_cast<uint64_t>(rows_);
  }

 private:
  const int64_t rows_;
  const double exponent_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

// Distinct key batches each client cycles through (8 MiB of keys at 4096).
constexpr int kBatchesPerClient = 256;

// Runs `clients` threads calling `request(client, keys)` for --seconds.
template <typename Request>
Result Measure(int clients, Request request) {
  const int batch = absl::GetFlag(FLAGS_batch);
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<std::vector<double>> latencies(clients);
  std::vector<int64_t> rows(clients, 0);
  // Keys are drawn before the clock starts: two pow() per key cost about a
  // third of a 4096-key pull, and the benchmark measures the servers.
  std::vector<std::vector<std::vector<uint64_t>>> key_batches(clients);
  for (int c = 0; c < clients; ++c) {
    KeyDrawer drawer(absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_zipf),
                     100 + c);
    key_batches[c].resize(kBatchesPerClient);
    for (auto& keys : key_batches[c]) {
      keys.resize(batch);
      if (!absl::GetFlag(FLAGS_distinct_keys)) {
        for (auto& key : keys) key = drawer.Next();
        continue;
      }
      absl::flat_hash_set<uint64_t> drawn;
      int64_t draws = 0;
      for (auto& key : keys) {
        do {
          if (++draws > 100 * static_cast<int64_t>(batch)) {
            std::fprintf(stderr,
                         "--distinct_keys: %d distinct keys of --rows=%lld "
                         "take too many draws at --zipf; more rows, or "
                         "--distinct_keys=false\n",
                         batch,
                         static_cast<long long>(absl::GetFlag(FLAGS_rows)));
            std::exit(2);
          }
          key = drawer.Next();
        } while (!drawn.insert(key).second);
      }
    }
  }
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const std::vector<std::vector<uint64_t>>& pool = key_batches[c];
      for (size_t i = 0; absl::Now() - start < duration; ++i) {
        const std::vector<uint64_t>& keys = pool[i % pool.size()];
        const absl::Time begin = absl::Now();
        if (!request(c, keys)) return;
        latencies[c].push_back(absl::ToDoubleMilliseconds(absl::Now() - begin));
        rows[c] += batch;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  int64_t total = 0;
  for (int c = 0; c < clients; ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    total += rows[c];
  }
  std::sort(all.begin(), all.end());
  Result result;
  result.rows_per_second = total / seconds;
  if (!all.empty()) {
    result.p50_ms = all[all.size() / 2];
    result.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return result;
}

double LoopbackBytesPerSecond() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  listen(listener, 1);
  std::atomic<int64_t> received{0};
  std::thread reader([&] {
    const int connection = accept(listener, nullptr, nullptr);
    std::vector<char> buffer(1 << 20);
    ssize_t n;
    while ((n = read(connection, buffer.data(), buffer.size())) > 0)
      received += n;
    close(connection);
  });
  const int sender = socket(AF_INET, SOCK_STREAM, 0);
  connect(sender, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  std::vector<char> buffer(1 << 20, 'x');
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(2)) {
    if (write(sender, buffer.data(), buffer.size()) <= 0) break;
  }
  close(sender);
  reader.join();
  close(listener);
  return received.load() / absl::ToDoubleSeconds(absl::Now() - start);
}

std::vector<int> ClientCounts() {
  std::vector<int> counts;
  for (const std::string& text : absl::GetFlag(FLAGS_clients)) {
    int count = 0;
    if (!absl::SimpleAtoi(text, &count) || count < 1 || count > 4) {
      std::fprintf(stderr, "--clients takes counts from 1 to 4; got %s\n",
                   text.c_str());
      std::exit(2);
    }
    counts.push_back(count);
  }
  return counts;
}

bool Measures(absl::string_view op) {
  const std::vector<std::string> ops = absl::GetFlag(FLAGS_ops);
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::string KeyBytes(uint64_t key, int dim) {
  return absl::StrCat("r", dim, ":", key);
}

constexpr float kLearningRate = 0.01f;
constexpr float kGradient = 0.001f;

// What every measurement of a run shares, from the flags.
struct BenchSetup {
  int dim = 0;
  int64_t rows = 0;
  int batch = 0;
  ps::WireFormat format = ps::WireFormat::FP32;
  // Bytes of a row in memory, and as it travels (the MB/s column counts
  // these for ps_server).
  double row_bytes = 0;
  double wire_row_bytes = 0;
  std::string table;
};

// The setup the flags ask for; false (said on stderr) for a bad one.
bool SetupFromFlags(BenchSetup* setup) {
  setup->dim = absl::GetFlag(FLAGS_dim);
  setup->rows = absl::GetFlag(FLAGS_rows);
  setup->batch = absl::GetFlag(FLAGS_batch);
  if (!ps::WireFormat_Parse(
          absl::AsciiStrToUpper(absl::GetFlag(FLAGS_wire_format)),
          &setup->format)) {
    std::fprintf(stderr, "--wire_format must be fp32, fp16 or bf16\n");
    return false;
  }
  setup->row_bytes = setup->dim * sizeof(float);
  setup->wire_row_bytes = setup->dim * ps::WireValueBytes(setup->format);
  setup->table = absl::StrCat("bench_", setup->dim);
  return true;
}

// One markdown row; `hit_rate`: the share of the measurement's row lookups
// the hot tier answered, or "-".
void PrintRow(const BenchSetup& setup, const std::string& system,
              const char* op, int clients, const Result& r,
              const std::string& hit_rate = "-") {
  const double row_bytes =
      system.rfind("Redis", 0) == 0 ? setup.row_bytes : setup.wire_row_bytes;
  std::printf("| %s | %s | %d | %d | %s | %.2f | %.0f | %.2f | %.2f | %s |\n",
              system.c_str(), absl::GetFlag(FLAGS_label).c_str(), setup.dim,
              clients, op, r.rows_per_second / 1e6,
              r.rows_per_second * row_bytes / 1e6, r.p50_ms, r.p99_ms,
              hit_rate.c_str());
  std::fflush(stdout);
}

// ps.ParameterServer/Pull's name, as long as the process lives (a call's
// context keeps a pointer to it).
const std::string& PullMethod() {
  static const std::string* const method =
      new std::string("/ps.ParameterServer/Pull");
  return *method;
}

// Four clients of a ps_server, each on a channel (a connection) of its own.
class PsServerClients {
 public:
  PsServerClients(const BenchSetup& setup, const std::string& address)
      : setup_(setup), pulled_rows_(4) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    for (int c = 0; c < 4; ++c) {
      args.SetInt("bench.client", c);
      std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(ps::ParameterServer::NewStub(channel));
      raw_pulls_.push_back(std::make_unique<RawPullStub>(channel));
      pull_queues_.push_back(std::make_unique<grpc::CompletionQueue>());
    }
    admin_ = ps::Admin::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    std::vector<float> gradients(static_cast<size_t>(setup.batch) * setup.dim,
                                 kGradient);
    if (setup.format == ps::WireFormat::FP16)
      gradient_scale_ = ps::HalfPrecisionScale(gradients);
    for (float& gradient : gradients) gradient *= gradient_scale_;
    gradient_bytes_.resize(gradients.size() * ps::WireValueBytes(setup.format));
    ps::EncodeWireValues(setup.format, gradients, gradient_bytes_.data());
  }

  bool DeclareTable() {
    grpc::ClientContext context;
    ps::DeclareTableRequest request;
    ps::TableSpec* table = request.mutable_table();
    table->set_name(setup_.table);
    table->set_dim(setup_.dim);
    table->mutable_initializer()->set_kind(ps::InitializerSpec::UNIFORM);
    table->mutable_initializer()->set_scale(0.1f);
    table->mutable_optimizer()->set_learning_rate(kLearningRate);
    ps::DeclareTableResponse response;
    const grpc::Status status =
        stubs_[0]->DeclareTable(&context, request, &response);
    if (!status.ok())
      std::fprintf(stderr, "declare: %s\n", status.error_message().c_str());
    return status.ok();
  }

  bool Push(int client, const std::vector<uint64_t>& keys) {
    grpc::ClientContext context;
    ps::PushRequest request;
    request.set_table(setup_.table);
    request.set_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                                 keys.size() * 8));
    request.set_gradients(gradient_bytes_.substr(
        0, keys.size() * setup_.dim * ps::WireValueBytes(setup_.format)));
    request.set_format(setup_.format);
    if (gradient_scale_ != 1.0f) request.set_gradient_scale(gradient_scale_);
    ps::PushResponse response;
    return stubs_[client]->Push(&context, request, &response).ok();
  }

  ~PsServerClients() {
    for (std::unique_ptr<grpc::CompletionQueue>& queue : pull_queues_) {
      queue->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
      }
    }
  }

  // As a worker's client pulls (client/pull_reply.h): the reply read where
  // gRPC received it, its rows decoded into the client's (in runs: a
  // worker's land at their positions, these in order).
  bool Pull(int client, const std::vector<uint64_t>& keys) {
    grpc::ClientContext context;
    ps::PullRequest request;
    request.set_table(setup_.table);
    request.set_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                                 keys.size() * 8));
    request.set_format(setup_.format);
    // On the client's own completion queue, waited on here: no other
    // thread is woken per call (as a synchronous stub's call).
    grpc::ByteBuffer reply;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> call =
        raw_pulls_[client]->PrepareUnaryCall(&context, PullMethod(), request,
                                             pull_queues_[client].get());
    call->StartCall();
    call->Finish(&reply, &status, call.get());
    void* tag = nullptr;
    bool ok = false;
    if (!pull_queues_[client]->Next(&tag, &ok) || !ok) return false;
    if (!status.ok()) return false;
    absl::StatusOr<ps::client::PullReplyFields> fields =
        ps::client::ReadPullReply(reply);
    const size_t row_bytes = setup_.dim * ps::WireValueBytes(setup_.format);
    if (!fields.ok() || fields->values_bytes != keys.size() * row_bytes)
      return false;
    std::vector<float>& rows = pulled_rows_[client];
    rows.resize(keys.size() * setup_.dim);
    return ps::client::ForEachPulledRow(
               reply, fields->values_offset, keys.size(), row_bytes,
               [&](size_t first, size_t count, const char* bytes) {
                 ps::DecodeWireValues(setup_.format, bytes,
                                      absl::MakeSpan(&rows[first * setup_.dim],
                                                     count * setup_.dim));
               })
        .ok();
  }

  // The shard's hot-tier lookups so far; false when the server has no admin
  // service (the gRPC ceiling server).
  bool HotTierLookups(uint64_t* hits, uint64_t* misses) {
    grpc::ClientContext context;
    ps::ShardStatsRequest request;
    ps::ShardStatsResponse response;
    if (!admin_->ShardStats(&context, request, &response).ok()) return false;
    *hits = response.hot_tier_hits();
    *misses = response.hot_tier_misses();
    return true;
  }

 private:
  const BenchSetup setup_;
  using RawPullStub =
      grpc::TemplatedGenericStub<ps::PullRequest, grpc::ByteBuffer>;
  std::vector<std::unique_ptr<ps::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<RawPullStub>> raw_pulls_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> pull_queues_;
  std::unique_ptr<ps::Admin::Stub> admin_;
  float gradient_scale_ = 1.0f;
  std::string gradient_bytes_;
  // Each client's pulled rows, reused.
  std::vector<std::vector<float>> pulled_rows_;
};

// Measure() of a ps_server operation, printed with its hit rate.
template <typename Operation>
void MeasurePsServerOp(const BenchSetup& setup, PsServerClients& ps,
                       const char* op, int clients,
                       const Operation& operation) {
  uint64_t hits_before = 0, misses_before = 0, hits = 0, misses = 0;
  const bool stats = ps.HotTierLookups(&hits_before, &misses_before);
  const Result result = Measure(clients, operation);
  std::string hit_rate = "-";
  if (stats && ps.HotTierLookups(&hits, &misses) &&
      hits + misses > hits_before + misses_before) {
    hit_rate = absl::StrFormat(
        "%.1f%%", 100.0 * (hits - hits_before) /
                      (hits + misses - hits_before - misses_before));
  }
  PrintRow(setup, absl::GetFlag(FLAGS_system), op, clients, result, hit_rate);
}

// Declares the table, stores its rows (pushes of zero gradients store the
// initial values), waits --settle_s, and measures; the exit code.
int MeasurePsServer(const BenchSetup& setup) {
  PsServerClients ps(setup, absl::GetFlag(FLAGS_ps));
  if (!ps.DeclareTable()) return 1;
  for (int64_t start = 0; absl::GetFlag(FLAGS_store_rows) && start < setup.rows;
       start += setup.batch) {
    std::vector<uint64_t> keys;
    for (int64_t k = start; k < std::min(setup.rows, start + setup.batch); ++k)
      keys.push_back(k);
    if (!ps.Push(0, keys)) {
      std::fprintf(stderr, "preload failed\n");
      return 1;
    }
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_settle_s)));
  for (int clients : ClientCounts()) {
    if (Measures("pull")) {
      MeasurePsServerOp(setup, ps, "pull", clients,
                        [&](int c, const std::vector<uint64_t>& keys) {
                          return ps.Pull(c, keys);
                        });
    }
    if (Measures("push")) {
      MeasurePsServerOp(setup, ps, "push", clients,
                        [&](int c, const std::vector<uint64_t>& keys) {
                          return ps.Push(c, keys);
                        });
    }
  }
  return 0;
}

// Four clients of Redis holding the same rows as binary values; a push is a
// read-modify-write (MGET, SGD on the client, MSET).
class RedisClients {
 public:
  // Null (said on stderr) if a client cannot connect.
  static std::unique_ptr<RedisClients> Connect(const BenchSetup& setup,
                                               int port) {
    auto redis = std::unique_ptr<RedisClients>(new RedisClients(setup));
    for (int c = 0; c < 4; ++c) {
      redis->contexts_.push_back(redisConnect("127.0.0.1", port));
      if (redis->contexts_.back() == nullptr || redis->contexts_.back()->err) {
        std::fprintf(stderr, "cannot connect to Redis on port %d\n", port);
        return nullptr;
      }
    }
    return redis;
  }

  ~RedisClients() {
    for (redisContext* context : contexts_) {
      if (context != nullptr) redisFree(context);
    }
  }

  // Stores every row.
  bool Store() {
    const std::vector<float> row(setup_.dim, 0.05f);
    for (int64_t start = 0; start < setup_.rows; start += setup_.batch) {
      std::vector<std::string> parts = {"MSET"};
      for (int64_t k = start; k < std::min(setup_.rows, start + setup_.batch);
           ++k) {
        parts.push_back(KeyBytes(k, setup_.dim));
        parts.emplace_back(reinterpret_cast<const char*>(row.data()),
                           setup_.row_bytes);
      }
      redisReply* reply = Command(0, parts);
      if (reply == nullptr) return false;
      freeReplyObject(reply);
    }
    return true;
  }

  bool Pull(int client, const std::vector<uint64_t>& keys) {
    redisReply* reply = nullptr;
    const bool ok = MultiGet(client, keys, &reply);
    std::vector<float> out(keys.size() * setup_.dim);
    if (ok) {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (reply->element[i]->len == static_cast<size_t>(setup_.row_bytes)) {
          std::memcpy(&out[i * setup_.dim], reply->element[i]->str,
                      setup_.row_bytes);
        }
      }
    }
    if (reply != nullptr) freeReplyObject(reply);
    return ok;
  }

  bool Push(int client, const std::vector<uint64_t>& keys) {
    redisReply* reply = nullptr;
    if (!MultiGet(client, keys, &reply)) {
      if (reply != nullptr) freeReplyObject(reply);
      return false;
    }
    std::vector<std::string> parts = {"MSET"};
    std::vector<float> updated(setup_.dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (reply->element[i]->len == static_cast<size_t>(setup_.row_bytes)) {
        std::memcpy(updated.data(), reply->element[i]->str, setup_.row_bytes);
      }
      for (float& w : updated) w -= kLearningRate * kGradient;
      parts.push_back(KeyBytes(keys[i], setup_.dim));
      parts.emplace_back(reinterpret_cast<const char*>(updated.data()),
                         setup_.row_bytes);
    }
    freeReplyObject(reply);
    reply = Command(client, parts);
    const bool ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
    if (reply != nullptr) freeReplyObject(reply);
    return ok;
  }

 private:
  explicit RedisClients(const BenchSetup& setup) : setup_(setup) {}

  redisReply* Command(int client, const std::vector<std::string>& parts) {
    std::vector<const char*> argv_parts;
    std::vector<size_t> lengths;
    for (const auto& p : parts) {
      argv_parts.push_back(p.data());
      lengths.push_back(p.size());
    }
    return static_cast<redisReply*>(redisCommandArgv(
        contexts_[client], parts.size(), argv_parts.data(), lengths.data()));
  }

  bool MultiGet(int client, const std::vector<uint64_t>& keys,
                redisReply** reply) {
    std::vector<std::string> parts = {"MGET"};
    for (uint64_t key : keys) parts.push_back(KeyBytes(key, setup_.dim));
    *reply = Command(client, parts);
    return *reply != nullptr && (*reply)->type == REDIS_REPLY_ARRAY &&
           (*reply)->elements == keys.size();
  }

  const BenchSetup setup_;
  std::vector<redisContext*> contexts_;
};

// Stores the rows in Redis and measures; the exit code.
int MeasureRedis(const BenchSetup& setup, int port) {
  std::unique_ptr<RedisClients> redis = RedisClients::Connect(setup, port);
  if (redis == nullptr || !redis->Store()) return 1;
  for (int clients : ClientCounts()) {
    if (Measures("pull")) {
      PrintRow(setup, "Redis 7", "pull", clients,
               Measure(clients, [&](int c, const std::vector<uint64_t>& keys) {
                 return redis->Pull(c, keys);
               }));
    }
    if (Measures("push")) {
      PrintRow(setup, "Redis 7", "push", clients,
               Measure(clients, [&](int c, const std::vector<uint64_t>& keys) {
                 return redis->Push(c, keys);
               }));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ps::UseReleaseLocks();
  // As ps_worker does: the clients' reply buffers are reused, not faulted
  // in anew for every pull.
  ps::KeepFreedHeapForReuse();
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_loopback)) {
    std::printf("%.0f\n", LoopbackBytesPerSecond());
    return 0;
  }
  BenchSetup setup;
  if (!SetupFromFlags(&setup)) return 2;
  if (const int code = MeasurePsServer(setup); code != 0) return code;
  const int redis_port = absl::GetFlag(FLAGS_redis_port);
  return redis_port == 0 ? 0 : MeasureRedis(setup, redis_port);
}
