// File: model/exported_model.h
//
// ExportedModel opens an export (ps_admin export; ExportManifest in
// proto/checkpoint.proto) for scoring with no shard running: its model spec
// is the card's (a built-in's for lr, wide_deep and deepfm cards), its
// dense tensors are read whole at Open(), and a batch's rows of each sparse
// table are looked up in the SST part of the shard each key routes to (a
// key in
// no part was never pushed, and gets its table's deterministic initial
// row, as a shard would answer it). A delta export is read over the
// exports it follows back to its base: a key's row is the newest export's
// that holds it (a deletion there reads as never pushed), so a lookup
// seeks once per export of the chain at most. ps_predict scores click
// logs with it, ps_serve serves it.
//
// Not thread-safe (its SST iterators are shared): one scorer per object.

#ifndef PS_MODEL_EXPORTED_MODEL_H_
#define PS_MODEL_EXPORTED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/initializer.h"
#include "base/slot_map.h"
#include "model/batch_inputs.h"
#include "model/input/input_layout.h"
#include "model/model_plan.h"
#include "proto/checkpoint.pb.h"

namespace rocksdb {
class Cache;
class Iterator;
struct Options;
class SstFileReader;
}  // namespace rocksdb

namespace ps::model {

// What an export may describe (ExportedModel::Open refuses more, as a
// manifest damaged or written by hand): fields, dense features and units of
// a hidden layer; floats of a table's row; hidden layers.
inline constexpr uint32_t kMaxExportFields = 1 << 16;
inline constexpr uint32_t kMaxExportDim = 1 << 16;
inline constexpr int kMaxExportLayers = 64;

struct ExportedModelOptions {
  // Caches the parts' blocks (and may be shared by several models). Default
  // (none): RocksDB's default per reader.
  std::shared_ptr<rocksdb::Cache> block_cache;
  // The embedding and wide tables are read into memory at Open(), over the
  // whole chain of a delta, when their rows fit in this many bytes (with
  // 21-43 bytes of index per row): a lookup is then a hash probe instead
  // of a seek in each export of the chain. 0: never. Default: 1 GiB.
  size_t max_memory_bytes = size_t{1} << 30;
  // The dense parameters are read whole into memory: a model with more
  // than this many is refused. Default: 2^28 (1 GiB of floats).
  uint64_t max_dense_floats = uint64_t{1} << 28;
  // The tables read into memory lie on transparent huge pages
  // (base/huge_pages.h): fewer TLB misses on random lookups. false: the
  // heap's, not advised onto huge pages. Tables shared from another model
  // (Open's share_from) keep the kind they were read with; ReadTable()'s
  // whole-table reads use this one. Default: true.
  bool huge_pages = true;
};

class ExportedModel {
 public:
  // NOT_FOUND without a manifest; DATA_LOSS for a manifest or part that
  // does not read, or that does not agree with the rest: a card beyond the
  // limits above, a table whose rows are not the card's size, a part named
  // outside `dir` or holding another count of rows than the manifest says;
  // FAILED_PRECONDITION for a model this build cannot score
  // (another input layout or routing version). `share_from`, if given, is
  // a model of the same export opened before (and must outlive nothing:
  // what it read into memory is shared, immutable): its tables in memory
  // are used rather than read again.
  static absl::StatusOr<std::unique_ptr<ExportedModel>> Open(
      const std::string& dir,
      const ExportedModelOptions& options = ExportedModelOptions(),
      const ExportedModel* share_from = nullptr);
  ~ExportedModel();

  // The manifest of the export opened (for a delta, the delta's).
  const ExportManifest& manifest() const { return manifest_; }
  // The model the export holds, planned over its layout (a model::
  // ModelGraph runs it).
  const model::ModelPlan& plan() const { return *plan_; }
  // The layout of the click logs it was trained on.
  const InputLayout& layout() const { return layout_; }

  // Fills the rows of `inputs` (made with plan() and layout(), and
  // prepared; see batch_inputs.h), pools them, and lends it the dense
  // parameters (BatchInputs::lent_dense_params: this model must outlive
  // the step).
  absl::Status Fetch(BatchInputs* inputs);

  // `keys`' rows of `table` (one of the sparse tables, by its name on the
  // servers) into `values` (dim floats per key), whether each was in the
  // export into `found` (if not, its initial row); returns the table's dim.
  // NOT_FOUND, naming the tables there are, for another table.
  absl::StatusOr<int> LookupRows(const std::string& table,
                                 absl::Span<const uint64_t> keys,
                                 std::vector<float>* values,
                                 std::vector<bool>* found);

  // Every row the export holds of the spec's table `table` (its index in
  // plan().spec()), the chain of a delta applied: keys, and dim floats per
  // key in `rows`, in no particular order. Reads the table whole (from
  // memory when Open() read it there). INVALID_ARGUMENT for no such table;
  // DATA_LOSS for a part that does not read.
  absl::Status ReadTable(int table, std::vector<uint64_t>* keys,
                         std::vector<float>* rows);
  // The spec's table `table` as the export declares it (its server table's
  // name; its own dim, initializer and optimizer, also when it is stored
  // with another table).
  const TableSpec& table_spec(int table) const;
  // Rows the exports of the chain store of the spec's table `table` (of
  // the server table that holds it), deletions and rows a newer export
  // replaces included: at least as many as ReadTable() gives, known
  // without reading any.
  uint64_t stored_rows(int table) const;
  // The plan's dense tensor `tensor` (plan().dense_tensors()), its rows x
  // cols floats then padding to whole chunks.
  const std::vector<float>& dense_tensor(int tensor) const {
    return dense_[tensor];
  }

 private:
  struct Table;
  // A table read whole into memory (exported_model.cc).
  struct TableInMemory;
  // An export of the chain read, newest first.
  struct Link {
    std::string dir;
    ExportManifest manifest;
  };
  ExportedModel() = default;
  // Reads the manifests of `dir`'s chain (a delta's exports back to its
  // base) into chain_, slot_maps_ and manifest_.
  absl::Status ReadChain(const std::string& dir);
  // Reads the layout and plans the model of manifest_ into layout_ and
  // plan_; its spec and the export's name of each of the spec's tables.
  absl::StatusOr<std::pair<model::ModelSpec, std::vector<std::string>>>
  PlanModel(const std::string& dir);
  // Opens the sparse tables into sparse_, reading them into memory in the
  // spec's order as far as `model_options`' budget goes.
  absl::Status OpenSparseTables(const std::string& dir,
                                const model::ModelSpec& spec,
                                const std::vector<std::string>& table_names,
                                const ExportedModelOptions& model_options,
                                const rocksdb::Options& options,
                                const ExportedModel* share_from);
  // Reads every dense tensor of the plan into dense_.
  absl::Status ReadDenseTensors(const std::string& dir,
                                const ExportedModelOptions& model_options,
                                const rocksdb::Options& options);
  // Opens table `name` in every export of the chain.
  absl::StatusOr<std::unique_ptr<Table>> OpenTable(
      const std::string& name, const rocksdb::Options& options);
  // Reads `table` into memory (the chain applied oldest first) if its rows
  // fit in `max_bytes`, or shares `shared`'s.
  absl::Status MaybeReadIntoMemory(Table& table, size_t max_bytes,
                                   const Table* shared);
  // Rows of `table` over every export of the chain, deletions included (at
  // least as many as it holds).
  uint64_t ChainRows(const Table& table) const;
  // `table` read whole into memory, the chain applied oldest first.
  absl::StatusOr<std::shared_ptr<const TableInMemory>> ReadWhole(
      const Table& table) const;
  // Writes `keys`' rows of `table` into `out` (dim floats each), and
  // whether each was in the export into `found` unless it is null.
  absl::Status Lookup(Table& table, absl::Span<const uint64_t> keys, float* out,
                      std::vector<bool>* found = nullptr);

  ExportManifest manifest_;
  std::vector<Link> chain_;
  // Per export of the chain: which shard's part holds a key's row.
  std::vector<std::unique_ptr<SlotMap>> slot_maps_;
  InputLayout layout_;
  std::unique_ptr<model::ModelPlan> plan_;
  // Per table of the spec.
  // Per stored table of the plan (ModelPlan::stored_tables()).
  std::vector<std::unique_ptr<Table>> sparse_;
  // Per table of the spec: table_spec().
  std::vector<TableSpec> table_specs_;
  // ExportedModelOptions::huge_pages, for the tables ReadWhole() reads.
  bool huge_pages_ = true;
  std::vector<std::vector<float>> dense_;
};

}  // namespace ps::model

#endif  // PS_MODEL_EXPORTED_MODEL_H_
