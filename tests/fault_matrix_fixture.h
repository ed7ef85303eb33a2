// What the fault matrix's tests share: a row of its table, shards under
// --durability=wal on ports kept across restarts, and the counting
// workload (a PsClient pushing +1 to the same keys round after round,
// exactly once, with its retries) whose rows are counted against the
// rounds acknowledged.

#ifndef PS_TESTS_FAULT_MATRIX_FIXTURE_H_
#define PS_TESTS_FAULT_MATRIX_FIXTURE_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/server_process.h"
#include "tests/test_client.h"
#include "tests/test_files.h"

namespace ps::testing {

struct TableRow {
  TableRow() = default;
  TableRow(std::string fault, std::string workers_saw)
      : fault(std::move(fault)), workers_saw(std::move(workers_saw)) {}
  std::string fault;
  std::string workers_saw;
  int64_t lost = 0;
  int64_t doubled = 0;
  // False for faults that stop the shard (nothing to count).
  bool counted = true;
  std::string outcome;
};

inline std::vector<TableRow>& Table() {
  static auto* table = new std::vector<TableRow>;
  return *table;
}

// Shards under --durability=wal on ports kept across restarts.
class Shards {
 public:
  // Data dirs under `root`, logs under `log_root` (default: `root`).
  Shards(const std::string& root, int count, std::vector<std::string> flags,
         const std::string& log_root = "")
      : root_(root),
        log_root_(log_root.empty() ? root : log_root),
        flags_(std::move(flags)),
        servers_(count) {
    for (int i = 0; i < count; ++i) Start(i);
  }

  void Start(int i, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {
        absl::StrCat("--data_dir=", root_, "/shard", i),
        absl::StrCat("--shard_index=", i),
        absl::StrCat("--num_shards=", servers_.size()), "--durability=wal"};
    flags.insert(flags.end(), flags_.begin(), flags_.end());
    flags.insert(flags.end(), extra.begin(), extra.end());
    if (static_cast<int>(ports_.size()) > i) {
      flags.push_back("--listen=127.0.0.1:" + ports_[i]);
    }
    auto server = ServerProcess::Start(flags, absl::Seconds(60), log(i));
    ASSERT_TRUE(server.ok()) << server.status() << ReadFile(log(i));
    servers_[i] = std::move(server).value();
    if (static_cast<int>(ports_.size()) <= i) {
      const std::string& address = servers_[i]->address();
      ports_.push_back(address.substr(address.rfind(':') + 1));
    }
  }

  void Kill(int i) {
    EXPECT_EQ(servers_[i]->SignalAndWait(SIGKILL), 128 + SIGKILL);
  }
  void Signal(int i, int signal) { kill(servers_[i]->pid(), signal); }
  ServerProcess& server(int i) { return *servers_[i]; }

  std::vector<std::string> addresses() const {
    std::vector<std::string> addresses;
    for (const std::string& port : ports_)
      addresses.push_back("127.0.0.1:" + port);
    return addresses;
  }
  std::string log(int i) const {
    return absl::StrCat(log_root_, "/shard", i, ".log");
  }
  std::string data_dir(int i) const { return absl::StrCat(root_, "/shard", i); }

 private:
  const std::string root_;
  const std::string log_root_;
  const std::vector<std::string> flags_;
  std::vector<std::string> ports_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

// Pushes +1 to every one of `keys` keys (spread over the shards), round
// after round, through a PsClient that retries as a worker's does.
class CountingWorkload {
 public:
  static constexpr int kDim = 8;

  CountingWorkload(const std::vector<std::string>& servers, int rounds,
                   int keys, absl::Duration call_timeout = absl::Seconds(30),
                   const std::string& table = "counts")
      : rounds_(rounds), table_(table), worker_(NextWorker()) {
    client::ClientOptions options;
    options.servers = servers;
    options.retry_for = absl::Seconds(90);
    options.initial_backoff = absl::Milliseconds(20);
    options.call_timeout = call_timeout;
    auto client = client::PsClient::Connect(options);
    EXPECT_TRUE(client.ok());
    client_ = std::move(client).value();
    for (int k = 0; k < keys; ++k) keys_.push_back(k * 7919 + 1);
    EXPECT_TRUE(client_
                    ->DeclareTable(SgdTableSpec(table_, kDim, 1.0f,
                                                InitializerSpec::ZEROS))
                    .ok());
  }

  ~CountingWorkload() {
    if (thread_.joinable()) thread_.join();
  }

  void Start(absl::Duration pause = absl::ZeroDuration()) {
    thread_ = std::thread([this, pause] {
      const std::vector<float> minus_one(keys_.size() * kDim, -1.0f);
      for (int round = 0; round < rounds_; ++round) {
        const client::PsClient::TableGradients push = {table_, keys_, minus_one,
                                                       kDim};
        absl::Status pushed = client_->Push({push}, worker_, round);
        if (!pushed.ok()) {
          absl::MutexLock lock(&mu_);
          error_ = pushed;
          return;
        }
        ++acknowledged_;
        if (pause > absl::ZeroDuration()) absl::SleepFor(pause);
      }
    });
  }

  int acknowledged() const { return acknowledged_.load(); }

  // Waits until `rounds` are acknowledged (or the workload stopped).
  bool WaitFor(int rounds, absl::Duration limit = absl::Seconds(60)) {
    WaitUntil([&] { return acknowledged() >= rounds || stopped(); }, limit,
              absl::Milliseconds(5));
    return acknowledged() >= rounds;
  }

  bool stopped() {
    absl::MutexLock lock(&mu_);
    return !error_.ok();
  }

  absl::Status Join() {
    thread_.join();
    absl::MutexLock lock(&mu_);
    return error_;
  }

  // What the client retried, e.g. "UNAVAILABLE x4, DEADLINE_EXCEEDED x1".
  std::string Saw() const {
    std::vector<std::string> parts;
    for (const auto& [code, count] : client_->retries())
      parts.push_back(absl::StrCat(code, " x", count));
    return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
  }

  // Counts every key's rows against the acknowledged rounds: an update
  // lost or applied twice shows in some column of some row. A round that
  // failed after it was sent may be in or not.
  void Count(TableRow* row) {
    std::vector<float> rows(keys_.size() * kDim);
    const client::PsClient::TableRows pull = {table_, keys_, kDim, rows.data()};
    absl::Status pulled = client_->Pull({pull});
    ASSERT_TRUE(pulled.ok()) << pulled;
    const int64_t acked = acknowledged();
    const int64_t in_doubt = stopped() ? 1 : 0;
    for (float value : rows) {
      const int64_t count = static_cast<int64_t>(value);
      if (count < acked) row->lost += acked - count;
      if (count > acked + in_doubt) row->doubled += count - acked - in_doubt;
    }
  }

 private:
  // Each workload is a worker of its own (exactly-once state is per worker).
  static uint32_t NextWorker() {
    static std::atomic<uint32_t> next{900};
    return next++;
  }

  const int rounds_;
  const std::string table_;
  const uint32_t worker_;
  std::unique_ptr<client::PsClient> client_;
  std::vector<uint64_t> keys_;
  std::atomic<int> acknowledged_{0};
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_FAULT_MATRIX_FIXTURE_H_
