// Fuzz target: whole DeclareTable, Pull and Push requests through a shard's
// validation and store (server/data_service.h), as a client could send
// them: either a request proto parsed from the bytes, or one built from
// them field by field (tables that exist and do not, keys, gradients with
// NaNs, sizes that do not fit). One store under --durability=wal with a
// small hot tier lives for the whole run, so evictions, write-backs and
// the push log are fuzzed too. A pull that succeeds must return a row of
// the table's dim per key; a push's bytes must read as the shard reads them
// from gRPC exactly when protobuf parses them.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "embedding/embedding_store.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/clock_coordinator.h"
#include "server/data_service.h"
#include "server/received_push.h"
#include "tests/fuzz/fuzz_input.h"

namespace ps::fuzz {
namespace {

struct Shard {
  std::unique_ptr<embedding::EmbeddingStore> store;
  std::unique_ptr<server::ClockCoordinator> clocks;
  std::unique_ptr<cluster::SlotOwnership> slots;
  std::unique_ptr<server::SlotMoveSource> moves;
  std::unique_ptr<server::DataService> service;
};

TableSpec Table(const std::string& name, uint32_t dim,
                OptimizerSpec::Kind optimizer) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_optimizer()->set_kind(optimizer);
  return spec;
}

Shard& TheShard() {
  static Shard* shard = [] {
    const std::string dir = std::filesystem::temp_directory_path() /
                            ("ps_requests_fuzzer_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    embedding::StoreOptions options;
    options.data_dir = dir;
    options.cache_bytes = 256 << 10;
    options.num_stripes = 4;
    options.max_push_log_bytes = 1 << 20;
    options.write_back_interval = absl::Milliseconds(200);
    options.max_dim = 64;
    options.max_tables = 16;
    auto* made = new Shard;
    made->store = embedding::EmbeddingStore::Open(options).value();
    made->clocks = server::ClockCoordinator::Open({}).value();
    made->slots = cluster::SlotOwnership::Open(dir, 1).value();
    made->moves = std::make_unique<server::SlotMoveSource>(
        made->store.get(), made->slots.get(), 0);
    server::DataServiceOptions service_options;
    service_options.max_keys_per_request = 4096;
    service_options.max_message_bytes = 4 << 20;
    made->service = std::make_unique<server::DataService>(
        service_options, made->store.get(), made->clocks.get(),
        made->slots.get(), made->moves.get());
    for (const TableSpec& spec : {Table("a", 1, OptimizerSpec::SGD),
                                  Table("b", 4, OptimizerSpec::ADAGRAD),
                                  Table("c", 3, OptimizerSpec::ADAM),
                                  Table("d", 2, OptimizerSpec::FTRL)}) {
      made->store->tables().DeclareTable(spec).IgnoreError();
    }
    return made;
  }();
  return *shard;
}

const char* kTables[] = {"a", "b", "c", "d", "missing", ""};
const uint32_t kDims[] = {1, 4, 3, 2, 1, 1};

// Gradients for `floats` values: raw bytes (any length, NaNs and all), or
// the right count of small values with an occasional huge one.
std::string Gradients(FuzzInput& input, size_t floats) {
  if (input.Choose(4) == 0) return input.Bytes(255);
  std::string packed(floats * sizeof(float), '\0');
  for (size_t i = 0; i < floats; ++i) {
    const uint32_t byte = input.Choose(256);
    const float value =
        byte == 255 ? 3e38f : (static_cast<int>(byte) - 128) / 16.0f;
    std::memcpy(&packed[i * sizeof(float)], &value, sizeof(float));
  }
  return packed;
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  fuzz::FuzzInput input(data, size);
  server::DataService& service = *fuzz::TheShard().service;
  const uint32_t kind = input.Choose(8);
  if (kind < 3) {
    // A request proto as a client could put on the wire.
    const std::string bytes = input.Rest();
    if (kind == 0) {
      DeclareTableRequest request;
      DeclareTableResponse response;
      if (request.ParseFromString(bytes))
        service.HandleDeclareTable(request, &response).IgnoreError();
    } else if (kind == 1) {
      PullRequest request;
      PullResponse response;
      if (request.ParseFromString(bytes))
        service.HandlePull(request, &response).IgnoreError();
    } else {
      // Read as the shard reads a push from gRPC.
      grpc::Slice slice(bytes);
      absl::StatusOr<server::ReceivedPush> push =
          server::ReceivedPush::Read(grpc::ByteBuffer(&slice, 1));
      PushRequest request;
      if (push.ok() != request.ParseFromString(bytes)) std::abort();
      PushResponse response;
      if (push.ok()) service.HandlePush(*push, &response).IgnoreError();
    }
    return 0;
  }
  // Built field by field: mostly well-formed, with the faults fuzzed in.
  const uint32_t table_index = input.Choose(6);
  const std::string table = fuzz::kTables[table_index];
  const std::string keys = input.Bytes(8 * 32);
  if (kind < 5) {
    PullRequest request;
    request.set_table(table);
    request.set_keys(keys);
    request.set_with_state(kind == 4);
    PullResponse response;
    if (service.HandlePull(request, &response).ok()) {
      const size_t rows = keys.size() / sizeof(uint64_t);
      if (response.values().size() !=
          rows * (response.dim() + response.state_floats()) * sizeof(float))
        std::abort();
      if (request.with_state() != response.has_optimizer()) std::abort();
    }
    return 0;
  }
  PushRequest request;
  request.set_table(table);
  request.set_keys(keys);
  request.set_gradients(fuzz::Gradients(
      input, keys.size() / sizeof(uint64_t) * fuzz::kDims[table_index]));
  request.set_worker(input.Choose(4));
  request.set_incarnation(input.Choose(3));
  request.set_sequence(input.Choose(16));
  PushResponse response;
  service.HandlePush(server::ReceivedPush::FromRequest(request), &response)
      .IgnoreError();
  return 0;
}
