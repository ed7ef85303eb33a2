// File: model/export_test_util.h
//
// Writes small exports by hand, with no shard running, for the tests of
// what reads them (ExportedModel, ps_serve's ModelDirectory) and the fuzz
// target of manifests and parts: a wide & deep model of two fields, its
// manifest and its SST parts in ps_admin export's layout, with the rows a
// test chooses. Test-only.

#ifndef PS_MODEL_EXPORT_TEST_UTIL_H_
#define PS_MODEL_EXPORT_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/checkpoint.pb.h"

namespace ps::model {

struct HandmadeExport {
  // A full export of the model below over `num_shards` shards (their
  // initial slot map), cut 1, rows as SGD tables with zero initial rows.
  // Parts, row counts and bytes are filled in by WriteHandmadeExport().
  explicit HandmadeExport(uint32_t num_shards);

  // The model: WIDE_DEEP, 2 fields, no dense features, embeddings of 2
  // floats, one hidden layer of 3 units, dense tensors in chunks of 4
  // floats; its tables are named "m.embedding", "m.wide" and "m.dense.N".
  static constexpr char kEmbedding[] = "m.embedding";
  static constexpr char kWide[] = "m.wide";

  ExportManifest manifest;
  // By table, by shard: the rows of its part (key -> floats; an empty row
  // is a deletion). A shard with no row of a table writes no part.
  std::map<std::string, std::vector<std::map<uint64_t, std::vector<float>>>>
      rows;

  // Puts `keys`' rows of the embedding and wide tables in the part of the
  // shard that owns each (Row() floats), and every dense chunk's row.
  void AddRows(const std::vector<uint64_t>& keys);
  // A row's floats as AddRows() writes them: distinct per table, key and
  // `salt` (a test writes a row that is not its owner's with another).
  static std::vector<float> Row(const std::string& table, uint64_t key, int dim,
                                int salt = 0);
};

// Writes `model` into `dir` (made if missing): each part, then the
// manifest with the parts' names, rows and bytes.
absl::Status WriteHandmadeExport(const std::string& dir,
                                 const HandmadeExport& model);

}  // namespace ps::model

#endif  // PS_MODEL_EXPORT_TEST_UTIL_H_
