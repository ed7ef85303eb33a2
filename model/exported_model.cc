#include "model/exported_model.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/huge_pages.h"
#include "base/key_index.h"
#include "base/manifest.h"
#include "base/routing.h"
#include "base/slot_map.h"
#include "base/status_macros.h"
#include "model/builtin_specs.h"
#include "model/dense_chunks.h"
#include "model/export_format.h"
#include "rocksdb/cache.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/table.h"

namespace ps::model {

// A table read into memory (the chain applied): key -> the offset of its
// row in `rows`. Immutable once read; shared by the models of one export
// (Open's share_from).
// On huge pages (base/huge_pages.h) unless switched off: keys are looked up
// at random.
struct ExportedModel::TableInMemory {
  explicit TableInMemory(bool huge_pages)
      : index(huge_pages), rows(HugePageAllocator<float>(huge_pages)) {}
  KeyIndex index;
  std::vector<float, HugePageAllocator<float>> rows;
};

// One table of the export: its spec, and per export of its chain (newest
// first) per shard its part (none when the shard wrote no row of it).
struct ExportedModel::Table {
  explicit Table(const ExportManifest::Table& entry)
      : spec(entry.spec()), initializer(entry.spec().initializer()) {}
  struct Layer {
    // Which shard's part holds a key's row in this export.
    const SlotMap* slot_map = nullptr;
    // Format version 1 keyed rows by the key's 8 bytes alone.
    bool keys_alone = false;
    std::vector<std::unique_ptr<rocksdb::SstFileReader>> parts;
    std::vector<std::unique_ptr<rocksdb::Iterator>> iterators;
  };
  TableSpec spec;
  Initializer initializer;
  bool half = false;
  std::vector<Layer> layers;
  // Read into memory, or null.
  std::shared_ptr<const TableInMemory> in_memory;
};

ExportedModel::~ExportedModel() = default;

namespace {

// `manifest`'s table `name`, or DATA_LOSS naming `dir`.
absl::StatusOr<const ExportManifest::Table*> FindTable(
    const ExportManifest& manifest, const std::string& dir,
    const std::string& name) {
  for (const ExportManifest::Table& entry : manifest.tables()) {
    if (entry.spec().name() == name) return &entry;
  }
  return absl::DataLossError(
      absl::StrCat(dir, " has no table ", name, " of its model"));
}

// Whether `part`, a part's name in a manifest, names a file inside the
// export's directory: relative, with no "." or ".." step and no empty one.
bool InsideExport(const std::string& part) {
  if (part.empty() || part.front() == '/') return false;
  for (absl::string_view step : absl::StrSplit(part, '/')) {
    if (step.empty() || step == "." || step == "..") return false;
  }
  return true;
}

// OK when the card of the export in `dir` describes a model this build can
// score within the limits of exported_model.h (a spec's, once planned);
// DATA_LOSS saying what is wrong otherwise.
absl::Status CheckCard(const ExportManifest& manifest, const std::string& dir) {
  const ModelCard& card = manifest.model();
  auto refuse = [&](auto&&... what) {
    return absl::DataLossError(absl::StrCat(dir, ": ", what...));
  };
  if (!ModelCard::Kind_IsValid(card.kind())) {
    return refuse("a model of kind ", card.kind(), ", which this build lacks");
  }

  if (!ExportManifest::Format_IsValid(manifest.format())) {
    return refuse("weights in format ", manifest.format(),
                  ", which this build does not read");
  }
  if (card.fields() + card.dense_features() < 1 ||
      card.fields() > kMaxExportFields ||
      card.dense_features() > kMaxExportFields) {
    return refuse("a model of ", card.fields(), " fields and ",
                  card.dense_features(), " dense features (at least one, ",
                  "at most ", kMaxExportFields, " of each)");
  }
  if (card.dense_chunk_floats() < 1) {
    return refuse("dense tensors in chunks of ", card.dense_chunk_floats(),
                  " floats (at least 1)");
  }
  if (card.max_values_per_field() > std::numeric_limits<int32_t>::max()) {
    return refuse("histories of the ", card.max_values_per_field(),
                  " most recent values (at most 2^31 - 1)");
  }
  // A spec's tables and tensors are checked once it is planned.
  if (card.kind() == ModelCard::SPEC) return absl::OkStatus();
  if (card.wide_table().empty()) return refuse("a model with no wide table");
  const bool deep = card.kind() != ModelCard::LR;
  // (A wide_deep or deepfm of no fields has no embeddings.)
  if (deep && card.fields() > 0 &&
      (card.embedding_table().empty() || card.embedding_dim() < 1 ||
       card.embedding_dim() > kMaxExportDim)) {
    return refuse("a deep model whose embedding table \"",
                  card.embedding_table(), "\" has dim ", card.embedding_dim(),
                  " (1 to ", kMaxExportDim, ")");
  }
  if (card.hidden_size() > kMaxExportLayers) {
    return refuse(card.hidden_size(), " hidden layers (at most ",
                  kMaxExportLayers, ")");
  }
  for (uint32_t width : card.hidden()) {
    if (width < 1 || width > kMaxExportFields) {
      return refuse("a hidden layer of ", width, " units (1 to ",
                    kMaxExportFields, ")");
    }
  }
  return absl::OkStatus();
}

// The card's model spec and its tables' names on the servers, in the
// spec's order: a SPEC card's own, else the built-in of its kind.
absl::StatusOr<std::pair<model::ModelSpec, std::vector<std::string>>>
SpecOfCard(const ModelCard& card, const InputLayout& layout,
           const std::string& dir) {
  std::vector<std::string> tables;
  if (card.kind() == ModelCard::SPEC) {
    absl::StatusOr<model::ParsedModelSpec> parsed =
        model::ParseModelSpec(card.model_spec());
    if (!parsed.ok()) {
      return absl::DataLossError(absl::StrCat(
          dir, ": the card's model spec: ", parsed.status().message()));
    }
    tables.assign(card.sparse_tables().begin(), card.sparse_tables().end());
    if (static_cast<int>(tables.size()) != parsed->spec.table_size()) {
      return absl::DataLossError(
          absl::StrCat(dir, ": the card names ", tables.size(),
                       " tables, its spec has ", parsed->spec.table_size()));
    }
    return std::make_pair(std::move(parsed->spec), std::move(tables));
  }
  model::BuiltinOptions options;
  options.embedding_dim = std::max<int>(1, card.embedding_dim());
  options.hidden.assign(card.hidden().begin(), card.hidden().end());
  options.crosses = layout.crosses;
  options.pooling = layout.multi_pooling;
  options.labels = layout.label_names;
  const char* name = card.kind() == ModelCard::LR       ? "lr"
                     : card.kind() == ModelCard::DEEPFM ? "deepfm"
                                                        : "wide_deep";
  absl::StatusOr<model::ModelSpec> spec =
      model::BuiltinModelSpec(name, ColumnUses(layout), options);
  if (!spec.ok()) {
    return absl::DataLossError(
        absl::StrCat(dir, ": a ", name, " card: ", spec.status().message()));
  }
  for (const model::Table& table : spec->table()) {
    tables.push_back(table.name() == "embedding" ? card.embedding_table()
                                                 : card.wide_table());
  }
  return std::make_pair(*std::move(spec), std::move(tables));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExportedModel>> ExportedModel::Open(
    const std::string& dir, const ExportedModelOptions& model_options,
    const ExportedModel* share_from) {
  rocksdb::Options options;
  if (model_options.block_cache != nullptr) {
    rocksdb::BlockBasedTableOptions table_options;
    table_options.block_cache = model_options.block_cache;
    options.table_factory.reset(
        rocksdb::NewBlockBasedTableFactory(table_options));
  }
  auto model = std::unique_ptr<ExportedModel>(new ExportedModel);
  model->huge_pages_ = model_options.huge_pages;
  RETURN_IF_ERROR(model->ReadChain(dir));
  ASSIGN_OR_RETURN(auto spec_and_tables, model->PlanModel(dir));
  const auto& [spec, table_names] = spec_and_tables;
  RETURN_IF_ERROR(model->OpenSparseTables(dir, spec, table_names, model_options,
                                          options, share_from));
  RETURN_IF_ERROR(model->ReadDenseTensors(dir, model_options, options));
  return model;
}

absl::Status ExportedModel::ReadChain(const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<std::string> chain, ExportChain(dir));
  std::reverse(chain.begin(), chain.end());
  for (const std::string& link : chain) {
    ASSIGN_OR_RETURN(ExportManifest manifest, ReadExportManifest(link));
    if (manifest.routing_version() != kRoutingVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(link, " was routed with version ",
                       manifest.routing_version(), ", not ", kRoutingVersion));
    }
    slot_maps_.push_back(std::make_unique<SlotMap>(RecordedSlotMap(manifest)));
    chain_.push_back({link, std::move(manifest)});
  }
  manifest_ = chain_.front().manifest;
  return CheckCard(manifest_, dir);
}

absl::StatusOr<std::pair<model::ModelSpec, std::vector<std::string>>>
ExportedModel::PlanModel(const std::string& dir) {
  const ModelCard& card = manifest_.model();
  absl::StatusOr<InputLayout> layout = ParseLayoutText(card.input_layout());
  if (!layout.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " reads input laid out as \"", card.input_layout(),
        "\", which this build does not read: ", layout.status().message()));
  }
  if (layout->fields() != static_cast<int>(card.fields()) ||
      layout->dense_features() != static_cast<int>(card.dense_features())) {
    return absl::DataLossError(
        absl::StrCat(dir, ": the model has ", card.fields(), " fields and ",
                     card.dense_features(), " dense features, its layout \"",
                     card.input_layout(), "\" ", layout->fields(), " and ",
                     layout->dense_features()));
  }
  layout_ = *std::move(layout);
  if (card.max_values_per_field() > 0)
    layout_.max_sequence_values = static_cast<int>(card.max_values_per_field());
  ASSIGN_OR_RETURN(auto spec_and_tables, SpecOfCard(card, layout_, dir));
  absl::StatusOr<model::ModelPlan> plan =
      PlanForLayout({spec_and_tables.first, {}}, layout_);
  if (!plan.ok()) {
    return absl::DataLossError(
        absl::StrCat(dir, ": its model does not plan over its layout: ",
                     plan.status().message()));
  }
  plan_ = std::make_unique<model::ModelPlan>(*std::move(plan));
  InputLayout fitted = layout_;
  if (!LayoutForPlan(*plan_, &fitted).ok() ||
      fitted.crosses != layout_.crosses) {
    return absl::DataLossError(
        absl::StrCat(dir, ": its layout's crosses are not its model spec's"));
  }
  return spec_and_tables;
}

absl::Status ExportedModel::OpenSparseTables(
    const std::string& dir, const model::ModelSpec& spec,
    const std::vector<std::string>& table_names,
    const ExportedModelOptions& model_options, const rocksdb::Options& options,
    const ExportedModel* share_from) {
  // One table per stored table: a table stored with another is in the
  // other's rows (the card names the other's server table for it).
  for (const StoredTable& stored : plan_->stored_tables()) {
    const int first = stored.tables[0];
    for (int t : stored.tables) {
      if (table_names[t] != table_names[first]) {
        return absl::DataLossError(absl::StrCat(
            dir, ": the card keeps the model's ", spec.table(t).name(),
            " in table ", table_names[t], ", not in ", table_names[first],
            " with ", spec.table(first).name()));
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Table> table,
                     OpenTable(table_names[first], options));
    if (static_cast<int>(table->spec.dim()) != stored.dim) {
      return absl::DataLossError(
          absl::StrCat(dir, ": table ", table_names[first], " has rows of ",
                       table->spec.dim(), " floats, the model's ",
                       spec.table(first).name(), " ", stored.dim));
    }
    sparse_.push_back(std::move(table));
  }
  // Each table of the spec as if the servers kept it alone.
  for (int t = 0; t < spec.table_size(); ++t) {
    const StoredTable& stored = plan_->stored_tables()[plan_->StoredTableOf(t)];
    TableSpec alone = sparse_[plan_->StoredTableOf(t)]->spec;
    alone.set_dim(spec.table(t).dim());
    InitializerSpec initializer = alone.initializer();
    OptimizerSpec optimizer = alone.optimizer();
    alone.mutable_initializer()->clear_later_columns();
    alone.mutable_optimizer()->clear_later_columns();
    for (size_t i = 1; i < stored.tables.size(); ++i) {
      if (stored.tables[i] != t) continue;
      if (static_cast<int>(i) <= initializer.later_columns_size()) {
        *alone.mutable_initializer() =
            initializer.later_columns(i - 1).initializer();
      }
      if (static_cast<int>(i) <= optimizer.later_columns_size()) {
        *alone.mutable_optimizer() = optimizer.later_columns(i - 1).optimizer();
      }
    }
    table_specs_.push_back(std::move(alone));
  }
  // The tables in the spec's order, as far as the budget goes.
  size_t budget = model_options.max_memory_bytes;
  for (const std::unique_ptr<Table>& table : sparse_) {
    const Table* shared = nullptr;
    if (share_from != nullptr) {
      for (const std::unique_ptr<Table>& other : share_from->sparse_) {
        if (other->spec.name() == table->spec.name()) shared = other.get();
      }
    }
    RETURN_IF_ERROR(MaybeReadIntoMemory(*table, budget, shared));
    if (table->in_memory == nullptr) break;
    const size_t used = table->in_memory->rows.size() * sizeof(float) +
                        table->in_memory->index.bytes();
    budget = budget > used ? budget - used : 0;
  }
  return absl::OkStatus();
}

absl::Status ExportedModel::ReadDenseTensors(
    const std::string& dir, const ExportedModelOptions& model_options,
    const rocksdb::Options& options) {
  const ModelCard& card = manifest_.model();
  const std::vector<kernels::DenseTensorSpec>& tensors = plan_->dense_tensors();
  uint64_t dense_floats = 0;
  for (const kernels::DenseTensorSpec& tensor : tensors)
    dense_floats += tensor.size();
  if (dense_floats > model_options.max_dense_floats) {
    return absl::DataLossError(absl::StrCat(
        dir, ": a model of ", dense_floats, " dense parameters (at most ",
        model_options.max_dense_floats, ")"));
  }
  if (static_cast<int>(tensors.size()) != card.dense_tables_size()) {
    return absl::DataLossError(absl::StrCat(
        dir, ": the model needs ", tensors.size(),
        " dense tensors, the export has ", card.dense_tables_size()));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    ASSIGN_OR_RETURN(std::unique_ptr<Table> table,
                     OpenTable(card.dense_tables(t), options));
    const int chunk = DenseChunkFloats(
        tensors[t], static_cast<int>(card.dense_chunk_floats()));
    const std::vector<uint64_t> keys = DenseChunkKeys(
        DenseChunks(tensors[t], static_cast<int>(card.dense_chunk_floats())));
    if (static_cast<int>(table->spec.dim()) != chunk) {
      return absl::DataLossError(
          absl::StrCat(dir, ": table ", table->spec.name(), " has rows of ",
                       table->spec.dim(), " floats, the model ", chunk));
    }
    dense_.emplace_back(keys.size() * chunk);
    RETURN_IF_ERROR(Lookup(*table, keys, dense_.back().data()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExportedModel::Table>> ExportedModel::OpenTable(
    const std::string& name, const rocksdb::Options& options) {
  ASSIGN_OR_RETURN(const ExportManifest::Table* newest,
                   FindTable(manifest_, chain_.front().dir, name));
  if (newest->spec().dim() < 1 || newest->spec().dim() > kMaxExportDim) {
    return absl::DataLossError(absl::StrCat(
        chain_.front().dir, ": table ", name, " has rows of ",
        newest->spec().dim(), " floats (1 to ", kMaxExportDim, ")"));
  }
  auto table = std::make_unique<Table>(*newest);
  table->half = manifest_.format() == ExportManifest::FP16;
  for (size_t i = 0; i < chain_.size(); ++i) {
    const Link& link = chain_[i];
    ASSIGN_OR_RETURN(const ExportManifest::Table* entry,
                     FindTable(link.manifest, link.dir, name));
    if (entry->spec().dim() != table->spec.dim()) {
      return absl::DataLossError(absl::StrCat(
          link.dir, ": table ", name, " has rows of ", entry->spec().dim(),
          " floats, the delta after it ", table->spec.dim()));
    }
    if (link.manifest.format() != manifest_.format()) {
      return absl::DataLossError(absl::StrCat(
          link.dir,
          " holds weights in another format than the delta after it"));
    }
    Table::Layer& layer = table->layers.emplace_back();
    layer.slot_map = slot_maps_[i].get();
    layer.keys_alone = link.manifest.format_version() == 1;
    // The parts hold the rows the manifest counts, no more: what is read
    // into memory is sized from the count.
    uint64_t rows = 0;
    for (const std::string& part : entry->parts()) {
      if (part.empty()) {
        layer.parts.push_back(nullptr);
        layer.iterators.push_back(nullptr);
        continue;
      }
      if (!InsideExport(part)) {
        return absl::DataLossError(
            absl::StrCat(link.dir, ": table ", name, " names a part \"", part,
                         "\" outside the export's directory"));
      }
      auto reader = std::make_unique<rocksdb::SstFileReader>(options);
      rocksdb::Status opened = reader->Open(link.dir + "/" + part);
      if (!opened.ok()) {
        return absl::DataLossError(absl::StrCat("cannot read ", link.dir, "/",
                                                part, ": ", opened.ToString()));
      }
      rows += reader->GetTableProperties()->num_entries;
      layer.iterators.emplace_back(reader->NewIterator(rocksdb::ReadOptions()));
      layer.parts.push_back(std::move(reader));
    }
    if (rows != entry->rows()) {
      return absl::DataLossError(absl::StrCat(
          link.dir, ": table ", name, " holds ", rows,
          " rows in its parts, its manifest says ", entry->rows()));
    }
  }
  return table;
}

absl::Status ExportedModel::MaybeReadIntoMemory(Table& table, size_t max_bytes,
                                                const Table* shared) {
  if (shared != nullptr && shared->in_memory != nullptr) {
    table.in_memory = shared->in_memory;
    return absl::OkStatus();
  }
  const size_t dim = table.spec.dim();
  const size_t rows = ChainRows(table);
  if (max_bytes == 0 ||
      rows * dim * sizeof(float) + KeyIndex::ReservedBytes(rows) > max_bytes) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(table.in_memory, ReadWhole(table));
  return absl::OkStatus();
}

uint64_t ExportedModel::ChainRows(const Table& table) const {
  uint64_t rows = 0;
  for (const Link& link : chain_) {
    for (const ExportManifest::Table& entry : link.manifest.tables()) {
      if (entry.spec().name() == table.spec.name()) rows += entry.rows();
    }
  }
  return rows;
}

absl::StatusOr<std::shared_ptr<const ExportedModel::TableInMemory>>
ExportedModel::ReadWhole(const Table& table) const {
  const size_t dim = table.spec.dim();
  auto in_memory = std::make_shared<TableInMemory>(huge_pages_);
  const size_t chain_rows = ChainRows(table);
  in_memory->index.Reserve(chain_rows);
  // A chain's rows are counted once per export they are in: more than it
  // holds, but what is reserved and never written takes no memory.
  in_memory->rows.reserve(chain_rows * dim);
  const size_t value_bytes = ExportRowBytes(dim, table.half);
  // Oldest export first: a newer row, or deletion, replaces an older one.
  for (auto layer = table.layers.rbegin(); layer != table.layers.rend();
       ++layer) {
    for (size_t shard = 0; shard < layer->iterators.size(); ++shard) {
      rocksdb::Iterator* it = layer->iterators[shard].get();
      if (it == nullptr) continue;
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const rocksdb::Slice key = it->key();
        uint64_t row_key = 0;
        if (layer->keys_alone && key.size() == sizeof(uint64_t)) {
          std::memcpy(&row_key, key.data(), sizeof(row_key));
        } else if (!layer->keys_alone && key.size() == SlotOrderedKey::kBytes) {
          row_key = SlotOrderedKey::Decode(key.data());
        } else {
          return absl::DataLossError(absl::StrCat("table ", table.spec.name(),
                                                  ": a key of ", key.size(),
                                                  " bytes"));
        }
        // A row in a part of a shard that does not own its slot (a move
        // was under way) is not the model's: its owner's part decides, as
        // a lookup on disk reads it.
        if (layer->slot_map->ShardForKey(row_key) != shard) continue;
        const rocksdb::Slice value = it->value();
        if (value.empty()) {
          in_memory->index.Erase(row_key);  // its row's floats stay unused
          continue;
        }
        if (value.size() != value_bytes) {
          return absl::DataLossError(absl::StrCat(
              "table ", table.spec.name(), " key ", row_key, ": a row of ",
              value.size(), " bytes, expected ", value_bytes));
        }
        const auto [offset, added] =
            in_memory->index.TryEmplace(row_key, in_memory->rows.size());
        if (added) in_memory->rows.resize(in_memory->rows.size() + dim);
        DecodeExportRow(absl::string_view(value.data(), value.size()),
                        table.half, dim, in_memory->rows.data() + offset);
      }
      if (!it->status().ok()) {
        return absl::DataLossError(absl::StrCat("reading table ",
                                                table.spec.name(), ": ",
                                                it->status().ToString()));
      }
    }
  }
  return in_memory;
}

absl::Status ExportedModel::ReadTable(int table, std::vector<uint64_t>* keys,
                                      std::vector<float>* rows) {
  if (table < 0 || table >= static_cast<int>(table_specs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no table ", table, " (the model has ", table_specs_.size(), ")"));
  }
  const Table& read = *sparse_[plan_->StoredTableOf(table)];
  std::shared_ptr<const TableInMemory> whole = read.in_memory;
  if (whole == nullptr) {
    ASSIGN_OR_RETURN(whole, ReadWhole(read));
  }
  // The table's columns of the stored rows (all of them, unless it is
  // stored with another).
  const size_t first_column = plan_->FirstColumnOf(table);
  const size_t dim = plan_->table_dim(table);
  keys->clear();
  rows->clear();
  keys->reserve(whole->index.size());
  rows->reserve(whole->index.size() * dim);
  whole->index.ForEach([&](uint64_t key, uint64_t offset) {
    keys->push_back(key);
    const auto row = whole->rows.begin() + offset + first_column;
    rows->insert(rows->end(), row, row + dim);
  });
  return absl::OkStatus();
}

const TableSpec& ExportedModel::table_spec(int table) const {
  return table_specs_[table];
}

uint64_t ExportedModel::stored_rows(int table) const {
  return ChainRows(*sparse_[plan_->StoredTableOf(table)]);
}

absl::Status ExportedModel::Lookup(Table& table,
                                   absl::Span<const uint64_t> keys, float* out,
                                   std::vector<bool>* found_keys) {
  if (found_keys != nullptr) found_keys->assign(keys.size(), false);
  const size_t dim = table.spec.dim();
  const size_t value_bytes = ExportRowBytes(dim, table.half);
  if (table.in_memory != nullptr) {
    // Rows sit at random in memory: each key's index slot is prefetched
    // kAhead keys before it is probed, and its row kAhead keys before it
    // is copied.
    constexpr size_t kAhead = 8;
    const TableInMemory& in_memory = *table.in_memory;
    const float* sources[kAhead] = {};
    const size_t count = keys.size();
    for (size_t i = 0; i < count + kAhead; ++i) {
      if (i >= kAhead) {  // copies key i - kAhead's row
        const size_t k = i - kAhead;
        float* row = out + k * dim;
        const float* source = sources[k % kAhead];
        if (source == nullptr) {
          table.initializer.Fill(keys[k], absl::MakeSpan(row, dim));
        } else {
          if (found_keys != nullptr) (*found_keys)[k] = true;
          std::memcpy(row, source, dim * sizeof(float));
        }
      }
      if (i >= count) continue;
      if (i + kAhead < count) in_memory.index.Prefetch(keys[i + kAhead]);
      const std::optional<uint64_t> found = in_memory.index.Find(keys[i]);
      const float* source =
          found.has_value() ? in_memory.rows.data() + *found : nullptr;
      if (source != nullptr) __builtin_prefetch(source);
      sources[i % kAhead] = source;
    }
    return absl::OkStatus();
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    float* row = out + i * dim;
    // The newest export that holds the key decides: its row, or an empty
    // value for a row a delta deleted.
    std::optional<rocksdb::Slice> value;
    for (Table::Layer& layer : table.layers) {
      rocksdb::Iterator* it =
          layer.iterators[layer.slot_map->ShardForKey(keys[i])].get();
      if (it == nullptr) continue;
      const SlotOrderedKey slot_ordered(keys[i]);
      const rocksdb::Slice key =
          layer.keys_alone
              ? rocksdb::Slice(reinterpret_cast<const char*>(&keys[i]),
                               sizeof(uint64_t))
              : rocksdb::Slice(slot_ordered.data(), slot_ordered.size());
      it->Seek(key);
      if (!it->status().ok()) {
        return absl::DataLossError(absl::StrCat("reading table ",
                                                table.spec.name(), ": ",
                                                it->status().ToString()));
      }
      if (it->Valid() && it->key() == key) {
        value = it->value();
        break;
      }
    }
    if (!value.has_value() || value->empty()) {
      table.initializer.Fill(keys[i], absl::MakeSpan(row, dim));
      continue;
    }
    if (found_keys != nullptr) (*found_keys)[i] = true;
    if (value->size() != value_bytes) {
      return absl::DataLossError(absl::StrCat(
          "table ", table.spec.name(), " key ", keys[i], ": a row of ",
          value->size(), " bytes, expected ", value_bytes));
    }
    DecodeExportRow(absl::string_view(value->data(), value->size()), table.half,
                    dim, row);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ExportedModel::LookupRows(const std::string& table,
                                              absl::Span<const uint64_t> keys,
                                              std::vector<float>* values,
                                              std::vector<bool>* found) {
  Table* looked_up = nullptr;
  std::vector<std::string> names;
  for (const std::unique_ptr<Table>& candidate : sparse_) {
    if (candidate->spec.name() == table) looked_up = candidate.get();
    names.push_back(candidate->spec.name());
  }
  if (looked_up == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "the model has no table ", table,
        " to look rows up in (its sparse tables: ", absl::StrJoin(names, ", "),
        ")"));
  }
  const int dim = static_cast<int>(looked_up->spec.dim());
  values->resize(keys.size() * dim);
  RETURN_IF_ERROR(Lookup(*looked_up, keys, values->data(), found));
  return dim;
}

absl::Status ExportedModel::Fetch(BatchInputs* inputs) {
  // BatchInputs::Prepare sized the row buffers; pooled rows follow these.
  for (size_t t = 0; t < sparse_.size(); ++t) {
    RETURN_IF_ERROR(
        Lookup(*sparse_[t], inputs->StoredKeys(t), inputs->StoredRows(t)));
  }
  inputs->PoolRows();
  inputs->dense_params.clear();
  inputs->lent_dense_params = &dense_;
  return absl::OkStatus();
}

}  // namespace ps::model
