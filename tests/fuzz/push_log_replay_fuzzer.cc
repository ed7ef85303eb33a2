// Fuzz target: the push log a shard replays when it opens. Each input is a
// list of records (a length byte, then that many bytes, and so on), written
// as whole frames of the log's current run, optionally followed by raw
// bytes (torn or damaged frames); then the store opens on it, which parses
// and replays every record (push sections, ledger snapshots, records of the
// format before headers). Opening must succeed or fail with DATA_LOSS,
// INVALID_ARGUMENT or FAILED_PRECONDITION, never crash; a store that opened
// closes cleanly and opens again.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "embedding/embedding_store.h"
#include "embedding/push_log.h"
#include "tests/fuzz/fuzz_input.h"

namespace ps::fuzz {
namespace {

struct Replay {
  embedding::StoreOptions options;
  // The run the next open replays.
  uint64_t run = 0;
};

Replay& TheReplay() {
  static Replay* replay = [] {
    auto* made = new Replay;
    made->options.data_dir =
        std::filesystem::temp_directory_path() /
        ("ps_push_log_replay_fuzzer_" + std::to_string(getpid()));
    std::filesystem::remove_all(made->options.data_dir);
    made->options.num_stripes = 4;
    made->options.cache_bytes = 1 << 20;
    made->options.write_back_interval = absl::Hours(1);
    made->options.max_dim = 16;
    {
      auto store = embedding::EmbeddingStore::Open(made->options).value();
      for (uint32_t dim : {2u, 3u}) {
        TableSpec spec;
        spec.set_name("t" + std::to_string(dim));
        spec.set_dim(dim);
        spec.mutable_optimizer()->set_kind(dim == 2 ? OptimizerSpec::SGD
                                                    : OptimizerSpec::ADAGRAD);
        store->tables().DeclareTable(spec).IgnoreError();
      }
    }
    made->run = 1;  // the first open started run 1
    return made;
  }();
  return *replay;
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  fuzz::Replay& replay = fuzz::TheReplay();
  fuzz::FuzzInput input(data, size);
  const std::string log_dir = replay.options.data_dir + "/push_log";
  {
    embedding::PushLogOptions log_options;
    log_options.dir = log_dir;
    auto log = embedding::PushLog::Open(log_options).value();
    log->StartRun(replay.run);
    const uint32_t records = input.Choose(8);
    for (uint32_t r = 0; r < records && input.left() > 0; ++r)
      log->Append(input.Bytes(255)).IgnoreError();
  }
  if (input.left() > 0) {
    // Raw bytes in a later segment of the run, mostly behind the magic.
    const bool magic = input.Choose(4) != 0;
    std::string run = std::to_string(replay.run);
    run.insert(0, 10 - run.size(), '0');
    std::ofstream segment(log_dir + "/" + run + "-0000000009.pushlog",
                          std::ios::binary);
    if (magic) segment << "PSPUSHL1";
    segment << input.Rest();
  }
  auto store = embedding::EmbeddingStore::Open(replay.options);
  if (store.ok()) {
    ++replay.run;
    store->reset();
    // A store that opened opens again (the run it started, now empty).
    auto again = embedding::EmbeddingStore::Open(replay.options);
    if (!again.ok()) std::abort();
    ++replay.run;
    return 0;
  }
  const absl::StatusCode code = store.status().code();
  if (code != absl::StatusCode::kDataLoss &&
      code != absl::StatusCode::kInvalidArgument &&
      code != absl::StatusCode::kFailedPrecondition) {
    std::abort();
  }
  // Refused: clear the run's segments for the next input.
  for (const auto& entry : std::filesystem::directory_iterator(log_dir))
    std::filesystem::remove(entry.path());
  return 0;
}
