// File: tests/counting_pusher.h
//
// Counting through a parameter server: a table whose every push of AddOne()
// adds exactly 1 to each float of its keys' rows, and CountingPusher, which
// pushes AddOne() to the same keys through a client over and over on a
// thread of its own and counts the pushes the client acknowledged. A test
// that reshapes the cluster meanwhile checks that each key holds every
// acknowledged push exactly once.

#ifndef PS_TESTS_COUNTING_PUSHER_H_
#define PS_TESTS_COUNTING_PUSHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/wait_until.h"
#include "client/ps_client.h"
#include "cluster/coordination_store.h"
#include "cluster/shard_directory.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/ps.pb.h"

namespace ps::testing {

// Rows of zeros, SGD at learning rate 1.
inline TableSpec CountingTableSpec(const std::string& name, uint32_t dim) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

// Pushes a gradient of -1 to every float of `keys`' rows in `table` (of
// CountingTableSpec(table, dim)) once, as `worker`: each adds 1.
inline absl::Status AddOne(client::PsClient& client, const std::string& table,
                           uint32_t dim, const std::vector<uint64_t>& keys,
                           uint32_t worker) {
  std::vector<float> gradients(keys.size() * dim, -1.0f);
  client::TrainingClient::TableGradients push;
  push.table = table;
  push.keys = keys;
  push.gradients = gradients;
  push.dim = dim;
  return client.Push({&push, 1}, worker, /*clock=*/1);
}

// The first float of every `step`th key of `keys` in `table` (of
// CountingTableSpec()) on the shard behind `channel`, 0 for a row never
// stored: how many pushes of AddOne() each holds.
inline std::vector<float> CountedValues(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& table,
    const std::vector<uint64_t>& keys, size_t step = 50) {
  auto admin = Admin::NewStub(channel);
  std::vector<float> values;
  for (size_t k = 0; k < keys.size(); k += step) {
    GetRowRequest request;
    request.set_table(table);
    request.set_key(keys[k]);
    GetRowResponse response;
    grpc::ClientContext context;
    const grpc::Status status = admin->GetRow(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    values.push_back(response.stored() ? response.values(0) : 0.0f);
  }
  return values;
}

// A worker's client of `job`, whose shards it finds in etcd and looks up
// again when one fails (a replica took its place) or joins, as ps_worker
// --etcd does, with CountingTableSpec(table, dim) declared; null (the
// failure reported) when it cannot. A call to a paused shard fails at 3 s,
// and a push is retried for up to 60 s.
inline std::unique_ptr<client::PsClient> ConnectThroughEtcd(
    cluster::CoordinationStore& etcd, const std::string& job,
    uint64_t incarnation, const std::string& table, uint32_t dim) {
  absl::StatusOr<std::vector<std::string>> found =
      cluster::FindShards(etcd, job, absl::Seconds(30));
  EXPECT_TRUE(found.ok()) << found.status();
  if (!found.ok()) return nullptr;
  client::ClientOptions options;
  options.servers = *found;
  options.find_shards = [&etcd, job] {
    return cluster::FindShards(etcd, job, absl::Seconds(2));
  };
  options.incarnation = incarnation;
  options.call_timeout = absl::Seconds(3);
  options.initial_backoff = absl::Milliseconds(20);
  options.retry_for = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<client::PsClient>> client =
      client::PsClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  const absl::Status declared =
      (*client)->DeclareTable(CountingTableSpec(table, dim));
  EXPECT_TRUE(declared.ok()) << declared;
  return *std::move(client);
}

class CountingPusher {
 public:
  // What a push that fails (after the client's retries) does.
  enum class OnFailure {
    // Stops the pusher; Stop() returns the failure.
    kStop,
    // Counts it (unknown(): applied on some shards, on all or on none) and
    // pushes again a little later.
    kCountAndGoOn,
  };

  // Calls push(*client, keys) until Stop() (or, by `on_failure`, its first
  // failure). `client` must outlive the pusher.
  CountingPusher(client::PsClient* client, std::vector<uint64_t> keys,
                 std::function<absl::Status(client::PsClient&,
                                            const std::vector<uint64_t>&)>
                     push,
                 OnFailure on_failure = OnFailure::kStop)
      : keys_(std::move(keys)), thread_([this, client, push, on_failure] {
          while (!stop_) {
            absl::Status pushed = push(*client, keys_);
            if (pushed.ok()) {
              ++acknowledged_;
            } else if (on_failure == OnFailure::kCountAndGoOn) {
              ++unknown_;
              absl::SleepFor(absl::Milliseconds(100));
            } else {
              absl::MutexLock lock(&mu_);
              status_ = pushed;
              return;
            }
          }
        }) {}

  ~CountingPusher() { Stop().IgnoreError(); }

  // Waits for `more` pushes beyond those acknowledged now, or a failure;
  // a test failure past `timeout`.
  void WaitForMore(int more, absl::Duration timeout = absl::Minutes(3)) {
    const int target = acknowledged_.load() + more;
    if (!WaitUntil(
            [&] { return acknowledged_.load() >= target || !status().ok(); },
            timeout)) {
      ADD_FAILURE() << "no " << more << " more pushes acknowledged in "
                    << absl::FormatDuration(timeout);
    }
  }

  // Stops pushing; the first failure, if any.
  absl::Status Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status();
  }

  int acknowledged() const { return acknowledged_.load(); }
  // Pushes that failed (OnFailure::kCountAndGoOn).
  int unknown() const { return unknown_.load(); }

 private:
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  const std::vector<uint64_t> keys_;
  std::atomic<int> acknowledged_{0};
  std::atomic<int> unknown_{0};
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  absl::Status status_;
  std::thread thread_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_COUNTING_PUSHER_H_
