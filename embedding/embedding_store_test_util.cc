#include "embedding/embedding_store_test_util.h"

#include <utility>

#include "absl/types/span.h"
#include "base/initializer.h"
#include "base/status_matchers.h"

namespace ps::embedding {

TableSpec SgdTable(const std::string& name, uint32_t dim, float learning_rate) {
  TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_initializer()->set_seed(17);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(learning_rate);
  return spec;
}

std::unique_ptr<EmbeddingStore> OpenStore(const StoreOptions& options) {
  auto store = EmbeddingStore::Open(options);
  EXPECT_OK(store);
  return std::move(store).value();
}

std::vector<float> PullRows(EmbeddingStore& store, const std::string& table,
                            const std::vector<uint64_t>& keys, uint32_t dim) {
  std::vector<float> out(keys.size() * dim);
  EXPECT_OK(store.Pull(table, keys, absl::MakeSpan(out)));
  return out;
}

std::vector<float> InitialRow(const TableSpec& spec, uint64_t key) {
  std::vector<float> row(spec.dim());
  Initializer(spec.initializer()).Fill(key, absl::MakeSpan(row));
  return row;
}

::testing::AssertionResult EditRocksDb(
    const std::string& dir,
    const std::function<bool(rocksdb::DB*, const std::vector<std::string>&,
                             const std::vector<rocksdb::ColumnFamilyHandle*>&)>&
        edit) {
  rocksdb::DBOptions db_options;
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(db_options, dir, &names).ok())
    return ::testing::AssertionFailure() << "cannot list families in " << dir;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& name : names)
    families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(db_options, dir, families, &handles, &db).ok())
    return ::testing::AssertionFailure() << "cannot open " << dir;
  const bool edited = edit(db, names, handles);
  for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
  delete db;
  if (!edited) return ::testing::AssertionFailure() << "cannot edit " << dir;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult PutInRocksDb(const std::string& dir,
                                        const std::string& family,
                                        absl::string_view key,
                                        absl::string_view value) {
  return EditRocksDb(
      dir, [&](rocksdb::DB* db, const auto& names, const auto& handles) {
        for (size_t i = 0; i < names.size(); ++i) {
          if (names[i] == family) {
            return db
                ->Put(rocksdb::WriteOptions(), handles[i],
                      rocksdb::Slice(key.data(), key.size()),
                      rocksdb::Slice(value.data(), value.size()))
                .ok();
          }
        }
        return false;
      });
}

::testing::AssertionResult ReplaceInRocksDb(const std::string& dir,
                                            const std::string& key,
                                            const std::string& put_key,
                                            const std::string& value) {
  return EditRocksDb(dir, [&](rocksdb::DB* db, const auto&, const auto&) {
    return db->Delete(rocksdb::WriteOptions(), key).ok() &&
           db->Put(rocksdb::WriteOptions(), put_key, value).ok();
  });
}

::testing::AssertionResult StoreRowsUnderOldKeys(const std::string& dir,
                                                 int every) {
  return EditRocksDb(
      dir, [&](rocksdb::DB* db, const auto& names, const auto& handles) {
        rocksdb::WriteBatch batch;
        for (size_t f = 0; f < names.size(); ++f) {
          if (names[f].rfind("table.", 0) != 0) continue;
          std::unique_ptr<rocksdb::Iterator> it(
              db->NewIterator(rocksdb::ReadOptions(), handles[f]));
          int seen = 0;
          for (it->SeekToFirst(); it->Valid(); it->Next()) {
            if (it->key().size() != 10 || seen++ % every != 0) continue;
            // The stored key: the slot's 2 bytes, then the key big-endian.
            uint64_t key = 0;
            for (size_t i = 2; i < 10; ++i)
              key = (key << 8) | static_cast<unsigned char>(it->key()[i]);
            batch.Put(handles[f],
                      rocksdb::Slice(reinterpret_cast<const char*>(&key),
                                     sizeof(key)),
                      it->value());
            batch.Delete(handles[f], it->key());
          }
          if (!it->status().ok()) return false;
        }
        batch.Delete("row_key_format");
        return db->Write(rocksdb::WriteOptions(), &batch).ok();
      });
}

}  // namespace ps::embedding
