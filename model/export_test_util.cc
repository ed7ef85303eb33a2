#include "model/export_test_util.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "kernels/ctr_model.h"
#include "model/dense_chunks.h"
#include "model/export_format.h"
#include "model/input/input_layout.h"

namespace ps::model {
namespace {

constexpr int kChunkFloats = 4;

kernels::ModelConfig Config() {
  kernels::ModelConfig config;
  config.kind = kernels::ModelKind::kWideDeep;
  config.fields = 2;
  config.dense_features = 0;
  config.embedding_dim = 2;
  config.hidden = {3};
  return config;
}

TableSpec Spec(const std::string& name, uint32_t dim) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  return spec;
}

}  // namespace

HandmadeExport::HandmadeExport(uint32_t num_shards) {
  manifest.set_format_version(2);
  manifest.set_created_at("2026-01-01T00:00:00Z");
  manifest.set_cut(1);
  manifest.set_routing_version(kRoutingVersion);
  manifest.set_num_shards(num_shards);
  manifest.set_model_name("m");
  *manifest.mutable_slot_map() = SlotMap::Initial(num_shards).ToSpec();
  ModelCard& card = *manifest.mutable_model();
  const kernels::ModelConfig config = Config();
  card.set_kind(ModelCard::WIDE_DEEP);
  card.set_fields(config.fields);
  card.set_dense_features(config.dense_features);
  card.set_embedding_dim(config.embedding_dim);
  for (int width : config.hidden) card.add_hidden(width);
  card.set_embedding_table(kEmbedding);
  card.set_wide_table(kWide);
  card.set_dense_chunk_floats(kChunkFloats);
  card.set_input_layout(LayoutText(
      MakeInputLayout("tsv", false, "label,cat*2", "|", "sum", "").value()));
  *manifest.add_tables()->mutable_spec() =
      Spec(kEmbedding, config.embedding_dim);
  *manifest.add_tables()->mutable_spec() = Spec(kWide, 1);
  const std::vector<kernels::DenseTensorSpec> tensors =
      kernels::DenseTensors(config);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::string name = absl::StrCat("m.dense.", t);
    card.add_dense_tables(name);
    *manifest.add_tables()->mutable_spec() =
        Spec(name, DenseChunkFloats(tensors[t], kChunkFloats));
  }
  for (const ExportManifest::Table& table : manifest.tables())
    rows[table.spec().name()].resize(num_shards);
}

std::vector<float> HandmadeExport::Row(const std::string& table, uint64_t key,
                                       int dim, int salt) {
  std::vector<float> row(dim);
  const float base = static_cast<float>(table.size() % 7) * 0.01f +
                     static_cast<float>(key % 1000) * 0.001f + salt;
  for (int d = 0; d < dim; ++d) row[d] = base + 0.1f * d;
  return row;
}

void HandmadeExport::AddRows(const std::vector<uint64_t>& keys) {
  const SlotMap map = RecordedSlotMap(manifest);
  const kernels::ModelConfig config = Config();
  for (uint64_t key : keys) {
    const uint32_t shard = map.ShardForKey(key);
    rows[kEmbedding][shard][key] = Row(kEmbedding, key, config.embedding_dim);
    rows[kWide][shard][key] = Row(kWide, key, 1);
  }
  const std::vector<kernels::DenseTensorSpec> tensors =
      kernels::DenseTensors(config);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::string name = absl::StrCat("m.dense.", t);
    const int dim = DenseChunkFloats(tensors[t], kChunkFloats);
    for (uint64_t chunk :
         DenseChunkKeys(DenseChunks(tensors[t], kChunkFloats))) {
      rows[name][map.ShardForKey(chunk)][chunk] = Row(name, chunk, dim);
    }
  }
}

absl::Status WriteHandmadeExport(const std::string& dir,
                                 const HandmadeExport& model) {
  ExportManifest manifest = model.manifest;
  for (ExportManifest::Table& table : *manifest.mutable_tables()) {
    table.clear_parts();
    table.set_rows(0);
    table.set_bytes(0);
    table.set_deleted_rows(0);
    const auto found = model.rows.find(table.spec().name());
    for (uint32_t shard = 0; shard < manifest.num_shards(); ++shard) {
      if (found == model.rows.end() || found->second.size() <= shard ||
          found->second[shard].empty()) {
        table.add_parts("");
        continue;
      }
      const std::string part =
          absl::StrCat(table.spec().name(), "/part-", shard, "-of-",
                       manifest.num_shards(), ".sst");
      // In the store's order: by slot, then key.
      std::vector<uint64_t> keys;
      for (const auto& [key, row] : found->second[shard]) keys.push_back(key);
      std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) {
        return std::make_pair(SlotForKey(a), a) <
               std::make_pair(SlotForKey(b), b);
      });
      ExportTableWriter writer(dir + "/" + part, /*half=*/false);
      for (uint64_t key : keys) {
        const std::vector<float>& row = found->second[shard].at(key);
        RETURN_IF_ERROR(row.empty() ? writer.Delete(key)
                                    : writer.Put(key, row));
      }
      RETURN_IF_ERROR(writer.Finish());
      table.add_parts(part);
      table.set_rows(table.rows() + writer.rows());
      table.set_bytes(table.bytes() + writer.bytes());
      table.set_deleted_rows(table.deleted_rows() + writer.deleted_rows());
    }
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  return WriteManifest(dir, manifest);
}

}  // namespace ps::model
