// File: worker/predict/exported_model.h
//
// ExportedModel opens an export (ps_admin export; ExportManifest in
// proto/checkpoint.proto) for scoring with no shard running: its dense
// tensors are read whole at Open(), and a batch's embedding and wide rows
// are looked up in the SST part of the shard each key routes to (a key in
// no part was never pushed, and gets its table's deterministic initial
// row, as a shard would answer it). ps_predict scores click logs with it.
//
// Not thread-safe (its SST iterators are shared): one scorer per object.

#ifndef PS_WORKER_PREDICT_EXPORTED_MODEL_H_
#define PS_WORKER_PREDICT_EXPORTED_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/initializer.h"
#include "base/slot_map.h"
#include "kernels/ctr_model.h"
#include "proto/checkpoint.pb.h"
#include "worker/input/input_layout.h"
#include "worker/model_inputs.h"

namespace rocksdb {
class Cache;
class Iterator;
class SstFileReader;
}  // namespace rocksdb

namespace ps::worker {

class ExportedModel {
 public:
  // NOT_FOUND without a manifest; DATA_LOSS for a manifest or part that
  // does not read; FAILED_PRECONDITION for a model this build cannot score
  // (another input layout or routing version).
  // `block_cache`, if given, caches the parts' blocks (and may be shared by
  // several models); none: RocksDB's default per reader.
  static absl::StatusOr<std::unique_ptr<ExportedModel>> Open(
      const std::string& dir,
      std::shared_ptr<rocksdb::Cache> block_cache = nullptr);
  ~ExportedModel();

  const ExportManifest& manifest() const { return manifest_; }
  // The model the export holds, as kernels::CtrModel takes it.
  kernels::ModelConfig config() const;
  // The layout of the click logs it was trained on.
  const InputLayout& layout() const { return layout_; }

  // Fills the rows of `inputs` (prepared with layout(); see
  // model_inputs.h) and the dense parameters.
  absl::Status Fetch(ModelInputs* inputs);

  // `keys`' rows of `table` (the embedding or the wide table) into
  // `values` (dim floats per key), whether each was in the export into
  // `found` (if not, its initial row); returns the table's dim. NOT_FOUND,
  // naming the tables there are, for another table.
  absl::StatusOr<int> LookupRows(const std::string& table,
                                 absl::Span<const uint64_t> keys,
                                 std::vector<float>* values,
                                 std::vector<bool>* found);

 private:
  struct Table;
  ExportedModel() = default;
  // Writes `keys`' rows of `table` into `out` (dim floats each), and
  // whether each was in the export into `found` unless it is null.
  absl::Status Lookup(Table& table, absl::Span<const uint64_t> keys, float* out,
                      std::vector<bool>* found = nullptr);

  ExportManifest manifest_;
  // Which shard's part holds a key's row.
  std::unique_ptr<SlotMap> slot_map_;
  InputLayout layout_;
  std::unique_ptr<Table> embedding_, wide_;
  std::vector<std::vector<float>> dense_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_PREDICT_EXPORTED_MODEL_H_
