// ExportedModel: a key's row is its owner's, read into memory or looked up
// on disk; a manifest that does not agree with its card or its files is
// refused with its reason.

#include "model/exported_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/huge_pages_test_util.h"
#include "base/manifest.h"
#include "base/slot_map.h"
#include "gtest/gtest.h"
#include "model/export_test_util.h"

namespace ps::model {
namespace {

std::string TestDir() {
  const std::string dir =
      ::testing::TempDir() + "/" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<uint64_t> Keys(uint64_t count) {
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < count; ++key) keys.push_back(key * 7919 + 3);
  return keys;
}

TEST(ExportedModelTest, AKeysRowIsItsOwnersInMemoryAndOnDisk) {
  const std::string dir = TestDir() + "/export";
  HandmadeExport model(2);
  const std::vector<uint64_t> keys = Keys(300);
  model.AddRows(keys);
  // A third of the keys have a stale row in the part of the shard that does
  // not own them (a move was under way when the export was written).
  const SlotMap map = RecordedSlotMap(model.manifest);
  int stale_in_higher_part = 0;
  for (size_t i = 0; i < keys.size(); i += 3) {
    const uint32_t other = 1 - map.ShardForKey(keys[i]);
    stale_in_higher_part += other == 1;
    model.rows[HandmadeExport::kEmbedding][other][keys[i]] =
        HandmadeExport::Row(HandmadeExport::kEmbedding, keys[i], 2, 5);
    model.rows[HandmadeExport::kWide][other][keys[i]] =
        HandmadeExport::Row(HandmadeExport::kWide, keys[i], 1, 5);
  }
  ASSERT_GT(stale_in_higher_part, 10);
  ASSERT_TRUE(WriteHandmadeExport(dir, model).ok());

  for (const size_t memory : {size_t{0}, size_t{1} << 30}) {
    SCOPED_TRACE(memory == 0 ? "on disk" : "in memory");
    ExportedModelOptions options;
    options.max_memory_bytes = memory;
    auto opened = ExportedModel::Open(dir, options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    for (const auto& [table, dim] :
         {std::pair<std::string, int>{HandmadeExport::kEmbedding, 2},
          {HandmadeExport::kWide, 1}}) {
      std::vector<float> values;
      std::vector<bool> found;
      auto looked_up = (*opened)->LookupRows(table, keys, &values, &found);
      ASSERT_TRUE(looked_up.ok()) << looked_up.status();
      ASSERT_EQ(*looked_up, dim);
      for (size_t i = 0; i < keys.size(); ++i) {
        EXPECT_TRUE(found[i]) << keys[i];
        EXPECT_EQ(std::vector<float>(values.begin() + i * dim,
                                     values.begin() + (i + 1) * dim),
                  HandmadeExport::Row(table, keys[i], dim))
            << table << " key " << keys[i] << " owned by shard "
            << map.ShardForKey(keys[i]);
      }
    }
    // Read whole (ps_export_dump): every key once, with its owner's row.
    for (int t = 0; t < 2; ++t) {
      const TableSpec& spec = (*opened)->table_spec(t);
      std::vector<uint64_t> read_keys;
      std::vector<float> rows;
      ASSERT_TRUE((*opened)->ReadTable(t, &read_keys, &rows).ok());
      const int dim = static_cast<int>(spec.dim());
      ASSERT_EQ(read_keys.size(), keys.size()) << spec.name();
      ASSERT_EQ(rows.size(), keys.size() * dim) << spec.name();
      std::vector<uint64_t> sorted = read_keys;
      std::sort(sorted.begin(), sorted.end());
      std::vector<uint64_t> expected = keys;
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(sorted, expected) << spec.name();
      for (size_t i = 0; i < read_keys.size(); ++i) {
        EXPECT_EQ(std::vector<float>(rows.begin() + i * dim,
                                     rows.begin() + (i + 1) * dim),
                  HandmadeExport::Row(spec.name(), read_keys[i], dim))
            << spec.name() << " key " << read_keys[i];
      }
    }
    std::vector<uint64_t> read_keys;
    std::vector<float> rows;
    EXPECT_EQ((*opened)->ReadTable(2, &read_keys, &rows).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// A chain of a base and two deltas, read into memory and looked up on
// disk: a newer export's row replaces an older one, an empty row deletes
// the key (a key the base never had included), and a key deleted in one
// delta and written again in the next is there with its newest row.
TEST(ExportedModelTest, ADeltaChainReplacesDeletesAndAddsRowsAgain) {
  const std::string dir = TestDir();
  const auto row = [](uint64_t key, int salt) {
    return HandmadeExport::Row(HandmadeExport::kEmbedding, key, 2, salt);
  };
  // The newest row of each key, or none for a deleted one.
  std::map<uint64_t, std::vector<float>> expected;
  // Writes keys [first, end) with `salt` (or deletes them) into `model`.
  const auto put = [&](HandmadeExport& model, uint64_t first, uint64_t end,
                       int salt, bool erase) {
    for (uint64_t key = first; key < end; ++key) {
      model.rows[HandmadeExport::kEmbedding][0][key] =
          erase ? std::vector<float>{} : row(key, salt);
      if (erase) {
        expected.erase(key);
      } else {
        expected[key] = row(key, salt);
      }
    }
  };
  HandmadeExport base(1);
  base.AddRows({});
  put(base, 0, 100, 0, false);
  ASSERT_TRUE(WriteHandmadeExport(dir + "/base", base).ok());
  HandmadeExport first(1);
  first.AddRows({});
  put(first, 0, 20, 0, /*erase=*/true);
  put(first, 20, 40, 1, false);
  put(first, 100, 120, 1, false);
  put(first, 1000, 1001, 0, /*erase=*/true);  // never written
  HandmadeExport second(1);
  second.AddRows({});
  put(second, 0, 10, 2, false);  // deleted in the first delta
  put(second, 100, 105, 0, /*erase=*/true);
  int index = 1;
  std::string before = "base";
  for (HandmadeExport* delta : {&first, &second}) {
    delta->manifest.set_format_version(3);
    delta->manifest.set_base("base");
    delta->manifest.set_predecessor(before);
    delta->manifest.set_delta_index(index);
    delta->manifest.set_predecessor_created_at(base.manifest.created_at());
    before = absl::StrCat("delta-", index++);
    ASSERT_TRUE(WriteHandmadeExport(dir + "/" + before, *delta).ok());
  }
  std::vector<uint64_t> keys;
  for (uint64_t key = 0; key < 130; ++key) keys.push_back(key);
  keys.push_back(1000);

  for (const size_t memory : {size_t{0}, size_t{1} << 30}) {
    SCOPED_TRACE(memory == 0 ? "on disk" : "in memory");
    ExportedModelOptions options;
    options.max_memory_bytes = memory;
    auto opened = ExportedModel::Open(dir + "/delta-2", options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::vector<float> values;
    std::vector<bool> found;
    ASSERT_TRUE(
        (*opened)
            ->LookupRows(HandmadeExport::kEmbedding, keys, &values, &found)
            .ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = expected.find(keys[i]);
      ASSERT_EQ(found[i], it != expected.end()) << keys[i];
      if (found[i]) {
        EXPECT_EQ(std::vector<float>(values.begin() + 2 * i,
                                     values.begin() + 2 * i + 2),
                  it->second)
            << keys[i];
      }
    }
    std::vector<uint64_t> read_keys;
    std::vector<float> rows;
    ASSERT_TRUE((*opened)->ReadTable(0, &read_keys, &rows).ok());
    std::map<uint64_t, std::vector<float>> read;
    for (size_t i = 0; i < read_keys.size(); ++i) {
      EXPECT_TRUE(read.emplace(read_keys[i],
                               std::vector<float>(rows.begin() + 2 * i,
                                                  rows.begin() + 2 * i + 2))
                      .second)
          << "twice: " << read_keys[i];
    }
    EXPECT_EQ(read, expected);
  }
}

// Writes a good export into a directory of its own, lets `damage` change its
// manifest, and opens it: the error.
absl::Status OpenDamaged(const std::string& dir,
                         const std::function<void(ExportManifest&)>& damage) {
  HandmadeExport model(2);
  model.AddRows(Keys(50));
  if (!WriteHandmadeExport(dir, model).ok()) {
    return absl::InternalError("cannot write the export");
  }
  absl::StatusOr<ExportManifest> manifest = ReadExportManifest(dir);
  if (!manifest.ok()) return manifest.status();
  damage(*manifest);
  if (!WriteManifest(dir, *manifest).ok()) {
    return absl::InternalError("cannot write the manifest");
  }
  return ExportedModel::Open(dir).status();
}

TEST(ExportedModelTest, TablesInMemoryLieOnHugePagesUnlessSwitchedOff) {
  const std::string dir = TestDir() + "/export";
  HandmadeExport model(1);
  // 400k rows of 2 floats: 3.2 MB of rows, an index of several MiB.
  const std::vector<uint64_t> keys = Keys(400'000);
  model.AddRows(keys);
  ASSERT_TRUE(WriteHandmadeExport(dir, model).ok());
  for (const bool huge_pages : {false, true}) {
    SCOPED_TRACE(huge_pages ? "huge pages" : "the heap's pages");
    const int mappings_before = HugePageMappings();
    ExportedModelOptions options;
    options.huge_pages = huge_pages;
    auto opened = ExportedModel::Open(dir, options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    const int mappings_added = HugePageMappings() - mappings_before;
    if (!huge_pages) {
      EXPECT_EQ(mappings_added, 0);
    } else if (HasTransparentHugePages()) {
      // The embedding table's rows and index at least.
      EXPECT_GE(mappings_added, 2);
    }
    std::vector<float> values;
    std::vector<bool> found;
    auto looked_up = (*opened)->LookupRows(HandmadeExport::kEmbedding, keys,
                                           &values, &found);
    ASSERT_TRUE(looked_up.ok()) << looked_up.status();
    for (size_t i = 0; i < keys.size(); i += 997) {
      ASSERT_EQ(std::vector<float>(values.begin() + i * 2,
                                   values.begin() + (i + 1) * 2),
                HandmadeExport::Row(HandmadeExport::kEmbedding, keys[i], 2));
    }
  }
}

TEST(ExportedModelTest, AManifestThatDisagreesWithItsCardOrFilesIsRefused) {
  const std::string dir = TestDir();
  ASSERT_TRUE(OpenDamaged(dir + "/good", [](ExportManifest&) {}).ok());
  // A file beside the export that a part name must not reach.
  ASSERT_TRUE(OpenDamaged(dir + "/elsewhere", [](ExportManifest&) {}).ok());
  struct Case {
    std::string name;
    std::function<void(ExportManifest&)> damage;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"chunks of no floats",
       [](ExportManifest& m) { m.mutable_model()->set_dense_chunk_floats(0); },
       "chunks of 0 floats"},
      {"an embedding table wider than the card",
       [](ExportManifest& m) {
         m.mutable_tables(0)->mutable_spec()->set_dim(3);
       },
       "has rows of 3 floats, the model's embedding 2"},
      {"a wide table of two floats",
       [](ExportManifest& m) {
         m.mutable_tables(1)->mutable_spec()->set_dim(2);
       },
       "has rows of 2 floats, the model's wide 1"},
      {"rows understated",
       [](ExportManifest& m) { m.mutable_tables(0)->set_rows(1); },
       "its manifest says 1"},
      {"a part outside the export",
       [](ExportManifest& m) {
         m.mutable_tables(0)->set_parts(
             0, "../elsewhere/m.embedding/part-0-of-2.sst");
       },
       "outside the export's directory"},
      {"a part named by an absolute path",
       [](ExportManifest& m) {
         m.mutable_tables(1)->set_parts(1, "/etc/hosts");
       },
       "outside the export's directory"},
      {"a hidden layer of no units",
       [](ExportManifest& m) { m.mutable_model()->set_hidden(0, 0); },
       "a hidden layer of 0 units"},
      {"dense layers too large to hold",
       [](ExportManifest& m) {
         m.mutable_model()->set_hidden(0, 65536);
         m.mutable_model()->add_hidden(65536);
       },
       "dense parameters"},
      {"no features",
       [](ExportManifest& m) {
         m.mutable_model()->set_fields(0);
         m.mutable_model()->set_dense_features(0);
       },
       "a model of 0 fields and 0 dense features"},
      {"an unknown kind",
       [](ExportManifest& m) {
         m.mutable_model()->set_kind(static_cast<ModelCard::Kind>(9));
       },
       "kind 9"},
      {"an unknown format",
       [](ExportManifest& m) {
         m.set_format(static_cast<ExportManifest::Format>(5));
       },
       "format 5"},
      {"a delta of an export outside the directory",
       [](ExportManifest& m) {
         m.set_format_version(3);
         m.set_predecessor("../good");
         m.set_base("../good");
         m.set_delta_index(1);
       },
       "not an export's name beside it"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const absl::Status status =
        OpenDamaged(absl::StrCat(dir, "/case-", i), cases[i].damage);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(cases[i].reason), std::string::npos)
        << status;
  }
}

}  // namespace
}  // namespace ps::model
