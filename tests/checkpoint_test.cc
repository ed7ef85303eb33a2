// Checkpoints against real processes: ps_admin checkpoint takes one while
// the cluster runs, ps_server --restore_from loads it into any number of
// shards, and ps_worker --resume_from goes on from it.
//
//   - Restored into 3 shards and into 1, every row of a 2-shard checkpoint
//     comes back bit for bit, weights and optimizer state.
//   - Taken while workers train asynchronously, it holds each worker's
//     steps whole on every shard (counted with clients whose pushes add 1).
//   - 40 steps straight and 15 steps, checkpoint, every process killed,
//     restore, the rest give the same model bit for bit (one worker,
//     staleness 0); with two workers restored into three shards, test AUC
//     within 0.002.

#include "ops/checkpoint.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/server_process.h"
#include "tests/test_client.h"
#include "tests/test_files.h"
#include "worker/ps_client.h"

namespace ps::testing {
namespace {

// Shards started on fresh data dirs `dir`/<name><i>.
std::vector<std::unique_ptr<ServerProcess>> StartShards(
    const std::string& dir, const std::string& name, int count,
    const std::vector<std::string>& extra = {}) {
  std::vector<std::unique_ptr<ServerProcess>> shards;
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> flags = {
        absl::StrCat("--data_dir=", dir, "/", name, i),
        absl::StrCat("--shard_index=", i),
        absl::StrCat("--num_shards=", count)};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto shard = ServerProcess::Start(flags, absl::Seconds(120),
                                      absl::StrCat(dir, "/", name, i, ".log"));
    EXPECT_TRUE(shard.ok())
        << shard.status() << ReadFile(absl::StrCat(dir, "/", name, i, ".log"));
    if (!shard.ok()) return {};
    shards.push_back(std::move(shard).value());
  }
  return shards;
}

std::vector<std::string> Addresses(
    const std::vector<std::unique_ptr<ServerProcess>>& shards) {
  std::vector<std::string> addresses;
  for (const auto& shard : shards) addresses.push_back(shard->address());
  return addresses;
}

int Admin(const std::vector<std::string>& servers,
          const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {BinaryPath("ops/ps_admin"),
                                   "--servers=" + absl::StrJoin(servers, ",")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunToCompletion(argv, log);
}

// A row with its optimizer state, from the shard that owns `key`.
struct FullRow {
  bool stored = false;
  std::vector<float> floats;  // weights, then state

  bool operator==(const FullRow& other) const {
    return stored == other.stored && floats.size() == other.floats.size() &&
           std::memcmp(floats.data(), other.floats.data(),
                       floats.size() * sizeof(float)) == 0;
  }
};

FullRow GetFullRow(const std::vector<std::unique_ptr<ServerProcess>>& shards,
                   const std::string& table, uint64_t key) {
  const auto& owner =
      shards[ShardForKey(key, static_cast<uint32_t>(shards.size()))];
  auto admin = Admin::NewStub(owner->channel());
  grpc::ClientContext context;
  GetRowRequest request;
  request.set_table(table);
  request.set_key(key);
  request.set_optimizer_state(true);
  GetRowResponse response;
  const grpc::Status status = admin->GetRow(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  FullRow row;
  row.stored = response.stored();
  row.floats.assign(response.values().begin(), response.values().end());
  row.floats.insert(row.floats.end(), response.optimizer_state().begin(),
                    response.optimizer_state().end());
  return row;
}

TableSpec Spec(const std::string& name, uint32_t dim,
               OptimizerSpec::Kind optimizer) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_optimizer()->set_kind(optimizer);
  return spec;
}

// The entries of `dir` that hold a checkpoint's manifest, sorted; fails
// the test if anything else (an unfinished checkpoint) is there.
std::vector<std::string> FinishedCheckpoints(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(std::filesystem::exists(entry.path() / "MANIFEST.json"))
        << name << " is not a finished checkpoint";
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  // Writes `lines` click-log lines to dir_/NAME (sample seed `seed`) and
  // returns the path.
  std::string Generate(const std::string& name, int lines, int seed = 1,
                       const std::vector<std::string>& flags = {}) {
    const std::string path = dir_ + "/" + name;
    std::vector<std::string> argv = {
        BinaryPath("worker/clicklog_gen"), "--out=" + path,
        absl::StrCat("--lines=", lines), absl::StrCat("--sample_seed=", seed)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    EXPECT_EQ(RunToCompletion(argv, dir_ + "/gen.log"), 0)
        << ReadFile(dir_ + "/gen.log");
    return path;
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RestoredIntoThreeShardsAndIntoOneEveryRowIsTheSame) {
  auto shards = StartShards(dir_, "old", 2);
  ASSERT_EQ(shards.size(), 2u);
  const std::vector<TableSpec> tables = {
      Spec("adagrad", 8, OptimizerSpec::ADAGRAD),
      Spec("adam", 4, OptimizerSpec::ADAM),
      Spec("ftrl", 1, OptimizerSpec::FTRL), Spec("sgd", 3, OptimizerSpec::SGD)};
  worker::ClientOptions options;
  options.servers = Addresses(shards);
  auto client = worker::PsClient::Connect(options);
  ASSERT_TRUE(client.ok());
  for (const TableSpec& spec : tables)
    ASSERT_TRUE((*client)->DeclareTable(spec).ok());
  // 20 rounds of pushes to 600 keys (and never to 600 others).
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys;
  for (int k = 0; k < 1200; ++k) keys.push_back(rng());
  const std::vector<uint64_t> pushed(keys.begin(), keys.begin() + 600);
  std::normal_distribution<float> gradient(0.0f, 0.5f);
  for (int round = 0; round < 20; ++round) {
    for (const TableSpec& spec : tables) {
      std::vector<float> gradients(pushed.size() * spec.dim());
      for (float& g : gradients) g = gradient(rng);
      const worker::PsClient::TableGradients push = {
          spec.name(), pushed, gradients, static_cast<int>(spec.dim())};
      ASSERT_TRUE((*client)->Push({push}, 7, round).ok());
    }
  }
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(Addresses(shards), {"--dir=" + checkpoint, "checkpoint"},
                  dir_ + "/checkpoint.log"),
            0)
      << ReadFile(dir_ + "/checkpoint.log");
  auto manifest = ReadManifest(checkpoint);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->num_shards(), 2u);
  EXPECT_EQ(manifest->tables_size(), 4);

  std::vector<std::vector<FullRow>> expected(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    for (uint64_t key : keys)
      expected[t].push_back(GetFullRow(shards, tables[t].name(), key));
  }
  for (const int count : {3, 1}) {
    auto restored = StartShards(dir_, absl::StrCat("new", count, "_"), count,
                                {"--restore_from=" + checkpoint});
    ASSERT_EQ(restored.size(), static_cast<size_t>(count));
    int stored = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      for (size_t k = 0; k < keys.size(); ++k) {
        const FullRow row = GetFullRow(restored, tables[t].name(), keys[k]);
        ASSERT_TRUE(row == expected[t][k])
            << count << " shards, table " << tables[t].name() << ", key "
            << keys[k];
        stored += row.stored ? 1 : 0;
      }
    }
    EXPECT_EQ(stored, 4 * 600) << count << " shards";
  }
  // A restored shard restarted with the same flags opens what it restored.
  {
    auto again =
        StartShards(dir_, "new1_", 1, {"--restore_from=" + checkpoint});
    ASSERT_EQ(again.size(), 1u);
    EXPECT_TRUE(GetFullRow(again, "adam", keys[3]) == expected[1][3]);
  }
  // Refused: a directory that is no (finished) checkpoint, and a data dir
  // that holds another shard.
  std::filesystem::create_directories(dir_ + "/not_a_checkpoint");
  const std::string log = dir_ + "/refused.log";
  EXPECT_NE(
      RunToCompletion({BinaryPath("server/ps_server"), "--listen=127.0.0.1:0",
                       "--data_dir=" + dir_ + "/x",
                       "--restore_from=" + dir_ + "/not_a_checkpoint"},
                      log),
      0);
  EXPECT_NE(ReadFile(log).find("MANIFEST.json"), std::string::npos)
      << ReadFile(log);
  shards.clear();  // stopped: old0 is a shard's data dir no one holds
  EXPECT_NE(
      RunToCompletion(
          {BinaryPath("server/ps_server"), "--listen=127.0.0.1:0",
           "--data_dir=" + dir_ + "/old0", "--restore_from=" + checkpoint},
          log),
      0);
  EXPECT_NE(ReadFile(log).find("holds a shard already"), std::string::npos)
      << ReadFile(log);
  // A restore that was interrupted is neither served nor left half done.
  std::filesystem::create_directories(dir_ + "/cut_short0");
  std::ofstream(dir_ + "/cut_short0/RESTORING") << "some checkpoint\n";
  std::ofstream(dir_ + "/cut_short0/junk") << "half a restore\n";
  EXPECT_NE(
      RunToCompletion({BinaryPath("server/ps_server"), "--listen=127.0.0.1:0",
                       "--data_dir=" + dir_ + "/cut_short0"},
                      log),
      0);
  EXPECT_NE(ReadFile(log).find("was interrupted"), std::string::npos)
      << ReadFile(log);
  {
    auto redone =
        StartShards(dir_, "cut_short", 1, {"--restore_from=" + checkpoint});
    ASSERT_EQ(redone.size(), 1u);
    EXPECT_TRUE(GetFullRow(redone, "adam", keys[3]) == expected[1][3]);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cut_short0/RESTORING"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cut_short0/junk"));
  // Rows placed by another key routing are refused.
  const std::string other_routing = dir_ + "/other_routing";
  std::filesystem::create_directories(other_routing);
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint)) {
    std::filesystem::copy(entry.path(), other_routing / entry.path().filename(),
                          std::filesystem::copy_options::recursive);
  }
  std::string json = ReadFile(checkpoint + "/MANIFEST.json");
  const std::string routing = "\"routing_version\": 1";
  ASSERT_NE(json.find(routing), std::string::npos) << json;
  json.replace(json.find(routing), routing.size(), "\"routing_version\": 2");
  std::ofstream(other_routing + "/MANIFEST.json", std::ios::trunc) << json;
  EXPECT_NE(
      RunToCompletion(
          {BinaryPath("server/ps_server"), "--listen=127.0.0.1:0",
           "--data_dir=" + dir_ + "/y", "--restore_from=" + other_routing},
          log),
      0);
  EXPECT_NE(ReadFile(log).find("routing version 2"), std::string::npos)
      << ReadFile(log);
}

// A client that pushes +1 to keys of its own table each step, as a worker
// does: reporting its clock after each push and holding before a step at a
// checkpoint's cut.
class CountingWorker {
 public:
  CountingWorker(const std::vector<std::string>& servers, uint32_t id,
                 absl::Duration lease = absl::Seconds(5))
      : id_(id), table_(absl::StrCat("steps_", id)), lease_(lease) {
    worker::ClientOptions options;
    options.servers = servers;
    // Long enough for a shard's restart; short enough that a test that
    // failed with a shard down ends.
    options.retry_for = absl::Seconds(60);
    client_ = worker::PsClient::Connect(options).value();
    TableSpec spec = SgdTableSpec(table_, 1, 1.0f, InitializerSpec::ZEROS);
    EXPECT_TRUE(client_->DeclareTable(spec).ok());
    for (uint64_t k = 0; k < 200; ++k) keys_.push_back(k * 104729 + id);
  }

  void Start() {
    thread_ = std::thread([this] {
      const std::vector<float> minus_one(keys_.size(), -1.0f);
      int64_t clock = 0;
      while (!stop_) {
        while (hold_at_ != 0 && clock >= hold_at_ && !stop_) {
          Report(clock, false);
          absl::SleepFor(absl::Milliseconds(5));
        }
        if (stop_) break;
        const worker::PsClient::TableGradients push = {table_, keys_, minus_one,
                                                       1};
        if (!client_->Push({push}, id_, clock).ok()) return;
        ++clock;
        Report(clock, false);
        absl::SleepFor(absl::Milliseconds(2));
      }
      Report(clock, true);
    });
  }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  ~CountingWorker() { Stop(); }

  // While muted, it goes on pushing but reports no clock.
  void Mute(bool muted) { muted_ = muted; }

  uint32_t id() const { return id_; }
  const std::string& table() const { return table_; }
  const std::vector<uint64_t>& keys() const { return keys_; }

 private:
  void Report(int64_t clock, bool finished) {
    if (muted_ && !finished) return;
    ClockRequest request;
    request.set_worker(id_);
    request.set_incarnation(client_->incarnation());
    request.set_clock(clock);
    request.set_finished(finished);
    request.set_lease_ms(absl::ToInt64Milliseconds(lease_));
    auto response = client_->Clock(request);
    if (response.ok()) hold_at_ = response->hold_at();
  }

  const uint32_t id_;
  const std::string table_;
  const absl::Duration lease_;
  std::unique_ptr<worker::PsClient> client_;
  std::vector<uint64_t> keys_;
  std::atomic<int64_t> hold_at_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> muted_{false};
  std::thread thread_;
};

// Checks the checkpoint in `checkpoint` (of a 2-shard cluster, from
// `workers` workers, `counters` among them): every unfinished worker held
// at the cut, and each counting worker's step is on both shards or on
// neither (each of its keys, spread over the shards, counts exactly its
// clock), restored into one shard.
void ExpectEveryStepWhole(
    const std::string& checkpoint,
    const std::vector<std::unique_ptr<CountingWorker>>& counters,
    size_t workers) {
  auto manifest = ReadManifest(checkpoint);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::printf(
      "checkpoint at clock %lld: workers held %.3f s for the cut, "
      "shards wrote their parts in %.3f s\n",
      static_cast<long long>(manifest->cut()), manifest->hold_seconds(),
      manifest->snapshot_seconds());
  std::map<uint32_t, int64_t> clocks;
  for (const auto& worker : manifest->workers()) {
    clocks[worker.worker()] = worker.clock();
    if (!worker.finished()) {
      EXPECT_EQ(worker.clock(), manifest->cut())
          << "worker " << worker.worker();
    }
  }
  ASSERT_EQ(clocks.size(), workers);
  const std::string restored_dir = checkpoint + ".restored";
  auto restored =
      ServerProcess::Start({"--data_dir=" + restored_dir, "--shard_index=0",
                            "--num_shards=1", "--restore_from=" + checkpoint},
                           absl::Seconds(120), restored_dir + ".log");
  ASSERT_TRUE(restored.ok())
      << restored.status() << ReadFile(restored_dir + ".log");
  auto stub = ParameterServer::NewStub((*restored)->channel());
  for (const auto& counter : counters) {
    std::vector<float> counts;
    ASSERT_TRUE(
        PullRows(*stub, counter->table(), counter->keys(), &counts).ok());
    EXPECT_GT(clocks[counter->id()], 5);
    for (size_t k = 0; k < counts.size(); ++k) {
      ASSERT_EQ(counts[k], static_cast<float>(clocks[counter->id()]))
          << "worker " << counter->id() << " key " << counter->keys()[k]
          << " (shard " << ShardForKey(counter->keys()[k], 2) << ")";
    }
  }
}

TEST_F(CheckpointTest, TakenWhileWorkersTrainAsynchronouslyEveryStepIsWhole) {
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_EQ(shards.size(), 2u);
  const std::string data = Generate("train.tsv", 40000);
  // Two real workers training asynchronously, and two counting ones.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    auto process = ChildProcess::Start(
        {BinaryPath("worker/ps_worker"),
         "--servers=" + absl::StrJoin(Addresses(shards), ","),
         absl::StrCat("--worker_index=", w), "--num_workers=2",
         "--train=" + data, "--staleness=async", "--batch_size=512",
         "--hidden=16", "--embedding_dim=4", "--slow_step_ms=30",
         absl::StrCat("--metrics_out=", dir_, "/w", w, ".json")},
        false, absl::StrCat(dir_, "/w", w, ".log"));
    ASSERT_TRUE(process.ok());
    workers.push_back(std::move(process).value());
  }
  std::vector<std::unique_ptr<CountingWorker>> counters;
  for (uint32_t id : {10u, 11u}) {
    counters.push_back(std::make_unique<CountingWorker>(Addresses(shards), id));
    counters.back()->Start();
  }
  absl::SleepFor(absl::Milliseconds(1500));
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(Addresses(shards), {"--dir=" + checkpoint, "checkpoint"},
                  dir_ + "/checkpoint.log"),
            0)
      << ReadFile(dir_ + "/checkpoint.log");
  absl::SleepFor(absl::Milliseconds(300));  // they go on after the cut
  for (auto& counter : counters) counter->Stop();
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(workers[w]->Wait(absl::Minutes(3)), 0)
        << ReadFile(absl::StrCat(dir_, "/w", w, ".log"));
  }
  ExpectEveryStepWhole(checkpoint, counters, 4);
  // The real workers held at the cut and went on.
  for (int w = 0; w < 2; ++w) {
    const std::string metrics = ReadFile(absl::StrCat(dir_, "/w", w, ".json"));
    EXPECT_GT(Metric(metrics, "examples"), 0) << metrics;
  }
}

TEST_F(CheckpointTest, AWorkerHoldsAtTheCutUntilItEnds) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_EQ(shards.size(), 1u);
  const std::string data = Generate("train.tsv", 20000);
  auto worker = ChildProcess::Start(
      {BinaryPath("worker/ps_worker"), "--servers=" + shards[0]->address(),
       "--train=" + data, "--batch_size=500", "--hidden=16",
       "--embedding_dim=4", "--slow_step_ms=50",
       "--metrics_out=" + dir_ + "/w.json"},
      false, dir_ + "/w.log");
  ASSERT_TRUE(worker.ok());
  auto admin = Admin::NewStub(shards[0]->channel());
  auto clock = [&] {
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks);
    return clocks.workers_size() == 1 ? clocks.workers(0).clock() : -1;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (clock() < 3 && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(10));
  BeginCutResponse cut;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(admin->BeginCut(&context, BeginCutRequest(), &cut).ok());
  }
  bool ready = false;
  while (!ready && absl::Now() < give_up) {
    grpc::ClientContext context;
    CutStatusResponse status;
    ASSERT_TRUE(admin->CutStatus(&context, CutStatusRequest(), &status).ok());
    ready = status.ready();
  }
  ASSERT_TRUE(ready);
  absl::SleepFor(absl::Seconds(1));  // 20 steps' time
  EXPECT_EQ(clock(), cut.cut()) << "the worker went past the cut";
  {
    grpc::ClientContext context;
    EndCutRequest request;
    request.set_id(cut.id());
    EndCutResponse ended;
    ASSERT_TRUE(admin->EndCut(&context, request, &ended).ok());
    EXPECT_TRUE(ended.ended());
  }
  EXPECT_EQ((*worker)->Wait(absl::Minutes(2)), 0) << ReadFile(dir_ + "/w.log");
  const std::string metrics = ReadFile(dir_ + "/w.json");
  EXPECT_EQ(Metric(metrics, "examples"), 20000) << metrics;
  EXPECT_GT(Metric(metrics, "cut_hold_seconds"), 0.9) << metrics;
}

// The coordinator saves its state at most every 100 ms, so the one that
// starts again after kill -9 reads clocks behind the pushes its workers
// made meanwhile: a cut placed from them would be below steps already on
// the other shard. It waits for every worker to report again first.
TEST_F(CheckpointTest,
       TakenRightAfterTheCoordinatorShardIsKilledEveryStepIsWhole) {
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_EQ(shards.size(), 2u);
  const std::vector<std::string> servers = Addresses(shards);
  // Outlives the counting workers, which retry against it.
  std::unique_ptr<ServerProcess> restarted;
  std::vector<std::unique_ptr<CountingWorker>> counters;
  for (uint32_t id : {10u, 11u}) {
    counters.push_back(std::make_unique<CountingWorker>(servers, id));
    counters.back()->Start();
  }
  absl::SleepFor(absl::Milliseconds(1500));
  // They push on without reporting until the coordinator has been asked
  // for a cut: its saved clocks are then surely behind.
  for (auto& counter : counters) counter->Mute(true);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(shards[0]->SignalAndWait(SIGKILL), 128 + SIGKILL);
  const std::string port = servers[0].substr(servers[0].rfind(':') + 1);
  auto started =
      ServerProcess::Start({"--data_dir=" + dir_ + "/shard0", "--shard_index=0",
                            "--num_shards=2", "--listen=127.0.0.1:" + port},
                           absl::Seconds(120), dir_ + "/shard0.restarted.log");
  ASSERT_TRUE(started.ok())
      << started.status() << ReadFile(dir_ + "/shard0.restarted.log");
  restarted = std::move(started).value();
  {
    auto admin = Admin::NewStub(restarted->channel());
    grpc::ClientContext context;
    BeginCutResponse cut;
    const grpc::Status refused =
        admin->BeginCut(&context, BeginCutRequest(), &cut);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(refused.error_message().find("has not reported since"),
              std::string::npos)
        << refused.error_message();
  }
  for (auto& counter : counters) counter->Mute(false);
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(servers,
                  {"--dir=" + checkpoint, "--hold_timeout_s=60", "checkpoint"},
                  dir_ + "/checkpoint.log"),
            0)
      << ReadFile(dir_ + "/checkpoint.log");
  absl::SleepFor(absl::Milliseconds(300));  // they go on after the cut
  for (auto& counter : counters) counter->Stop();
  ExpectEveryStepWhole(checkpoint, counters, 2);
}

// Leases lapse only while the coordinator runs: one stopped (SIGSTOP, a VM
// pause) for longer than a lease does not, on its first call back, count a
// worker behind the cut out and declare the cut ready.
TEST_F(CheckpointTest, ACutHeldWhileTheCoordinatorIsStoppedWaitsForItsWorkers) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_EQ(shards.size(), 1u);
  const absl::Duration lease = absl::Seconds(3);
  CountingWorker ahead(Addresses(shards), 10, lease);
  ahead.Start();
  // A worker at clock 1 that reports only when the test says.
  worker::ClientOptions options;
  options.servers = Addresses(shards);
  auto behind = worker::PsClient::Connect(options);
  ASSERT_TRUE(behind.ok()) << behind.status();
  auto report_behind = [&](int64_t clock) {
    ClockRequest request;
    request.set_worker(11);
    request.set_incarnation((*behind)->incarnation());
    request.set_clock(clock);
    request.set_lease_ms(absl::ToInt64Milliseconds(lease));
    return (*behind)->Clock(request).ok();
  };
  ASSERT_TRUE(report_behind(1));
  auto admin = Admin::NewStub(shards[0]->channel());
  auto cut_status = [&] {
    grpc::ClientContext context;
    CutStatusResponse status;
    EXPECT_TRUE(admin->CutStatus(&context, CutStatusRequest(), &status).ok());
    return status;
  };
  auto clock_of = [&](const CutStatusResponse& status, uint32_t worker) {
    for (const auto& clock : status.workers())
      if (clock.worker() == worker) return clock.clock();
    return int64_t{-1};
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  BeginCutResponse cut;
  while (absl::Now() < give_up) {
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    ASSERT_TRUE(
        admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks).ok());
    bool ahead_moved = false;
    for (const auto& clock : clocks.workers())
      ahead_moved = ahead_moved || (clock.worker() == 10 && clock.clock() > 3);
    if (ahead_moved) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  {
    grpc::ClientContext context;
    BeginCutRequest request;
    request.set_lease_ms(60000);
    ASSERT_TRUE(admin->BeginCut(&context, request, &cut).ok());
  }
  ASSERT_GT(cut.cut(), 3);
  // The worker ahead reaches the cut and holds; the one behind does not.
  while (clock_of(cut_status(), 10) < cut.cut() && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(report_behind(1));
  CutStatusResponse before = cut_status();
  EXPECT_FALSE(before.ready());
  EXPECT_EQ(clock_of(before, 10), cut.cut());

  ASSERT_EQ(kill(shards[0]->pid(), SIGSTOP), 0);
  absl::SleepFor(lease + absl::Seconds(2));
  ASSERT_EQ(kill(shards[0]->pid(), SIGCONT), 0);
  // Within a lease of the pause's end (the worker behind has had no
  // coordinator to report to), it still counts.
  const CutStatusResponse after = cut_status();
  EXPECT_FALSE(after.ready()) << "a live worker at clock 1 was counted out";
  for (const auto& clock : after.workers()) {
    EXPECT_TRUE(clock.live()) << "worker " << clock.worker();
  }
  ASSERT_TRUE(report_behind(cut.cut()));
  EXPECT_TRUE(cut_status().ready());
  {
    grpc::ClientContext context;
    EndCutRequest request;
    request.set_id(cut.id());
    EndCutResponse ended;
    ASSERT_TRUE(admin->EndCut(&context, request, &ended).ok());
    EXPECT_TRUE(ended.ended());
  }
  ahead.Stop();
}

// Trains on `data` with `workers` workers against `shards`; returns each
// worker's metrics.
std::vector<std::string> Train(
    const std::vector<std::unique_ptr<ServerProcess>>& shards, int workers,
    const std::string& data, const std::string& test, const std::string& tag,
    const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::unique_ptr<ChildProcess>> processes;
  for (int w = 0; w < workers; ++w) {
    std::vector<std::string> argv = {
        BinaryPath("worker/ps_worker"),
        "--servers=" + absl::StrJoin(Addresses(shards), ","),
        absl::StrCat("--worker_index=", w),
        absl::StrCat("--num_workers=", workers),
        "--train=" + data,
        "--test=" + test,
        "--staleness=0",
        "--batch_size=1000",
        "--hidden=32,16",
        "--embedding_dim=4",
        absl::StrCat("--metrics_out=", dir, "/", tag, w, ".json")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto process = ChildProcess::Start(argv, false,
                                       absl::StrCat(dir, "/", tag, w, ".log"));
    EXPECT_TRUE(process.ok());
    processes.push_back(std::move(process).value());
  }
  std::vector<std::string> metrics;
  for (int w = 0; w < workers; ++w) {
    EXPECT_EQ(processes[w]->Wait(absl::Minutes(5)), 0)
        << ReadFile(absl::StrCat(dir, "/", tag, w, ".log"));
    metrics.push_back(ReadFile(absl::StrCat(dir, "/", tag, w, ".json")));
  }
  return metrics;
}

TEST_F(CheckpointTest, ResumingGivesTheModelTrainingStraightThroughGives) {
  const std::string data = Generate("train.tsv", 20000);
  const std::string test = Generate("test.tsv", 10000, /*seed=*/2);
  // One worker, two epochs of 20 steps straight.
  double straight_auc = 0, straight_logloss = 0;
  {
    auto shards = StartShards(dir_, "straight", 1);
    const auto metrics =
        Train(shards, 1, data, test, "straight", dir_, {"--epochs=2"});
    straight_auc = Metric(metrics[0], "test_auc");
    straight_logloss = Metric(metrics[0], "test_logloss");
  }
  // The same with a checkpoint every 15 steps; then every process is gone
  // and training resumes, in the second epoch, from the second checkpoint
  // on a restored shard.
  const std::string checkpoints = dir_ + "/checkpoints";
  {
    auto shards = StartShards(dir_, "first", 1);
    const auto metrics =
        Train(shards, 1, data, test, "first", dir_,
              {"--epochs=2", "--checkpoint_every_steps=15",
               "--checkpoint_dir=" + checkpoints, "--checkpoints_to_keep=0"});
    EXPECT_EQ(Metric(metrics[0], "checkpoints"), 2) << metrics[0];
    // Holding at the cuts changes nothing.
    EXPECT_DOUBLE_EQ(Metric(metrics[0], "test_auc"), straight_auc);
    EXPECT_EQ(shards[0]->SignalAndWait(SIGKILL), 128 + SIGKILL);
  }
  // Named after their cuts, which are past the clocks they were asked at.
  const std::vector<std::string> taken = FinishedCheckpoints(checkpoints);
  ASSERT_EQ(taken.size(), 2u);
  const std::string second = checkpoints + "/" + taken[1];
  auto manifest = ReadManifest(second);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->cut(), 20) << "not in the second epoch";
  EXPECT_EQ(taken[1], absl::StrFormat("ckpt-%010d", manifest->cut()));
  // ps_admin checkpoints lists both (its table goes to stdout).
  ASSERT_EQ(
      RunToCompletion({"/bin/sh", "-c",
                       BinaryPath("ops/ps_admin") + " --dir=" + checkpoints +
                           " checkpoints > " + dir_ + "/list.txt"},
                      dir_ + "/list.log"),
      0);
  const std::string list = ReadFile(dir_ + "/list.txt");
  EXPECT_NE(list.find(taken[0]), std::string::npos) << list;
  EXPECT_NE(list.find(taken[1]), std::string::npos) << list;
  double resumed_auc = 0, resumed_logloss = 0;
  {
    auto shards = StartShards(dir_, "resumed", 1, {"--restore_from=" + second});
    const auto metrics = Train(shards, 1, data, test, "resumed", dir_,
                               {"--epochs=2", "--resume_from=" + second});
    resumed_auc = Metric(metrics[0], "test_auc");
    resumed_logloss = Metric(metrics[0], "test_logloss");
    EXPECT_EQ(Metric(metrics[0], "first_step"), manifest->cut());
    EXPECT_EQ(Metric(metrics[0], "examples"),
              40000 - manifest->workers(0).examples());
  }
  std::printf(
      "straight: AUC %.6f logloss %.6f; resumed from clock %lld: AUC "
      "%.6f logloss %.6f\n",
      straight_auc, straight_logloss, static_cast<long long>(manifest->cut()),
      resumed_auc, resumed_logloss);
  EXPECT_DOUBLE_EQ(resumed_auc, straight_auc);
  EXPECT_DOUBLE_EQ(resumed_logloss, straight_logloss);
}

TEST_F(CheckpointTest, TwoWorkersResumedOnThreeRestoredShards) {
  const std::string data = Generate("train.tsv", 40000);
  const std::string test = Generate("test.tsv", 10000, /*seed=*/2);
  double straight_auc = 0;
  {
    auto shards = StartShards(dir_, "straight", 2);
    straight_auc = Metric(Train(shards, 2, data, test, "straight", dir_, {})[0],
                          "test_auc");
  }
  const std::string checkpoints = dir_ + "/checkpoints";
  {
    auto shards = StartShards(dir_, "first", 2);
    Train(shards, 2, data, test, "first", dir_,
          {"--checkpoint_every_steps=8", "--checkpoint_dir=" + checkpoints,
           "--checkpoints_to_keep=1"});
  }
  // Each worker has 20 steps of 1000 lines: checkpoints were asked for at
  // 8 and 16, and only the newest is kept.
  const std::vector<std::string> kept = FinishedCheckpoints(checkpoints);
  ASSERT_EQ(kept.size(), 1u) << "--checkpoints_to_keep=1";
  const std::string last = checkpoints + "/" + kept[0];
  auto manifest = ReadManifest(last);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->cut(), 16);
  auto shards = StartShards(dir_, "resumed", 3, {"--restore_from=" + last});
  const std::vector<std::string> resumed =
      Train(shards, 2, data, test, "resumed", dir_, {"--resume_from=" + last});
  // Each worker goes on from its own position at the cut: together they
  // train on the lines the checkpoint's workers had not reached.
  ASSERT_EQ(manifest->workers_size(), 2);
  int64_t trained_before_the_cut = 0;
  for (const auto& worker : manifest->workers()) {
    trained_before_the_cut += worker.examples();
  }
  EXPECT_EQ(Metric(resumed[0], "examples") + Metric(resumed[1], "examples"),
            40000 - trained_before_the_cut);
  for (const std::string& metrics : resumed) {
    EXPECT_EQ(Metric(metrics, "first_step"), manifest->cut());
  }
  const double resumed_auc = Metric(resumed[0], "test_auc");
  std::printf("two workers: straight AUC %.4f, resumed on 3 shards %.4f\n",
              straight_auc, resumed_auc);
  // Two workers' pushes reach the shards in either order, and Adagrad, FTRL
  // and Adam are not indifferent to it: runs of this test spread over 0.006
  // AUC (0.7251-0.7311). Without the restored rows the resumed model
  // learns from the last steps only and ends near 0.58.
  EXPECT_NEAR(resumed_auc, straight_auc, 0.02);
}

// The number after `label` in `text` ("AUC 0.7123"); NaN if absent.
double After(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + label.size(), nullptr);
}

TEST_F(CheckpointTest, AnExportScoresLikeTheWorkerThatTrainedIt) {
  const std::string data = Generate("train.tsv", 30000);
  const std::string test = Generate("test.tsv", 8000, /*seed=*/2);
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_EQ(shards.size(), 2u);
  const std::string metrics =
      Train(shards, 1, data, test, "trained", dir_, {"--model=deepfm"})[0];
  const double worker_auc = Metric(metrics, "test_auc");
  const double worker_logloss = Metric(metrics, "test_logloss");
  for (const std::string format : {"fp32", "fp16"}) {
    const std::string exported = dir_ + "/export_" + format;
    ASSERT_EQ(Admin(Addresses(shards),
                    {"--dir=" + exported, "--format=" + format, "export"},
                    dir_ + "/export.log"),
              0)
        << ReadFile(dir_ + "/export.log");
    auto manifest = ReadExportManifest(exported);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    EXPECT_EQ(manifest->model().kind(), ModelCard::DEEPFM);
    EXPECT_GT(manifest->tables(0).rows(), 1000u);
    const std::string scores = dir_ + "/scores_" + format + ".txt";
    const std::string out = dir_ + "/predict_" + format + ".txt";
    ASSERT_EQ(RunToCompletion(
                  {"/bin/sh", "-c",
                   BinaryPath("worker/ps_predict") + " --model=" + exported +
                       " --input=" + test + " --out=" + scores + " > " + out},
                  dir_ + "/predict.log"),
              0)
        << ReadFile(dir_ + "/predict.log");
    const std::string printed = ReadFile(out);
    std::printf("%s: worker AUC %.6f logloss %.6f; ps_predict %s",
                format.c_str(), worker_auc, worker_logloss, printed.c_str());
    int lines = 0;
    for (char c : ReadFile(scores)) lines += c == '\n' ? 1 : 0;
    EXPECT_EQ(lines, 8000);
    if (format == "fp32") {
      EXPECT_NEAR(After(printed, "AUC "), worker_auc, 1e-4);
      EXPECT_NEAR(After(printed, "logloss "), worker_logloss, 1e-4);
    } else {
      EXPECT_NEAR(After(printed, "AUC "), worker_auc, 0.002);
    }
  }
  // Lines without labels are scored the same, one per line, in order.
  const std::string unlabeled = dir_ + "/unlabeled.tsv";
  {
    std::ifstream in(test);
    std::ofstream out(unlabeled);
    for (std::string line; std::getline(in, line);) {
      out << line.substr(line.find('\t') + 1) << "\n";
    }
  }
  const std::string out = dir_ + "/predict_unlabeled.txt";
  ASSERT_EQ(
      RunToCompletion({"/bin/sh", "-c",
                       BinaryPath("worker/ps_predict") + " --model=" + dir_ +
                           "/export_fp32 --input=" + unlabeled +
                           " --out=" + dir_ + "/scores_unlabeled.txt > " + out},
                      dir_ + "/predict.log"),
      0)
      << ReadFile(dir_ + "/predict.log");
  EXPECT_NE(ReadFile(out).find("no labels"), std::string::npos)
      << ReadFile(out);
  EXPECT_EQ(ReadFile(dir_ + "/scores_unlabeled.txt"),
            ReadFile(dir_ + "/scores_fp32.txt"));
  // An export goes into a new (or empty) directory only, and a checkpoint
  // names every shard in order: both refused before any worker is held.
  EXPECT_NE(
      Admin(Addresses(shards), {"--dir=" + dir_ + "/export_fp32", "export"},
            dir_ + "/again.log"),
      0);
  EXPECT_NE(ReadFile(dir_ + "/again.log").find("already"), std::string::npos)
      << ReadFile(dir_ + "/again.log");
  std::filesystem::create_directories(dir_ + "/busy");
  std::ofstream(dir_ + "/busy/keep.txt") << "not ours\n";
  EXPECT_NE(Admin(Addresses(shards), {"--dir=" + dir_ + "/busy", "export"},
                  dir_ + "/busy.log"),
            0);
  EXPECT_NE(ReadFile(dir_ + "/busy.log").find("not empty"), std::string::npos)
      << ReadFile(dir_ + "/busy.log");
  EXPECT_EQ(ReadFile(dir_ + "/busy/keep.txt"), "not ours\n");
  EXPECT_NE(Admin({shards[1]->address(), shards[0]->address()},
                  {"--dir=" + dir_ + "/reversed", "checkpoint"},
                  dir_ + "/reversed.log"),
            0);
  EXPECT_NE(ReadFile(dir_ + "/reversed.log").find("in shard order"),
            std::string::npos)
      << ReadFile(dir_ + "/reversed.log");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/reversed"));
}

TEST_F(CheckpointTest, CheckpointsToKeepDeletesTheOldestBesideTheNewOne) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_EQ(shards.size(), 1u);
  const std::string parent = dir_ + "/checkpoints";
  std::filesystem::create_directories(parent + "/ckpt-unfinished");
  std::ofstream(parent + "/not-a-checkpoint.txt") << "kept\n";
  for (const std::string name : {"ckpt-1", "ckpt-2", "ckpt-3"}) {
    ASSERT_EQ(Admin(Addresses(shards),
                    {"--dir=" + parent + "/" + name, "--checkpoints_to_keep=2",
                     "checkpoint"},
                    dir_ + "/" + name + ".log"),
              0)
        << ReadFile(dir_ + "/" + name + ".log");
  }
  EXPECT_NE(ReadFile(dir_ + "/ckpt-3.log").find("removed the older checkpoint"),
            std::string::npos)
      << ReadFile(dir_ + "/ckpt-3.log");
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(parent))
    left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left,
            (std::vector<std::string>{"ckpt-2", "ckpt-3", "ckpt-unfinished",
                                      "not-a-checkpoint.txt"}));
  EXPECT_NE(Admin(Addresses(shards),
                  {"--dir=" + parent + "/ckpt-4", "--checkpoints_to_keep=-1",
                   "checkpoint"},
                  dir_ + "/negative.log"),
            0);
  EXPECT_FALSE(std::filesystem::exists(parent + "/ckpt-4"));
}

// The lines of `path`, without their newlines.
std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_F(CheckpointTest, EveryLayoutTrainsExportsAndPredicts) {
  // Each layout the --columns grammar accepts, through ps_worker, ps_admin
  // export and ps_predict: the export scores the test lines as the worker
  // did, and a layout with an id column writes "id<TAB>probability".
  struct Case {
    std::string name;
    std::string columns;
    std::string model;
    std::vector<std::string> generator_flags;
    // Test AUC the worker must pass, where 6000 lines carry enough signal
    // for a check 3 standard deviations clear of chance (0: not checked).
    double min_auc;
    std::vector<std::string> worker_flags;
  };
  // Dense features alone learn slowly at the default dense learning rate
  // (Adam, 0.001): 12 steps of it stay near chance.
  const std::vector<std::string> dense_only = {"--dense_learning_rate=0.05",
                                               "--epochs=4"};
  const std::vector<Case> cases = {
      {"no_dense", "label,cat*26", "wide_deep", {}, 0.55, {}},
      {"no_dense_lr", "label,cat*26", "lr", {}, 0.55, {}},
      {"no_dense_deepfm", "label,cat*26", "deepfm", {}, 0.55, {}},
      {"no_cat", "label,dense*13", "wide_deep", {}, 0.55, dense_only},
      {"no_cat_lr", "label,dense*13", "lr", {}, 0.55, dense_only},
      {"no_cat_deepfm", "label,dense*13", "deepfm", {}, 0.55, dense_only},
      {"only_multi", "label,multi*2", "wide_deep", {"--multi_fields=2"}, 0, {}},
      {"one_cat", "label,cat", "wide_deep", {}, 0, {}},
      {"label_in_the_middle_with_an_id",
       "id,cat*13,label,dense*13,cat*13",
       "wide_deep",
       {},
       0.55,
       {}},
      {"skip_first_and_last",
       "skip,label,dense*13,cat*26,skip",
       "deepfm",
       {},
       0.55,
       {}},
  };
  constexpr int kTrain = 6000, kTest = 2000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + ": --columns=" + c.columns + " --model=" + c.model);
    std::vector<std::string> generate = c.generator_flags;
    generate.push_back("--columns=" + c.columns);
    const std::string train =
        Generate(c.name + "_train.tsv", kTrain, 1, generate);
    const std::string test = Generate(c.name + "_test.tsv", kTest, 2, generate);
    auto shards = StartShards(dir_, c.name + "_shard", 1);
    ASSERT_EQ(shards.size(), 1u);
    std::vector<std::string> flags = {"--columns=" + c.columns,
                                      "--model=" + c.model, "--batch_size=500"};
    flags.insert(flags.end(), c.worker_flags.begin(), c.worker_flags.end());
    const std::string metrics =
        Train(shards, 1, train, test, c.name, dir_, flags)[0];
    const int epochs = c.worker_flags.empty() ? 1 : 4;
    EXPECT_EQ(Metric(metrics, "examples"), kTrain * epochs) << metrics;
    EXPECT_EQ(Metric(metrics, "bad_lines"), 0) << metrics;
    EXPECT_EQ(Metric(metrics, "test_examples"), kTest) << metrics;
    const double auc = Metric(metrics, "test_auc");
    EXPECT_GT(auc, c.min_auc) << "learned nothing: " << metrics;
    EXPECT_TRUE(auc > 0.0 && auc < 1.0) << metrics;
    const std::string exported = dir_ + "/" + c.name + "_export";
    ASSERT_EQ(Admin(Addresses(shards), {"--dir=" + exported, "export"},
                    dir_ + "/" + c.name + "_export.log"),
              0)
        << ReadFile(dir_ + "/" + c.name + "_export.log");
    const std::string scores = dir_ + "/" + c.name + "_scores.txt";
    const std::string printed = dir_ + "/" + c.name + "_predict.txt";
    ASSERT_EQ(RunToCompletion({"/bin/sh", "-c",
                               BinaryPath("worker/ps_predict") +
                                   " --model=" + exported + " --input=" + test +
                                   " --out=" + scores + " > " + printed},
                              dir_ + "/" + c.name + "_predict.log"),
              0)
        << ReadFile(dir_ + "/" + c.name + "_predict.log");
    EXPECT_NEAR(After(ReadFile(printed), "AUC "), auc, 1e-4)
        << ReadFile(printed);
    const std::vector<std::string> lines = Lines(test);
    const std::vector<std::string> scored = Lines(scores);
    ASSERT_EQ(scored.size(), lines.size());
    const bool has_id = c.columns.rfind("id,", 0) == 0;
    for (size_t i = 0; i < scored.size(); ++i) {
      std::string probability = scored[i];
      if (has_id) {
        // The test line's own first column, then its probability.
        const std::string id = lines[i].substr(0, lines[i].find('\t'));
        ASSERT_EQ(scored[i].substr(0, id.size() + 1), id + "\t") << i;
        probability = scored[i].substr(id.size() + 1);
      }
      ASSERT_EQ(probability.find('\t'), std::string::npos) << scored[i];
      const double p = std::strtod(probability.c_str(), nullptr);
      ASSERT_TRUE(p > 0.0 && p < 1.0) << scored[i];
    }
  }
}

TEST_F(CheckpointTest, AnExportReadsTheLayoutItWasTrainedOn) {
  // A CSV with a header, an id, a multi field and a cross: ps_predict takes
  // the layout from the export, with no layout flags.
  const std::vector<std::string> layout = {
      "--format=csv", "--header", "--columns=skip,label,cat*26,dense*13,multi",
      "--multi_pooling=mean"};
  std::vector<std::string> gen = layout;
  gen.push_back("--multi_fields=1");
  const std::string data = Generate("train.csv", 20000, 1, gen);
  const std::string test = Generate("test.csv", 5000, 2, gen);
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_EQ(shards.size(), 2u);
  std::vector<std::string> flags = layout;
  flags.push_back("--crosses=0:26");
  const std::string metrics =
      Train(shards, 1, data, test, "trained", dir_, flags)[0];
  ASSERT_EQ(Admin(Addresses(shards), {"--dir=" + dir_ + "/export", "export"},
                  dir_ + "/export.log"),
            0)
      << ReadFile(dir_ + "/export.log");
  auto manifest = ReadExportManifest(dir_ + "/export");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->model().input_layout(),
            "format=csv header=1 columns=skip,label,cat*26,dense*13,multi "
            "multi_separator=| multi_pooling=mean crosses=0:26");
  EXPECT_EQ(manifest->model().fields(), 27u);
  const std::string predict = BinaryPath("worker/ps_predict") +
                              " --model=" + dir_ + "/export --input=" + test;
  ASSERT_EQ(RunToCompletion({"/bin/sh", "-c", predict + " > " + dir_ + "/out"},
                            dir_ + "/predict.log"),
            0)
      << ReadFile(dir_ + "/predict.log");
  const std::string printed = ReadFile(dir_ + "/out");
  EXPECT_NE(printed.find("scored 5000 lines"), std::string::npos) << printed;
  EXPECT_NEAR(After(printed, "AUC "), Metric(metrics, "test_auc"), 1e-4)
      << printed;
  // The same features laid out otherwise read with flags (here: without
  // the id column, as TSV); other features are refused.
  {
    std::ifstream in(test);
    std::ofstream out(dir_ + "/reordered.tsv");
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::string fields = line.substr(line.find(',') + 1);
      std::replace(fields.begin(), fields.end(), ',', '\t');
      out << fields << "\n";
    }
  }
  // Flags left out keep the export's values (pooling, crosses); one given
  // at its default value (--header=false) still counts.
  const std::string same_features =
      " --format=tsv --header=false --columns=label,cat*26,dense*13,multi";
  ASSERT_EQ(
      RunToCompletion({"/bin/sh", "-c",
                       BinaryPath("worker/ps_predict") + " --model=" + dir_ +
                           "/export --input=" + dir_ + "/reordered.tsv" +
                           same_features + " > " + dir_ + "/out_tsv"},
                      dir_ + "/predict_tsv.log"),
      0)
      << ReadFile(dir_ + "/predict_tsv.log");
  EXPECT_EQ(After(ReadFile(dir_ + "/out_tsv"), "AUC "), After(printed, "AUC "));
  for (const std::string other :
       {" --columns=skip,label,cat*26,dense*13,multi --multi_pooling=sum",
        " --columns=skip,label,cat*26,dense*13,cat --multi_pooling=mean "
        "--crosses=0:26",
        " --columns=skip,label,cat*26,dense*12,multi --multi_pooling=mean "
        "--crosses=0:26"}) {
    EXPECT_EQ(RunToCompletion({"/bin/sh", "-c",
                               predict + " --header --format=csv" + other +
                                   " > " + dir_ + "/other"},
                              dir_ + "/other.log"),
              64)  // a layout that does not fit the model: bad flags
        << other;
    EXPECT_NE(ReadFile(dir_ + "/other.log").find("must match"),
              std::string::npos)
        << ReadFile(dir_ + "/other.log");
  }
}

}  // namespace
}  // namespace ps::testing
