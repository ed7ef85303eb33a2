// Checkpoints against real processes, taken while the cluster trains:
//
//   - Restored into 3 shards and into 1, every row of a 2-shard checkpoint
//     comes back bit for bit, weights and optimizer state.
//   - Taken while workers train asynchronously, it holds each worker's
//     steps whole on every shard (counted with clients whose pushes add 1),
//     also right after the coordinator's shard was killed; a worker holds at
//     the cut until it ends, and a checkpoint asked for meanwhile waits for
//     it; a coordinator stopped past a lease still waits for the workers
//     behind the cut; a periodic checkpoint asked for while one is taken
//     follows it.
//   - --checkpoints_to_keep deletes the oldest.

#include "base/status_matchers.h"
#include "base/wait_until.h"
#include "grpcpp/create_channel.h"
#include "ops/periodic_checkpointer.h"
#include "proto/ps.grpc.pb.h"
#include "tests/checkpoint_cluster.h"

namespace ps::testing {
namespace {

TEST_F(CheckpointTest, RestoredIntoThreeShardsAndIntoOneEveryRowIsTheSame) {
  auto shards = StartShards(dir_, "old", 2);
  ASSERT_NE(shards, nullptr);
  const std::vector<TableSpec> tables = {
      Spec("adagrad", 8, OptimizerSpec::ADAGRAD),
      Spec("adam", 4, OptimizerSpec::ADAM),
      Spec("ftrl", 1, OptimizerSpec::FTRL), Spec("sgd", 3, OptimizerSpec::SGD)};
  client::ClientOptions options;
  options.servers = shards->addresses();
  auto client = client::PsClient::Connect(options);
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
      const client::PsClient::TableGradients push = {
          spec.name(), pushed, gradients, static_cast<int>(spec.dim())};
      ASSERT_TRUE((*client)->Push({push}, 7, round).ok());
    }
  }
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + checkpoint, "checkpoint"},
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
      expected[t].push_back(GetFullRow(*shards, tables[t].name(), key));
  }
  for (const int count : {3, 1}) {
    auto restored = StartShards(dir_, absl::StrCat("new", count, "_"), count,
                                {"--restore_from=" + checkpoint});
    ASSERT_NE(restored, nullptr);
    int stored = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      for (size_t k = 0; k < keys.size(); ++k) {
        const FullRow row = GetFullRow(*restored, tables[t].name(), keys[k]);
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
    ASSERT_NE(again, nullptr);
    EXPECT_TRUE(GetFullRow(*again, "adam", keys[3]) == expected[1][3]);
  }
  // Refused: a directory that is no (finished) checkpoint, and a data dir
  // that holds another shard.
  std::filesystem::create_directories(dir_ + "/not_a_checkpoint");
  const std::string log = dir_ + "/refused.log";
  EXPECT_NE(
      RunServerToExit({"--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/x",
                       "--restore_from=" + dir_ + "/not_a_checkpoint"},
                      log),
      0);
  EXPECT_NE(ReadFile(log).find("MANIFEST.json"), std::string::npos)
      << ReadFile(log);
  shards.reset();  // stopped: old/shard0 is a data dir no one holds
  EXPECT_NE(RunServerToExit(
                {"--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/old/shard0",
                 "--restore_from=" + checkpoint},
                log),
            0);
  EXPECT_NE(ReadFile(log).find("holds a shard already"), std::string::npos)
      << ReadFile(log);
  // A restore that was interrupted is neither served nor left half done.
  std::filesystem::create_directories(dir_ + "/cut_short/shard0");
  std::ofstream(dir_ + "/cut_short/shard0/RESTORING") << "some checkpoint\n";
  std::ofstream(dir_ + "/cut_short/shard0/junk") << "half a restore\n";
  EXPECT_NE(RunServerToExit({"--listen=127.0.0.1:0",
                             "--data_dir=" + dir_ + "/cut_short/shard0"},
                            log),
            0);
  EXPECT_NE(ReadFile(log).find("was interrupted"), std::string::npos)
      << ReadFile(log);
  {
    auto redone =
        StartShards(dir_, "cut_short", 1, {"--restore_from=" + checkpoint});
    ASSERT_NE(redone, nullptr);
    EXPECT_TRUE(GetFullRow(*redone, "adam", keys[3]) == expected[1][3]);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cut_short/shard0/RESTORING"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cut_short/shard0/junk"));
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
      RunServerToExit({"--listen=127.0.0.1:0", "--data_dir=" + dir_ + "/y",
                       "--restore_from=" + other_routing},
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
    client::ClientOptions options;
    options.servers = servers;
    // Long enough for a shard's restart; short enough that a test that
    // failed with a shard down ends.
    options.retry_for = absl::Seconds(60);
    client_ = client::PsClient::Connect(options).value();
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
        const client::PsClient::TableGradients push = {table_, keys_, minus_one,
                                                       1};
        if (!client_->Push({push}, id_, clock).ok()) return;
        ++clock;
        steps_ = clock;
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

  // Steps pushed so far.
  int64_t steps() const { return steps_; }
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
  std::unique_ptr<client::PsClient> client_;
  std::vector<uint64_t> keys_;
  std::atomic<int64_t> hold_at_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> muted_{false};
  std::atomic<int64_t> steps_{0};
  std::thread thread_;
};

// Waits until every one of `counters` has pushed `steps` more steps.
void WaitForSteps(const std::vector<std::unique_ptr<CountingWorker>>& counters,
                  int64_t steps) {
  std::vector<int64_t> from;
  for (const auto& counter : counters) from.push_back(counter->steps());
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (size_t i = 0; i < counters.size(); ++i) {
          if (counters[i]->steps() < from[i] + steps) return false;
        }
        return true;
      },
      absl::Minutes(1), absl::Milliseconds(5)))
      << "the counting workers did not step";
}

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
  ASSERT_NE(shards, nullptr);
  const std::string data = Generate("train.tsv", 40000);
  // Two real workers training asynchronously, and two counting ones.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    auto process = ChildProcess::Start(
        shards->WorkerArgs(
            w, 2,
            {"--train=" + data, "--staleness=async", "--batch_size=512",
             "--hidden=16", "--embedding_dim=4", "--slow_step_ms=30",
             absl::StrCat("--metrics_out=", dir_, "/w", w, ".json")}),
        false, absl::StrCat(dir_, "/w", w, ".log"));
    ASSERT_TRUE(process.ok());
    workers.push_back(std::move(process).value());
  }
  std::vector<std::unique_ptr<CountingWorker>> counters;
  for (uint32_t id : {10u, 11u}) {
    counters.push_back(
        std::make_unique<CountingWorker>(shards->addresses(), id));
    counters.back()->Start();
  }
  // Until all four have stepped (the real ones read their input first).
  auto admin = Admin::NewStub(shards->shard(0).channel());
  auto all_stepped = [&] {
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks);
    int stepped = 0;
    for (const auto& worker : clocks.workers()) stepped += worker.clock() >= 3;
    return stepped == 4;
  };
  ASSERT_TRUE(
      WaitUntil(all_stepped, absl::Seconds(120), absl::Milliseconds(20)));
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + checkpoint, "checkpoint"},
                  dir_ + "/checkpoint.log"),
            0)
      << ReadFile(dir_ + "/checkpoint.log");
  WaitForSteps(counters, 3);  // they go on after the cut
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

// Ends the cut `id` through `admin`; whether it was the cut in progress.
bool EndCut(Admin::Stub& admin, uint64_t id) {
  grpc::ClientContext context;
  EndCutRequest request;
  request.set_id(id);
  EndCutResponse ended;
  const grpc::Status status = admin.EndCut(&context, request, &ended);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return status.ok() && ended.ended();
}

TEST_F(CheckpointTest, AWorkerHoldsAtTheCutUntilItEnds) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_NE(shards, nullptr);
  const std::string data = Generate("train.tsv", 20000);
  auto worker = ChildProcess::Start(
      shards->WorkerArgs(0, 1,
                         {"--train=" + data, "--batch_size=500", "--hidden=16",
                          "--embedding_dim=4", "--slow_step_ms=50",
                          "--metrics_out=" + dir_ + "/w.json"}),
      false, dir_ + "/w.log");
  ASSERT_TRUE(worker.ok());
  auto admin = Admin::NewStub(shards->shard(0).channel());
  auto clock = [&] {
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks);
    return clocks.workers_size() == 1 ? clocks.workers(0).clock() : -1;
  };
  EXPECT_TRUE(WaitUntil([&] { return clock() >= 3; }, absl::Seconds(30)));
  BeginCutResponse cut;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(admin->BeginCut(&context, BeginCutRequest(), &cut).ok());
  }
  auto cut_ready = [&] {
    grpc::ClientContext context;
    CutStatusResponse status;
    EXPECT_TRUE(admin->CutStatus(&context, CutStatusRequest(), &status).ok());
    return status.ready();
  };
  ASSERT_TRUE(WaitUntil(cut_ready, absl::Seconds(30), absl::Milliseconds(1)));
  // A checkpoint asked for meanwhile waits for this cut to end.
  auto checkpoint = ChildProcess::Start(
      shards->AdminArgs({"--dir=" + dir_ + "/waited", "checkpoint"}), false,
      dir_ + "/waited.log");
  ASSERT_TRUE(checkpoint.ok());
  absl::SleepFor(absl::Seconds(1));  // 20 steps' time
  EXPECT_EQ(clock(), cut.cut()) << "the worker went past the cut";
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/waited/MANIFEST.json"));
  EXPECT_TRUE(EndCut(*admin, cut.id()));
  EXPECT_EQ((*checkpoint)->Wait(absl::Minutes(2)), 0)
      << ReadFile(dir_ + "/waited.log");
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/waited/MANIFEST.json"));
  EXPECT_EQ((*worker)->Wait(absl::Minutes(2)), 0) << ReadFile(dir_ + "/w.log");
  const std::string metrics = ReadFile(dir_ + "/w.json");
  EXPECT_EQ(Metric(metrics, "examples"), 20000) << metrics;
  EXPECT_GT(Metric(metrics, "cut_hold_seconds"), 0.9) << metrics;
}

// ps_worker --checkpoint_every_steps: a checkpoint asked for while one is
// being taken is taken after it (the newest such request), not dropped,
// unless the one being taken covers its clock. The checkpoints wait here
// behind cuts this test holds.
TEST_F(CheckpointTest, ACheckpointAskedForWhileOneIsTakenFollowsIt) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_NE(shards, nullptr);
  auto admin = Admin::NewStub(shards->shard(0).channel());
  BeginCutResponse cut;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(admin->BeginCut(&context, BeginCutRequest(), &cut).ok());
  }
  const std::string parent = dir_ + "/checkpoints";
  std::filesystem::create_directories(parent);
  CheckpointOptions options;
  options.servers = shards->addresses();
  options.dir = parent;
  ops::PeriodicCheckpointer checkpointer(options, /*keep=*/0);
  // Whether the checkpoint asked for at `clock` is being taken: its
  // directory is made before it waits for the cut.
  auto taking = [&](int64_t clock) {
    return WaitUntil(
        [&] {
          return std::filesystem::exists(
              parent + "/" + ops::CheckpointName(clock) + ".taking");
        },
        absl::Seconds(30), absl::Milliseconds(1));
  };
  checkpointer.Request(1);
  ASSERT_TRUE(taking(1));
  checkpointer.Request(100);
  checkpointer.Request(50);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(checkpointer.counts().taken, 0)
      << "the held cut was not waited for";
  EXPECT_TRUE(EndCut(*admin, cut.id()));
  EXPECT_TRUE(WaitUntil(
      [&] {
        const ops::CheckpointTaker::Counts counts = checkpointer.counts();
        return counts.taken + counts.failed >= 2;
      },
      absl::Seconds(60)));
  EXPECT_EQ(checkpointer.counts().taken, 2);
  // A request the checkpoint in progress covers (its clock at or below
  // that checkpoint's cut) is done with it.
  {
    grpc::ClientContext context;
    ASSERT_TRUE(admin->BeginCut(&context, BeginCutRequest(), &cut).ok());
  }
  checkpointer.Request(200);
  ASSERT_TRUE(taking(200));
  checkpointer.Request(0);
  EXPECT_TRUE(EndCut(*admin, cut.id()));
  EXPECT_TRUE(WaitUntil([&] { return checkpointer.counts().taken >= 3; },
                        absl::Seconds(60)));
  absl::SleepFor(absl::Milliseconds(500));
  checkpointer.Stop();
  EXPECT_EQ(checkpointer.counts().taken, 3);
  EXPECT_EQ(checkpointer.counts().failed, 0);
  int finished = 0;
  for (const auto& entry : std::filesystem::directory_iterator(parent)) {
    finished += std::filesystem::exists(entry.path() / "MANIFEST.json");
  }
  EXPECT_EQ(finished, 3);
}

// The coordinator saves its state at most every 100 ms, so the one that
// starts again after kill -9 reads clocks behind the pushes its workers
// made meanwhile: a cut placed from them would be below steps already on
// the other shard. It waits for every worker to report again first.
TEST_F(CheckpointTest,
       TakenRightAfterTheCoordinatorShardIsKilledEveryStepIsWhole) {
  auto shards = StartShards(dir_, "shard", 2);
  ASSERT_NE(shards, nullptr);
  const std::vector<std::string> servers = shards->addresses();
  // The cluster outlives the counting workers, which retry against it.
  std::vector<std::unique_ptr<CountingWorker>> counters;
  for (uint32_t id : {10u, 11u}) {
    counters.push_back(std::make_unique<CountingWorker>(servers, id));
    counters.back()->Start();
  }
  // Long enough for the coordinator to have saved both workers to its
  // state file (it saves at most every 100 ms, as reports come).
  absl::SleepFor(absl::Milliseconds(1500));
  // They push on without reporting until the coordinator has been asked
  // for a cut: its saved clocks are then surely behind.
  for (auto& counter : counters) counter->Mute(true);
  WaitForSteps(counters, 3);
  EXPECT_EQ(shards->StopShard(0, SIGKILL), 128 + SIGKILL);
  ASSERT_OK(shards->RestartShard(0));  // on its data and port
  {
    auto admin = Admin::NewStub(shards->shard(0).channel());
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
  WaitForSteps(counters, 3);  // they go on after the cut
  for (auto& counter : counters) counter->Stop();
  ExpectEveryStepWhole(checkpoint, counters, 2);
}

// Leases lapse only while the coordinator runs: one stopped (SIGSTOP, a VM
// pause) for longer than a lease does not, on its first call back, count a
// worker behind the cut out and declare the cut ready.
TEST_F(CheckpointTest, ACutHeldWhileTheCoordinatorIsStoppedWaitsForItsWorkers) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_NE(shards, nullptr);
  const absl::Duration lease = absl::Seconds(3);
  CountingWorker ahead(shards->addresses(), 10, lease);
  ahead.Start();
  // A worker at clock 1 that reports only when the test says.
  client::ClientOptions options;
  options.servers = shards->addresses();
  auto behind = client::PsClient::Connect(options);
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
  auto admin = Admin::NewStub(shards->shard(0).channel());
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
  auto ahead_moved = [&] {
    grpc::ClientContext context;
    WorkerClocksResponse clocks;
    EXPECT_TRUE(
        admin->WorkerClocks(&context, WorkerClocksRequest(), &clocks).ok());
    for (const auto& clock : clocks.workers()) {
      if (clock.worker() == 10 && clock.clock() > 3) return true;
    }
    return false;
  };
  EXPECT_TRUE(WaitUntil(ahead_moved, absl::Seconds(30)));
  BeginCutResponse cut;
  {
    grpc::ClientContext context;
    BeginCutRequest request;
    request.set_lease_ms(60000);
    ASSERT_TRUE(admin->BeginCut(&context, request, &cut).ok());
  }
  ASSERT_GT(cut.cut(), 3);
  // The worker ahead reaches the cut and holds; the one behind does not.
  EXPECT_TRUE(WaitUntil([&] { return clock_of(cut_status(), 10) >= cut.cut(); },
                        absl::Seconds(30)));
  ASSERT_TRUE(report_behind(1));
  CutStatusResponse before = cut_status();
  EXPECT_FALSE(before.ready());
  EXPECT_EQ(clock_of(before, 10), cut.cut());

  ASSERT_EQ(kill(shards->shard(0).pid(), SIGSTOP), 0);
  absl::SleepFor(lease + absl::Seconds(2));
  ASSERT_EQ(kill(shards->shard(0).pid(), SIGCONT), 0);
  // Within a lease of the pause's end (the worker behind has had no
  // coordinator to report to), it still counts.
  const CutStatusResponse after = cut_status();
  EXPECT_FALSE(after.ready()) << "a live worker at clock 1 was counted out";
  for (const auto& clock : after.workers()) {
    EXPECT_TRUE(clock.live()) << "worker " << clock.worker();
  }
  ASSERT_TRUE(report_behind(cut.cut()));
  EXPECT_TRUE(cut_status().ready());
  EXPECT_TRUE(EndCut(*admin, cut.id()));
  ahead.Stop();
}

TEST_F(CheckpointTest, CheckpointsToKeepDeletesTheOldestBesideTheNewOne) {
  auto shards = StartShards(dir_, "shard", 1);
  ASSERT_NE(shards, nullptr);
  const std::string parent = dir_ + "/checkpoints";
  std::filesystem::create_directories(parent + "/ckpt-unfinished");
  std::ofstream(parent + "/not-a-checkpoint.txt") << "kept\n";
  for (const std::string name : {"ckpt-1", "ckpt-2", "ckpt-3"}) {
    ASSERT_EQ(Admin(shards->addresses(),
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
  EXPECT_NE(Admin(shards->addresses(),
                  {"--dir=" + parent + "/ckpt-4", "--checkpoints_to_keep=-1",
                   "checkpoint"},
                  dir_ + "/negative.log"),
            0);
  EXPECT_FALSE(std::filesystem::exists(parent + "/ckpt-4"));
}

// Shards whose model cards were declared by builds before and after cards
// recorded a seq column's limit hold the same tables; the checkpoint keeps
// the recorded limit, and two shards recording other limits are refused.
TEST_F(CheckpointTest, ShardsMayHoldCardsWithAndWithoutTheSequenceLimit) {
  auto shards = StartShards(dir_, "shard", 3);
  ASSERT_NE(shards, nullptr);
  auto declare = [&](int shard, const std::string& name, uint32_t limit) {
    TableSpec spec = Spec(name, 4, OptimizerSpec::SGD);
    spec.mutable_model()->set_input_layout(
        "format=tsv header=0 columns=label,cat,seq:0 multi_separator=| "
        "multi_pooling=sum crosses=");
    spec.mutable_model()->set_max_values_per_field(limit);
    // A spec's card whose one table is this (what an export reads).
    spec.mutable_model()->set_kind(ModelCard::SPEC);
    spec.mutable_model()->add_sparse_tables(name);
    auto stub = ParameterServer::NewStub(grpc::CreateChannel(
        shards->addresses()[shard], grpc::InsecureChannelCredentials()));
    const grpc::Status declared = DeclareTable(*stub, spec);
    EXPECT_TRUE(declared.ok()) << declared.error_message();
  };
  declare(0, "m.history", 0);  // an older build's card
  declare(1, "m.history", 4);
  declare(2, "m.history", 4);
  const std::string checkpoint = dir_ + "/checkpoint";
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + checkpoint, "checkpoint"},
                  dir_ + "/checkpoint.log"),
            0)
      << ReadFile(dir_ + "/checkpoint.log");
  auto manifest = ReadManifest(checkpoint);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->tables_size(), 1);
  EXPECT_EQ(manifest->tables(0).model().max_values_per_field(), 4u);
  // An export's card likewise: shard 0, whose card records no limit, is not
  // the one that decides.
  const std::string exported = dir_ + "/export";
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + exported, "export"},
                  dir_ + "/export.log"),
            0)
      << ReadFile(dir_ + "/export.log");
  absl::StatusOr<ExportManifest> export_manifest = ReadExportManifest(exported);
  ASSERT_TRUE(export_manifest.ok()) << export_manifest.status();
  EXPECT_EQ(export_manifest->model().max_values_per_field(), 4u);
  ASSERT_EQ(export_manifest->tables_size(), 1);
  EXPECT_EQ(export_manifest->tables(0).spec().model().max_values_per_field(),
            4u);

  // Each table's recorded card wins, whichever shard holds it.
  declare(0, "n.first", 6);
  declare(1, "n.first", 0);
  declare(2, "n.first", 0);
  declare(0, "n.second", 0);
  declare(1, "n.second", 0);
  declare(2, "n.second", 6);
  const std::string per_table = dir_ + "/per_table";
  ASSERT_EQ(Admin(shards->addresses(), {"--dir=" + per_table, "checkpoint"},
                  dir_ + "/per_table.log"),
            0)
      << ReadFile(dir_ + "/per_table.log");
  manifest = ReadManifest(per_table);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->tables_size(), 3);
  for (const TableSpec& table : manifest->tables()) {
    EXPECT_EQ(table.model().max_values_per_field(),
              table.name() == "m.history" ? 4u : 6u)
        << table.name();
  }

  declare(0, "m.other", 0);
  declare(1, "m.other", 4);
  declare(2, "m.other", 10);
  EXPECT_NE(
      Admin(shards->addresses(), {"--dir=" + dir_ + "/refused", "checkpoint"},
            dir_ + "/refused.log"),
      0);
  EXPECT_NE(ReadFile(dir_ + "/refused.log").find("holds other tables"),
            std::string::npos)
      << ReadFile(dir_ + "/refused.log");
}

// The lines of `path`, without their newlines.
}  // namespace
}  // namespace ps::testing
