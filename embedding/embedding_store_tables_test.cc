// EmbeddingStore's tables over their life: one half created by a crashed
// process, a learning rate set live, and drops (finished at the next open
// when stopped half way).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/optimizer.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "embedding/row_cache.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "rocksdb/db.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

TEST_F(EmbeddingStoreTest, ATableHalfCreatedByACrashedProcessIsDropped) {
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(SgdTable("kept", 2)));
    ASSERT_OK(store->Push("kept", {1}, {-1.0f, -1.0f}));
  }
  // The column family of "lost", created without its spec, as a process
  // stopped in the middle of CreateTable() leaves it.
  {
    rocksdb::DBOptions db_options;
    std::vector<std::string> names;
    ASSERT_TRUE(
        rocksdb::DB::ListColumnFamilies(db_options, options_.data_dir, &names)
            .ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(db_options, options_.data_dir, families,
                                  &handles, &db)
                    .ok());
    rocksdb::ColumnFamilyHandle* lost = nullptr;
    ASSERT_TRUE(db->CreateColumnFamily(rocksdb::ColumnFamilyOptions(),
                                       "table.lost", &lost)
                    .ok());
    handles.push_back(lost);
    for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
    delete db;
  }
  auto store = OpenStore(options_);
  ASSERT_NE(store, nullptr);
  const std::vector<TableStats> tables = store->tables().ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].spec.name(), "kept");
  const float initial = InitialRow(SgdTable("kept", 2), 1)[0];
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 2)[0], initial + 1.0f);
  auto created = store->tables().DeclareTable(SgdTable("lost", 2));
  ASSERT_OK(created);
  EXPECT_TRUE(*created);
}

TEST_F(EmbeddingStoreTest, ALearningRateSetLiveAppliesFromTheNextPushOn) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  const TableSpec spec = SgdTable("emb", 2, /*learning_rate=*/1.0f);
  const std::vector<float> initial = InitialRow(spec, 1);
  // A child pushes at the declared rate, then at a rate set live, and exits
  // as if killed: replay must apply each record at its own rate.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->tables().DeclareTable(spec).ok()) std::_Exit(1);
        if (!store->Push("emb", {1}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (!store->tables().SetLearningRate("emb", 0.25f).ok()) std::_Exit(3);
        if (!store->Push("emb", {1}, {1.0f, 1.0f}).ok()) std::_Exit(4);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial[0] - 1.25f);
  const std::vector<TableStats> tables = store->tables().ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_FLOAT_EQ(tables[0].learning_rate, 0.25f);
  // The spec keeps the declared rate: the table's workers still declare it.
  EXPECT_FLOAT_EQ(tables[0].spec.optimizer().learning_rate(), 1.0f);
  auto declared = store->tables().DeclareTable(spec);
  ASSERT_OK(declared);
  EXPECT_FALSE(*declared);
  // The rate survived the restart, and multiplies a push's own scale.
  ASSERT_OK(store->Push("emb", {1}, {1.0f, 1.0f}, PushOrigin(), 2.0f));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {1}, 2)[0], initial[0] - 1.75f);

  EXPECT_THAT(store->tables().SetLearningRate("emb", 0.0f),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->tables().SetLearningRate("emb", -1.0f),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->tables().SetLearningRate("emb", std::nanf("")),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store->tables().SetLearningRate("nope", 0.1f),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(EmbeddingStoreTest, ADroppedTableLeavesNothingAndItsNameStartsAfresh) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  const TableSpec gone = SgdTable("gone", 2);
  const TableSpec kept = SgdTable("kept", 3);
  const TableSpec again = SgdTable("gone", 5, /*learning_rate=*/0.5f);
  // In a child that exits as if killed, so that the push log still names
  // the dropped table's id when the store opens again.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->tables().DeclareTable(gone).ok()) std::_Exit(1);
        if (!store->tables().DeclareTable(kept).ok()) std::_Exit(1);
        if (!store->Push("gone", {1, 2}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->Push("kept", {1}, std::vector<float>(3, 1.0f)).ok())
          std::_Exit(2);
        // Some of its rows on disk too.
        if (!store->Flush().ok()) std::_Exit(3);
        if (!store->Push("gone", {1, 3}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->tables().DropTable("gone").ok()) std::_Exit(4);
        std::vector<float> out(2);
        if (store->Pull("gone", {1}, absl::MakeSpan(out)).code() !=
            absl::StatusCode::kNotFound)
          std::_Exit(5);
        if (store->Push("gone", {1}, {1.0f, 1.0f}).status().code() !=
            absl::StatusCode::kNotFound)
          std::_Exit(6);
        if (store->tables().DropTable("gone").code() !=
            absl::StatusCode::kNotFound)
          std::_Exit(7);
        if (!store->Push("kept", {1}, std::vector<float>(3, 1.0f)).ok())
          std::_Exit(2);
        if (!store->tables().DeclareTable(again).ok()) std::_Exit(8);
        if (!store->Push("gone", {1}, std::vector<float>(5, 1.0f)).ok())
          std::_Exit(9);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    std::vector<std::string> names;
    for (const TableStats& table : store->tables().ListTables())
      names.push_back(table.spec.name() + "/" +
                      std::to_string(table.spec.dim()));
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"gone/5", "kept/3"}));
    EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 3)[0],
                    InitialRow(kept, 1)[0] - 2.0f);
    // The new table holds its one push and none of the old table's rows.
    EXPECT_FLOAT_EQ(PullRows(*store, "gone", {1}, 5)[0],
                    InitialRow(again, 1)[0] - 0.5f);
    for (uint64_t key : {2, 3}) {
      std::vector<float> weights;
      bool stored = true;
      ASSERT_OK(store->GetRow("gone", key, &weights, &stored));
      EXPECT_FALSE(stored) << "key " << key << ", open " << open;
    }
  }
}

TEST_F(EmbeddingStoreTest, ADroppedTablesRowsLeaveTheHotTier) {
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(SgdTable("gone", 16)));
  ASSERT_OK(store->tables().DeclareTable(SgdTable("kept", 16)));
  std::vector<uint64_t> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  ASSERT_OK(store->Push("kept", {1}, std::vector<float>(16, 1.0f)));
  const uint64_t kept_bytes = store->Stats().hot_tier_bytes;
  ASSERT_OK(store->Push("gone", keys, std::vector<float>(16 * 1000, 1.0f)));
  EXPECT_GT(store->Stats().hot_tier_bytes, kept_bytes + 1000 * 16 * 4);
  ASSERT_OK(store->tables().DropTable("gone"));
  EXPECT_EQ(store->Stats().hot_tier_bytes, kept_bytes);
  // Nothing of it is written back.
  ASSERT_OK(store->Flush());
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 16)[0],
                  InitialRow(SgdTable("kept", 16), 1)[0] - 1.0f);
}

TEST_F(EmbeddingStoreTest,
       DroppingATableOfAStoreWithoutRecordedIdsKeepsTheOthers) {
  const TableSpec a = SgdTable("a", 2), b = SgdTable("b", 3),
                  c = SgdTable("c", 4);
  {
    auto store = OpenStore(options_);
    for (const TableSpec* spec : {&a, &b, &c}) {
      ASSERT_OK(store->tables().DeclareTable(*spec));
      ASSERT_OK(store->Push(spec->name(), {1},
                            std::vector<float>(spec->dim(), 1.0f)));
    }
  }
  // A store written before ids were recorded: a table's id was its
  // family's place.
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(ReplaceInRocksDb(
        options_.data_dir, std::string("table_id/") + name, "unrelated", ""));
  }
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DropTable("b"));
  }
  for (int open = 0; open < 2; ++open) {
    auto store = OpenStore(options_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->tables().ListTables().size(), 2u);
    EXPECT_FLOAT_EQ(PullRows(*store, "a", {1}, 2)[0], InitialRow(a, 1)[0] - 1);
    EXPECT_FLOAT_EQ(PullRows(*store, "c", {1}, 4)[0], InitialRow(c, 1)[0] - 1);
  }
}

TEST_F(EmbeddingStoreTest, ADropStoppedHalfWayIsFinishedAtTheNextOpen) {
  const TableSpec gone = SgdTable("gone", 2);
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(gone));
    ASSERT_OK(store->tables().DeclareTable(SgdTable("kept", 2)));
    ASSERT_OK(store->Push("gone", {1}, {1.0f, 1.0f}));
    ASSERT_OK(store->Push("kept", {1}, {1.0f, 1.0f}));
  }
  // The tombstone written, the family not yet dropped. "gone" has id 0.
  ASSERT_TRUE(ReplaceInRocksDb(
      options_.data_dir, "table_spec/gone", "dropped_table/0000000000", [&] {
        TableSpec spec = gone;
        *spec.mutable_optimizer() = Optimizer::WithDefaults(spec.optimizer());
        return spec.SerializeAsString();
      }()));
  auto store = OpenStore(options_);
  ASSERT_NE(store, nullptr);
  const std::vector<TableStats> tables = store->tables().ListTables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].spec.name(), "kept");
  EXPECT_FLOAT_EQ(PullRows(*store, "kept", {1}, 2)[0],
                  InitialRow(SgdTable("kept", 2), 1)[0] - 1.0f);
  ASSERT_OK(store->tables().DeclareTable(gone));
  EXPECT_FLOAT_EQ(PullRows(*store, "gone", {1}, 2)[0], InitialRow(gone, 1)[0]);
}

// A row of an Adagrad embedding and an FTRL weight (OptimizerSpec and
// InitializerSpec later_columns) holds, pushed and replayed from the push
// log after a crash, the bits of the two tables kept apart.
TEST_F(EmbeddingStoreTest, LaterColumnsHoldWhatTwoTablesWould) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  TableSpec embedding;
  embedding.set_name("embedding");
  embedding.set_dim(3);
  embedding.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  embedding.mutable_initializer()->set_scale(0.1f);
  embedding.mutable_initializer()->set_seed(5);
  embedding.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  TableSpec wide;
  wide.set_name("wide");
  wide.set_dim(1);
  wide.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
  wide.mutable_initializer()->set_scale(0.5f);
  wide.mutable_optimizer()->set_kind(OptimizerSpec::FTRL);
  TableSpec joined = embedding;
  joined.set_name("joined");
  joined.set_dim(4);
  LaterColumnsInitializer* initializer =
      joined.mutable_initializer()->add_later_columns();
  initializer->set_first_column(3);
  *initializer->mutable_initializer() = wide.initializer();
  LaterColumnsOptimizer* optimizer =
      joined.mutable_optimizer()->add_later_columns();
  optimizer->set_first_column(3);
  *optimizer->mutable_optimizer() = wide.optimizer();

  const std::vector<uint64_t> keys = {7, 9, 7, 11};
  const std::vector<uint64_t> pulled = {7, 9, 11, 12};
  // The joined rows, then the two tables' rows side by side as one.
  auto rows = [&](EmbeddingStore& store) {
    std::vector<float> apart;
    const std::vector<float> first = PullRows(store, "embedding", pulled, 3);
    const std::vector<float> last = PullRows(store, "wide", pulled, 1);
    for (size_t k = 0; k < pulled.size(); ++k) {
      apart.insert(apart.end(), first.begin() + 3 * k,
                   first.begin() + 3 * (k + 1));
      apart.push_back(last[k]);
    }
    return std::make_pair(PullRows(store, "joined", pulled, 4), apart);
  };
  // In a child that exits as if killed.
  auto pushes = [&] {
    auto store = OpenStore(options_);
    for (const TableSpec* spec : {&embedding, &wide, &joined}) {
      if (!store->tables().DeclareTable(*spec).ok()) std::_Exit(1);
    }
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> joined_gradients, first, last;
      for (size_t k = 0; k < keys.size(); ++k) {
        for (int column = 0; column < 4; ++column) {
          const float g = 0.25f * step * (column + 1) - 0.3f * k;
          joined_gradients.push_back(g);
          (column < 3 ? first : last).push_back(g);
        }
      }
      const float scale = 1.0f / step;
      if (!store->Push("joined", keys, joined_gradients, {}, scale).ok() ||
          !store->Push("embedding", keys, first, {}, scale).ok() ||
          !store->Push("wide", keys, last, {}, scale).ok()) {
        std::_Exit(2);
      }
    }
    const auto [joined_rows, apart] = rows(*store);
    std::_Exit(joined_rows == apart ? 0 : 3);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(pushes(), ::testing::ExitedWithCode(0), "");
  // Replayed from the push log at the next open.
  auto store = OpenStore(options_);
  const auto [joined_rows, apart] = rows(*store);
  EXPECT_EQ(joined_rows, apart);
  EXPECT_NE(joined_rows[3], 0.5f) << "the FTRL weight was pushed";
  EXPECT_EQ(joined_rows[15], 0.5f) << "key 12 was never pushed";
  std::vector<float> with_state(2 * (4 + 3 + 2));
  ASSERT_OK(
      store->PullWithState("joined", {7, 12}, absl::MakeSpan(with_state)));
  // Key 12's fresh state: Adagrad's accumulators at 0.1, then FTRL's z, n.
  EXPECT_EQ(std::vector<float>(with_state.begin() + 13, with_state.end()),
            std::vector<float>({0.1f, 0.1f, 0.1f, 0.0f, 0.0f}));

  TableSpec misfit = joined;
  misfit.set_name("misfit");
  misfit.set_dim(3);
  EXPECT_EQ(store->tables().DeclareTable(misfit).status().code(),
            StatusCode::kInvalidArgument);
  misfit.set_dim(4);
  misfit.mutable_initializer()->mutable_later_columns(0)->set_first_column(4);
  EXPECT_EQ(store->tables().DeclareTable(misfit).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::embedding
