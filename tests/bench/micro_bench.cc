// Micro-benchmarks of the hot paths (Google Benchmark):
//   bazel run -c opt //tests/bench:micro_bench
// Hashing and routing a batch, a Criteo example parsed from a line and from
// a TFRecord record, optimizer apply per row, hot-tier lookup and
// memory per row, synced push-log appends,
// the store's pull and push of a batch from memory, the CPU backend's
// gather and scatter-reduce, an export's in-memory lookups, a call's key
// positions (KeyIndex against absl::flat_hash_map) and a push's check
// for repeated keys (AllKeysDistinct() against absl::flat_hash_map).

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/huge_pages.h"
#include "base/key_index.h"
#include "base/optimizer.h"
#include "base/routing.h"
#include "benchmark/benchmark.h"
#include "embedding/distinct_keys.h"
#include "embedding/embedding_store.h"
#include "embedding/push_log.h"
#include "embedding/row_cache.h"
#include "kernels/backend.h"
#include "model/input/features.h"
#include "model/input/line_parser.h"
#include "model/input/tf_example.h"
#include "proto/tf_example.pb.h"
#include "worker/input/tfrecord_file.h"

namespace ps {
namespace {

constexpr int kBatch = 4096;
constexpr int kFields = 26;

void BM_HashAndRouteBatch(benchmark::State& state) {
  std::mt19937 rng(1);
  std::vector<std::string> values(kBatch * kFields);
  char buffer[16];
  for (auto& value : values) {
    std::snprintf(buffer, sizeof(buffer), "%08x", static_cast<unsigned>(rng()));
    value = buffer;
  }
  std::vector<uint32_t> shards(values.size());
  for (auto _ : state) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint64_t key = model::FeatureKey(i % kFields, values[i]);
      shards[i] = ShardForKey(key, 16);
    }
    benchmark::DoNotOptimize(shards.data());
  }
  state.SetItemsProcessed(state.iterations() * values.size());
  state.SetLabel("keys");
}
BENCHMARK(BM_HashAndRouteBatch);

// One Criteo example parsed from its line, and from the same values as a
// TFRecord record (its data CRC checked, then the tf.Example parsed): what
// --format=tfrecord costs per example beyond reading the bytes.
std::vector<std::string> CriteoValues(int example) {
  std::mt19937 rng(example);
  std::vector<std::string> values = {std::to_string(example % 2)};
  for (int i = 0; i < 13; ++i) values.push_back(std::to_string(rng() % 1000));
  char buffer[16];
  for (int i = 0; i < kFields; ++i) {
    std::snprintf(buffer, sizeof(buffer), "%08x", static_cast<unsigned>(rng()));
    values.push_back(buffer);
  }
  return values;
}

void BM_ParseCriteoLine(benchmark::State& state) {
  std::vector<std::string> lines;
  for (int e = 0; e < 256; ++e) {
    std::string line;
    for (const std::string& value : CriteoValues(e))
      line += (line.empty() ? "" : "\t") + value;
    lines.push_back(line);
  }
  const model::InputLayout layout = model::InputLayout::Criteo();
  model::Example example;
  size_t i = 0;
  for (auto _ : state) {
    if (!model::ParseLine(lines[i++ % lines.size()], layout, &example).ok())
      state.SkipWithError("a line did not parse");
    benchmark::DoNotOptimize(example.keys.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("examples");
}
BENCHMARK(BM_ParseCriteoLine);

void BM_ParseCriteoRecord(benchmark::State& state) {
  absl::StatusOr<model::InputLayout> layout = model::MakeInputLayout(
      "tfrecord", false,
      "label,dense:I1,dense:I2,dense:I3,dense:I4,dense:I5,dense:I6,dense:I7,"
      "dense:I8,dense:I9,dense:I10,dense:I11,dense:I12,dense:I13,"
      "cat:C1,cat:C2,cat:C3,cat:C4,cat:C5,cat:C6,cat:C7,cat:C8,cat:C9,"
      "cat:C10,cat:C11,cat:C12,cat:C13,cat:C14,cat:C15,cat:C16,cat:C17,"
      "cat:C18,cat:C19,cat:C20,cat:C21,cat:C22,cat:C23,cat:C24,cat:C25,"
      "cat:C26",
      "|", "sum", "");
  if (!layout.ok()) {
    state.SkipWithError("no layout");
    return;
  }
  std::vector<std::string> records;
  for (int e = 0; e < 256; ++e) {
    const std::vector<std::string> values = CriteoValues(e);
    tfexample::Example record;
    auto& features = *record.mutable_features()->mutable_feature();
    for (size_t c = 0; c < values.size(); ++c) {
      const std::string& name = layout->feature_names[c];
      if (c < 14) {
        features[name].mutable_int64_list()->add_value(std::stoll(values[c]));
      } else {
        features[name].mutable_bytes_list()->add_value(values[c]);
      }
    }
    records.push_back(record.SerializeAsString());
  }
  const model::TfExampleParser parser(*layout);
  model::Example example;
  size_t i = 0;
  for (auto _ : state) {
    const std::string& record = records[i++ % records.size()];
    benchmark::DoNotOptimize(worker::MaskCrc(worker::Crc32c(record)));
    if (!parser.Parse(record, &example).ok())
      state.SkipWithError("a record did not parse");
    benchmark::DoNotOptimize(example.keys.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("examples");
}
BENCHMARK(BM_ParseCriteoRecord);

void BM_OptimizerApply(benchmark::State& state) {
  OptimizerSpec spec;
  spec.set_kind(static_cast<OptimizerSpec::Kind>(state.range(0)));
  auto optimizer = Optimizer::Create(spec).value();
  const int dim = static_cast<int>(state.range(1));
  const int rows = 4096;
  std::vector<float> weights(rows * dim, 0.1f), gradients(rows * dim, 0.01f);
  std::vector<float> states(static_cast<size_t>(rows) *
                            optimizer->StateFloats(dim));
  for (int r = 0; r < rows; ++r) {
    optimizer->InitState(dim, states.data() + static_cast<size_t>(r) *
                                                  optimizer->StateFloats(dim));
  }
  for (auto _ : state) {
    for (int r = 0; r < rows; ++r) {
      optimizer->Apply(
          &gradients[r * dim], dim, &weights[r * dim],
          states.data() + static_cast<size_t>(r) * optimizer->StateFloats(dim));
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows);
  static const char* names[] = {"sgd", "adagrad", "adam", "ftrl"};
  state.SetLabel(std::string(names[state.range(0)]) + " rows");
}
BENCHMARK(BM_OptimizerApply)->ArgsProduct({{0, 1, 2, 3}, {16, 64}});

// Resident set size of this process, from /proc.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Memory per cached row of 16 floats (a dim-16 SGD row), measured as RSS
// growth over a million rows, next to what the cache accounts for it.
void BM_HotTierBytesPerRow(benchmark::State& state) {
  constexpr int kRows = 1000000;
  const std::vector<float> row(16, 1.0f);
  for (auto _ : state) {
    const size_t before = ResidentBytes();
    auto cache = std::make_unique<embedding::RowCache>(size_t{1} << 40);
    for (int k = 0; k < kRows; ++k) cache->Insert(0, k * 7919ULL, row, false);
    state.counters["rss_bytes_per_row"] =
        static_cast<double>(ResidentBytes() - before) / kRows;
    state.counters["accounted_bytes_per_row"] =
        static_cast<double>(embedding::RowCache::RowBytes(row.size()));
  }
}
BENCHMARK(BM_HotTierBytesPerRow)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_HotTierFind(benchmark::State& state) {
  const int rows = 100000;
  embedding::RowCache cache(size_t{1} << 30);
  std::vector<float> row(32, 1.0f);
  for (int k = 0; k < rows; ++k) cache.Insert(0, k * 7919ULL, row, false);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys(kBatch);
  for (auto& key : keys) key = (rng() % rows) * 7919ULL;
  for (auto _ : state) {
    for (uint64_t key : keys) benchmark::DoNotOptimize(cache.Find(0, key));
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.SetLabel("lookups");
}
BENCHMARK(BM_HotTierFind);

// Synced push-log appends of one 4096-key dim-16 record (--sync_wal), from
// one thread and from four: concurrent appends share fdatasync() calls.
void BM_PushLogSyncedAppend(benchmark::State& state) {
  static std::unique_ptr<embedding::PushLog> log;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "ps_micro_bench_push_log";
  if (state.thread_index() == 0) {
    std::filesystem::remove_all(dir);
    embedding::PushLogOptions options;
    options.dir = dir;
    options.sync = true;
    log = embedding::PushLog::Open(options).value();
    log->StartRun(1);
  }
  const std::string record(kBatch * (8 + 16 * 4), 'r');
  for (auto _ : state) log->Append(record).IgnoreError();
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    state.counters["syncs_per_append"] =
        static_cast<double>(log->syncs()) /
        (static_cast<double>(state.iterations()) * state.threads());
    log.reset();
    std::filesystem::remove_all(dir);
  }
}
BENCHMARK(BM_PushLogSyncedAppend)->Threads(1)->Threads(4)->UseRealTime();

// The store's pull and push of 4096-key batches, all rows in the hot tier
// (so this is locking, hashing, copying and the optimizer; no disk reads).
// Arguments: durability (0 wal, 1 periodic), stripes (0: the default), rows
// stored first (0: none; else the batches' rows are spread over a hot tier
// much larger than the CPU's caches, and each iteration takes the next of
// kBatches batches of distinct keys), the row dimension.
class StoreFixture : public benchmark::Fixture {
 public:
  static constexpr int kBatches = 64;

  void SetUp(const benchmark::State& state) override {
    dir_ = std::filesystem::temp_directory_path() / "ps_micro_bench_store";
    std::filesystem::remove_all(dir_);
    embedding::StoreOptions options;
    options.data_dir = dir_;
    options.durability = state.range(0) == 0 ? embedding::Durability::kWal
                                             : embedding::Durability::kPeriodic;
    if (state.range(1) > 0)
      options.num_stripes = static_cast<int>(state.range(1));
    options.cache_bytes = size_t{4} << 30;
    store_ = embedding::EmbeddingStore::Open(options).value();
    dim_ = static_cast<int>(state.range(3));
    TableSpec spec;
    spec.set_name("t");
    spec.set_dim(dim_);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    store_->tables().DeclareTable(spec).IgnoreError();
    const int64_t stored_rows = state.range(2);
    std::vector<uint64_t> preload;
    for (int64_t start = 0; start < stored_rows; start += kBatch) {
      preload.clear();
      for (int64_t key = start; key < std::min(stored_rows, start + kBatch);
           ++key) {
        preload.push_back(static_cast<uint64_t>(key));
      }
      store_
          ->Push("t", preload, std::vector<float>(preload.size() * dim_, 0.0f))
          .IgnoreError();
    }
    std::mt19937_64 rng(5);
    const int batches = stored_rows > 0 ? kBatches : 1;
    batches_.resize(batches);
    for (std::vector<uint64_t>& keys : batches_) {
      keys.resize(kBatch);
      for (auto& key : keys)
        key = rng() % std::max<int64_t>(stored_rows, 200000);
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      std::shuffle(keys.begin(), keys.end(), rng);
      store_->Push("t", keys, std::vector<float>(keys.size() * dim_, 0.01f))
          .IgnoreError();
    }
    gradients_.assign(kBatch * dim_, 0.01f);
    out_.resize(kBatch * dim_);
  }
  void TearDown(const benchmark::State&) override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

 protected:
  const std::vector<uint64_t>& NextBatch() {
    next_ = (next_ + 1) % batches_.size();
    return batches_[next_];
  }

  std::filesystem::path dir_;
  std::unique_ptr<embedding::EmbeddingStore> store_;
  int dim_ = 16;
  std::vector<std::vector<uint64_t>> batches_;
  size_t next_ = 0;
  std::vector<float> gradients_, out_;
};

BENCHMARK_DEFINE_F(StoreFixture, Pull)(benchmark::State& state) {
  int64_t rows = 0;
  for (auto _ : state) {
    const std::vector<uint64_t>& keys = NextBatch();
    store_->Pull("t", keys, absl::MakeSpan(out_.data(), keys.size() * dim_))
        .IgnoreError();
    rows += keys.size();
  }
  state.SetItemsProcessed(rows);
  state.SetLabel(state.range(0) == 0 ? "rows (wal)" : "rows (periodic)");
}
BENCHMARK_REGISTER_F(StoreFixture, Pull)
    ->Args({0, 0, 0, 16})
    ->Args({0, 0, 1000000, 16})
    ->Args({0, 0, 1000000, 64});

BENCHMARK_DEFINE_F(StoreFixture, Push)(benchmark::State& state) {
  int64_t rows = 0;
  for (auto _ : state) {
    const std::vector<uint64_t>& keys = NextBatch();
    store_
        ->Push("t", keys,
               absl::MakeConstSpan(gradients_.data(), keys.size() * dim_))
        .IgnoreError();
    rows += keys.size();
  }
  state.SetItemsProcessed(rows);
  state.SetLabel(state.range(0) == 0 ? "rows (wal)" : "rows (periodic)");
}
BENCHMARK_REGISTER_F(StoreFixture, Push)
    ->Args({0, 0, 0, 16})
    ->Args({0, 1, 0, 16})
    ->Args({0, 8, 0, 16})
    ->Args({1, 0, 0, 16})
    ->Args({0, 0, 1000000, 16})
    ->Args({0, 0, 1000000, 64});

// Writing rows back to RocksDB: rounds of 200000 newly pushed (dirty) dim-16
// Adagrad rows, each round then written back with Flush(); RocksDB's
// memtable flushes run in its own threads, so the time is the process's
// CPU time over the rounds (pushes included).
void BM_WriteBack(benchmark::State& state) {
  constexpr int kRounds = 10;
  constexpr int kRowsPerRound = 200000;
  const auto dir =
      std::filesystem::temp_directory_path() / "ps_micro_bench_write_back";
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    embedding::StoreOptions options;
    options.data_dir = dir;
    options.cache_bytes = size_t{4} << 30;
    options.write_back_interval = absl::Hours(1);
    options.num_stripes = 64;  // the same on every machine
    auto store = embedding::EmbeddingStore::Open(options).value();
    TableSpec spec;
    spec.set_name("t");
    spec.set_dim(16);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    store->tables().DeclareTable(spec).IgnoreError();
    std::mt19937_64 rng(9);
    std::vector<uint64_t> keys(kBatch);
    const std::vector<float> gradients(keys.size() * 16, 0.01f);
    state.ResumeTiming();
    for (int round = 0; round < kRounds; ++round) {
      for (int pushed = 0; pushed < kRowsPerRound; pushed += kBatch) {
        for (auto& key : keys) key = rng();
        store->Push("t", keys, gradients).IgnoreError();
      }
      store->Flush().IgnoreError();
    }
    store.reset();
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kRounds * kRowsPerRound);
  state.SetLabel("rows pushed and written back");
}
BENCHMARK(BM_WriteBack)
    ->Iterations(1)
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

void BM_GatherConcat(benchmark::State& state) {
  auto backend = kernels::NewCpuBackend();
  const int dim = 16, unique = kBatch * kFields / 3, cols = kFields * dim + 13;
  std::vector<float> rows(static_cast<size_t>(unique) * dim, 1.0f),
      out(kBatch * cols);
  std::vector<int32_t> index(kBatch * kFields);
  std::mt19937 rng(2);
  for (auto& i : index) i = rng() % unique;
  for (auto _ : state) {
    backend->GatherConcat(rows.data(), index.data(), kBatch, kFields, dim,
                          out.data(), cols);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBatch * kFields);
  state.SetLabel("embedding rows");
}
BENCHMARK(BM_GatherConcat);

void BM_ScatterReduce(benchmark::State& state) {
  auto backend = kernels::NewCpuBackend();
  const int dim = 16, unique = kBatch * kFields / 3, cols = kFields * dim + 13;
  std::vector<float> upstream(static_cast<size_t>(kBatch) * cols, 0.5f),
      grads(unique * dim);
  std::vector<int32_t> index(kBatch * kFields);
  std::mt19937 rng(2);
  for (auto& i : index) i = rng() % unique;
  for (auto _ : state) {
    backend->ScatterReduce(upstream.data(), cols, dim, index.data(), kBatch,
                           kFields, dim, unique, grads.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBatch * kFields);
  state.SetLabel("embedding rows");
}
BENCHMARK(BM_ScatterReduce);

// An export's in-memory lookups as ExportedModel::Lookup makes them: 256
// lines of 26 fields a call over stored dim-16 rows (430000: a wide_deep
// export's embedding table, the KeyIndex 0.41 full; 780000: 0.74 full),
// one key in ten not stored, each key's index slot prefetched 8 keys ahead
// and its row copied 8 keys after its probe; index and rows on huge pages.
// Args: 0 KeyIndex or 1 absl::flat_hash_map (what it replaced), rows.
void BM_ExportLookup(benchmark::State& state) {
  const size_t kRows = state.range(1);
  constexpr size_t kDim = 16, kAhead = 8;
  std::mt19937_64 rng(5);
  std::vector<uint64_t> stored(kRows);
  for (uint64_t& key : stored) key = rng();
  std::vector<float, HugePageAllocator<float>> rows(kRows * kDim, 0.5f);
  KeyIndex index;
  index.Reserve(kRows);
  absl::flat_hash_map<uint64_t, size_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, size_t>>>
      map;
  map.reserve(kRows);
  for (size_t i = 0; i < kRows; ++i) {
    index.TryEmplace(stored[i], i * kDim);
    map.emplace(stored[i], i * kDim);
  }
  // Calls drawn ahead, cycled through: more than the caches hold.
  std::vector<std::vector<uint64_t>> calls(64, std::vector<uint64_t>(256 * 26));
  for (auto& call : calls) {
    for (uint64_t& key : call) {
      key = rng() % 10 == 0 ? rng() : stored[rng() % kRows];
    }
  }
  const bool use_index = state.range(0) == 0;
  std::vector<float> out(256 * 26 * kDim);
  size_t next = 0;
  for (auto _ : state) {
    const std::vector<uint64_t>& keys = calls[next++ % calls.size()];
    const float* sources[kAhead] = {};
    for (size_t i = 0; i < keys.size() + kAhead; ++i) {
      if (i >= kAhead) {
        const size_t k = i - kAhead;
        if (sources[k % kAhead] != nullptr) {
          std::memcpy(&out[k * kDim], sources[k % kAhead],
                      kDim * sizeof(float));
        }
      }
      if (i >= keys.size()) continue;
      const float* source = nullptr;
      if (use_index) {
        if (i + kAhead < keys.size()) index.Prefetch(keys[i + kAhead]);
        const std::optional<uint64_t> found = index.Find(keys[i]);
        if (found.has_value()) source = rows.data() + *found;
      } else {
        if (i + kAhead < keys.size()) map.prefetch(keys[i + kAhead]);
        const auto found = map.find(keys[i]);
        if (found != map.end()) source = rows.data() + found->second;
      }
      if (source != nullptr) __builtin_prefetch(source);
      sources[i % kAhead] = source;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 256 * 26);
  state.SetLabel(use_index ? "keys (KeyIndex)" : "keys (absl::flat_hash_map)");
}
BENCHMARK(BM_ExportLookup)->ArgsProduct({{0, 1}, {430000, 780000}});

// Finding each key's position among a call's distinct keys, as a push's
// repeats are found (4096 keys, distinct, a fresh index each call) and a
// batch's key positions (53248 keys drawn from 26624, one index reset for
// each call, each key prefetched 8 ahead). Args: 0 KeyIndex or 1
// absl::flat_hash_map, keys per call.
void BM_KeyPositions(benchmark::State& state) {
  const bool use_index = state.range(0) == 0;
  const size_t keys_per_call = state.range(1);
  const bool repeats = keys_per_call > 4096;
  std::mt19937_64 rng(6);
  std::vector<std::vector<uint64_t>> calls(
      16, std::vector<uint64_t>(keys_per_call));
  // Feature keys are hashes: random 64-bit values, a batch's repeats drawn
  // from a pool of half as many.
  std::vector<uint64_t> pool(keys_per_call / 2);
  for (uint64_t& key : pool) key = rng();
  for (auto& call : calls) {
    for (uint64_t& key : call)
      key = repeats ? pool[rng() % pool.size()] : rng();
  }
  KeyIndex kept(/*huge_pages=*/false);
  size_t next = 0;
  int64_t distinct = 0;
  // Sized as the callers size them (Prepare() for half its keys), and each
  // key probed 8 ahead, as Prepare() does.
  const size_t expected = repeats ? keys_per_call / 2 : keys_per_call;
  constexpr size_t kAhead = 8;
  for (auto _ : state) {
    const std::vector<uint64_t>& keys = calls[next++ % calls.size()];
    if (use_index) {
      KeyIndex fresh(/*huge_pages=*/false);
      KeyIndex& index = repeats ? kept : fresh;
      index.Reset(expected);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (repeats && i + kAhead < keys.size())
          index.Prefetch(keys[i + kAhead]);
        distinct += index.TryEmplace(keys[i], index.size()).second;
      }
    } else {
      absl::flat_hash_map<uint64_t, uint32_t> positions;
      positions.reserve(expected);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (repeats && i + kAhead < keys.size()) {
          positions.prefetch(keys[i + kAhead]);
        }
        distinct +=
            positions
                .try_emplace(keys[i], static_cast<uint32_t>(positions.size()))
                .second;
      }
    }
  }
  benchmark::DoNotOptimize(distinct);
  state.SetItemsProcessed(state.iterations() * keys_per_call);
  state.SetLabel(use_index ? "keys (KeyIndex)" : "keys (absl::flat_hash_map)");
}
BENCHMARK(BM_KeyPositions)->ArgsProduct({{0, 1}, {4096, 53248}});

// Whether a push's 4096 random keys are distinct: AllKeysDistinct() (arg 0)
// against the absl::flat_hash_map of positions a push would otherwise
// build (arg 1).
void BM_DistinctKeys(benchmark::State& state) {
  const bool own_table = state.range(0) == 0;
  std::mt19937_64 rng(8);
  std::vector<std::vector<uint64_t>> calls(16, std::vector<uint64_t>(kBatch));
  for (auto& call : calls) {
    for (uint64_t& key : call) key = rng();
  }
  size_t next = 0;
  int64_t distinct = 0;
  for (auto _ : state) {
    const std::vector<uint64_t>& keys = calls[next++ % calls.size()];
    if (own_table) {
      distinct += embedding::AllKeysDistinct(keys);
    } else {
      absl::flat_hash_map<uint64_t, uint32_t> positions;
      positions.reserve(keys.size());
      bool all = true;
      for (size_t i = 0; i < keys.size() && all; ++i)
        all = positions.try_emplace(keys[i], static_cast<uint32_t>(i)).second;
      distinct += all;
    }
  }
  benchmark::DoNotOptimize(distinct);
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.SetLabel(own_table ? "keys (AllKeysDistinct)"
                           : "keys (absl::flat_hash_map)");
}
BENCHMARK(BM_DistinctKeys)->Arg(0)->Arg(1);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
