// Fuzz target: an export as ps_serve and ps_predict load it. A good export
// of a small wide & deep model (model/export_test_util.h) and a
// good base before it are written once; each input then changes the
// manifest field by field (the card's sizes and kinds, a table's dim, rows
// or part names, a delta's predecessor, the shard count, the format) and
// may damage a part's bytes, and the export is served: ServingModel::Open,
// then two lines scored and rows looked up. Whatever the export says, it
// loads and scores or is refused with an error, never crashes or reads
// past a buffer (AddressSanitizer under --config=fuzz); the scores of an
// export that loaded are probabilities.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/manifest.h"
#include "model/export_test_util.h"
#include "server/serving_model.h"
#include "tests/fuzz/fuzz_input.h"

namespace ps::fuzz {
namespace {

namespace fs = std::filesystem;

struct Exports {
  fs::path root;
  // The good export's manifest, as written.
  ExportManifest manifest;
};

const Exports& TheExports() {
  static const Exports* exports = [] {
    auto* made = new Exports;
    made->root = fs::temp_directory_path() /
                 ("ps_export_fuzzer_" + std::to_string(getpid()));
    fs::remove_all(made->root);
    model::HandmadeExport model(2);
    std::vector<uint64_t> keys;
    for (uint64_t key = 0; key < 64; ++key) keys.push_back(key * 104729);
    model.AddRows(keys);
    if (!model::WriteHandmadeExport((made->root / "good").string(), model)
             .ok() ||
        !model::WriteHandmadeExport((made->root / "base").string(), model)
             .ok()) {
      std::abort();
    }
    made->manifest = ReadExportManifest((made->root / "good").string()).value();
    std::atexit([] { fs::remove_all(TheExports().root); });
    return made;
  }();
  return *exports;
}

uint32_t Number32(FuzzInput& input) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | input.Choose(256);
  return value;
}

// A small number most of the time, any 32-bit one sometimes.
uint32_t Size(FuzzInput& input) {
  const uint32_t kind = input.Choose(4);
  if (kind == 0) return Number32(input);
  return input.Choose(kind == 1 ? 4 : 70);
}

void ChangeManifest(FuzzInput& input, ExportManifest& manifest) {
  ModelCard& card = *manifest.mutable_model();
  const int tables = manifest.tables_size();
  switch (input.Choose(14)) {
    case 0:
      card.set_fields(Size(input));
      break;
    case 1:
      card.set_dense_features(Size(input));
      break;
    case 2:
      card.set_embedding_dim(Size(input));
      break;
    case 3:
      card.set_dense_chunk_floats(Size(input));
      break;
    case 4:
      card.set_kind(static_cast<ModelCard::Kind>(input.Choose(5)));
      break;
    case 5:
      if (input.Choose(2) == 0 && card.hidden_size() > 0) {
        card.set_hidden(0, Size(input));
      } else {
        card.add_hidden(Size(input));
      }
      break;
    case 6:
      if (tables > 0) {
        manifest.mutable_tables(input.Choose(tables))
            ->mutable_spec()
            ->set_dim(Size(input));
      }
      break;
    case 7:
      if (tables > 0) {
        manifest.mutable_tables(input.Choose(tables))
            ->set_rows(uint64_t{Number32(input)} * input.Choose(3));
      }
      break;
    case 8:
      if (tables > 0) {
        ExportManifest::Table& table =
            *manifest.mutable_tables(input.Choose(tables));
        if (table.parts_size() > 0)
          table.set_parts(input.Choose(table.parts_size()), input.Bytes(40));
      }
      break;
    case 9:
      manifest.set_format_version(3);
      manifest.set_delta_index(1 + input.Choose(3));
      manifest.set_predecessor(input.Choose(2) == 0 ? "base" : input.Bytes(20));
      manifest.set_base(input.Choose(2) == 0 ? "base" : input.Bytes(20));
      manifest.set_predecessor_created_at(TheExports().manifest.created_at());
      break;
    case 10:
      manifest.set_num_shards(input.Choose(4));
      if (input.Choose(2) == 0) manifest.clear_slot_map();
      break;
    case 11:
      manifest.set_format(static_cast<ExportManifest::Format>(input.Choose(4)));
      break;
    case 12:
      card.set_input_layout(input.Bytes(60));
      break;
    case 13:
      if (tables > 1) {
        manifest.mutable_tables()->SwapElements(0, input.Choose(tables));
      } else if (tables == 1) {
        manifest.mutable_tables()->RemoveLast();
      }
      break;
  }
}

// Truncates a part or overwrites some of its bytes.
void DamagePart(FuzzInput& input, const fs::path& dir) {
  std::vector<fs::path> parts;
  for (const auto& table : TheExports().manifest.tables()) {
    for (const std::string& part : table.parts()) {
      if (!part.empty()) parts.push_back(dir / part);
    }
  }
  if (parts.empty()) return;
  const fs::path part = parts[input.Choose(parts.size())];
  std::error_code error;
  const uintmax_t size = fs::file_size(part, error);
  if (error || size == 0) return;
  const uintmax_t offset = Number32(input) % size;
  if (input.Choose(2) == 0) {
    fs::resize_file(part, offset, error);
    return;
  }
  std::fstream file(part, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  const std::string bytes = input.Bytes(16);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  namespace fs = std::filesystem;
  const fuzz::Exports& exports = fuzz::TheExports();
  fuzz::FuzzInput input(data, size);
  const fs::path dir = exports.root / "served";
  fs::remove_all(dir);
  fs::copy(exports.root / "good", dir, fs::copy_options::recursive);
  ExportManifest manifest = exports.manifest;
  const uint32_t changes = input.Choose(6);
  for (uint32_t c = 0; c < changes; ++c) fuzz::ChangeManifest(input, manifest);
  if (!WriteManifest(dir.string(), manifest).ok()) std::abort();
  if (input.Choose(3) == 0) fuzz::DamagePart(input, dir);

  model::ExportedModelOptions options;
  options.max_memory_bytes = input.Choose(2) == 0 ? 0 : size_t{1} << 26;
  // Room for a model many times the good one's, not for one that takes
  // the fuzzer's memory (the limit is tested in exported_model_test).
  options.max_dense_floats = 1 << 20;
  absl::StatusOr<std::unique_ptr<server::ServingModel>> model =
      server::ServingModel::Open(dir.string(), 1, options);
  if (!model.ok()) return 0;
  const std::vector<std::string> lines = {"1\ta\tb", "0\t" + input.Bytes(8)};
  absl::StatusOr<std::vector<float>> scores = (*model)->Predict(lines);
  if (scores.ok()) {
    for (float score : *scores) {
      if (!(score >= 0.0f && score <= 1.0f) && !std::isnan(score)) std::abort();
    }
  }
  std::vector<float> values;
  std::vector<bool> found;
  const std::vector<uint64_t> keys = {0, 104729, 7, ~uint64_t{0}};
  (*model)
      ->Lookup(model::HandmadeExport::kEmbedding, keys, &values, &found)
      .IgnoreError();
  return 0;
}
