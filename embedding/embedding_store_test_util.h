// File: embedding/embedding_store_test_util.h
//
// The fixture and helpers the EmbeddingStore tests share
// (embedding_store*_test.cc): a fresh data dir per test, a small SGD table
// spec, pulls that expect success, the initializer's rows, and edits of a
// store's RocksDB database behind its back. For tests only; each helper
// runs on the calling thread.

#ifndef PS_EMBEDDING_EMBEDDING_STORE_TEST_UTIL_H_
#define PS_EMBEDDING_EMBEDDING_STORE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/test_dirs.h"
#include "embedding/embedding_store.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "rocksdb/db.h"

namespace ps::embedding {

// A table of `dim` with SGD at `learning_rate` and a seeded uniform
// initializer of scale 0.1.
TableSpec SgdTable(const std::string& name, uint32_t dim,
                   float learning_rate = 1.0f);

// EmbeddingStore::Open(), expected to succeed (a failure fails the test).
std::unique_ptr<EmbeddingStore> OpenStore(const StoreOptions& options);

// The weights of `keys` of `table` (dim `dim`), failing the test if the
// pull does.
std::vector<float> PullRows(EmbeddingStore& store, const std::string& table,
                            const std::vector<uint64_t>& keys, uint32_t dim);

// The weights a never-pushed `key` of a table of `spec` has.
std::vector<float> InitialRow(const TableSpec& spec, uint64_t key);

// Opens the RocksDB database in `dir` with every column family, behind the
// store's back, and calls edit(db, family names, their handles): what an
// older version or a stopped process left there. Fails if it cannot open or
// `edit` returns false.
::testing::AssertionResult EditRocksDb(
    const std::string& dir,
    const std::function<bool(rocksdb::DB*, const std::vector<std::string>&,
                             const std::vector<rocksdb::ColumnFamilyHandle*>&)>&
        edit);

// Writes `value` at `key` in column family `family` of the database in `dir`.
::testing::AssertionResult PutInRocksDb(const std::string& dir,
                                        const std::string& family,
                                        absl::string_view key,
                                        absl::string_view value);

// Deletes `key` from RocksDB's default family in `dir` and puts `put_key`
// there: what a process stopped in the middle of a drop leaves.
::testing::AssertionResult ReplaceInRocksDb(const std::string& dir,
                                            const std::string& key,
                                            const std::string& put_key,
                                            const std::string& value);

// Gives each test a data dir of its own, named after it, in options_.
class EmbeddingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.data_dir = FreshTestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  StoreOptions options_;
};

// Makes the store in `dir` look as a version before rows were stored by
// slot left it: rows under their key's 8 bytes (every `every`-th row; the
// others stay as an upgrade stopped part-way leaves them) and no record of
// the row key format.
::testing::AssertionResult StoreRowsUnderOldKeys(const std::string& dir,
                                                 int every = 1);

}  // namespace ps::embedding

#endif  // PS_EMBEDDING_EMBEDDING_STORE_TEST_UTIL_H_
