// EmbeddingStore's admission (TableSpec.admit_after): a key is stored only
// at its admit_after-th applied push, and a stored key always trains.

#include <cstdlib>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/status_matchers.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_store_test_util.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace ps::embedding {
namespace {

using absl::StatusCode;

TEST_F(EmbeddingStoreTest, AKeyIsStoredOnlyAtItsAdmitAfterthPush) {
  options_.durability = Durability::kWal;
  options_.write_back_interval = absl::Hours(1);
  options_.admission_sketch_bytes = 1 << 16;
  TableSpec spec = SgdTable("emb", 2, /*learning_rate=*/1.0f);
  spec.set_admit_after(3);
  const float initial5 = InitialRow(spec, 5)[0];
  const float initial9 = InitialRow(spec, 9)[0];
  auto stored = [](EmbeddingStore& store, uint64_t key) {
    std::vector<float> weights;
    bool stored = false;
    EXPECT_OK(store.GetRow("emb", key, &weights, &stored));
    return stored;
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto store = OpenStore(options_);
        if (!store->tables().DeclareTable(spec).ok()) std::_Exit(1);
        // Two pushes (one naming the key twice, which counts once): held.
        if (!store->Push("emb", {5, 5}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        if (!store->Push("emb", {5}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (stored(*store, 5)) std::_Exit(3);
        std::vector<float> row(2);
        if (!store->Pull("emb", {5}, absl::MakeSpan(row)).ok() ||
            row[0] != initial5)
          std::_Exit(4);
        // The third stores it with that push's gradient alone.
        if (!store->Push("emb", {5}, {1.0f, 1.0f}).ok()) std::_Exit(2);
        if (!stored(*store, 5)) std::_Exit(5);
        // A stored key trains; a new one in the same push is held back.
        if (!store->Push("emb", {5, 9}, std::vector<float>(4, 1.0f)).ok())
          std::_Exit(2);
        const StoreStats stats = store->Stats();
        if (stats.rows_admitted != 1 || stats.keys_held_back != 3)
          std::_Exit(6);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // The push log holds only what was applied.
  auto store = OpenStore(options_);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {5}, 2)[0], initial5 - 2.0f);
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {9}, 2)[0], initial9);
  EXPECT_FALSE(stored(*store, 9));

  TableSpec too_many = SgdTable("other", 2);
  too_many.set_admit_after(256);
  EXPECT_THAT(store->tables().DeclareTable(too_many),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(EmbeddingStoreTest, AdmissionCountsOnlyPushesThatWereApplied) {
  // Key 8 rides along with key 7, whose update overflows to -inf: the push
  // is refused whole, twice (as a worker retries it). Neither refusal
  // counts key 8's push, so its next push is its first.
  TableSpec spec = SgdTable("emb", 1, /*learning_rate=*/4.0f);
  spec.set_admit_after(2);
  auto store = OpenStore(options_);
  ASSERT_OK(store->tables().DeclareTable(spec));
  ASSERT_OK(store->Push("emb", {7}, {1.0f}));
  ASSERT_OK(store->Push("emb", {7}, {1.0f}));  // 7 is stored
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THAT(store->Push("emb", {7, 8}, {3e38f, 1.0f}),
                StatusIs(StatusCode::kInvalidArgument));
  }
  std::vector<float> weights;
  bool stored = true;
  ASSERT_OK(store->Push("emb", {8}, {1.0f}));
  ASSERT_OK(store->GetRow("emb", 8, &weights, &stored));
  EXPECT_FALSE(stored) << "the refused pushes counted";
  ASSERT_OK(store->Push("emb", {8}, {1.0f}));
  ASSERT_OK(store->GetRow("emb", 8, &weights, &stored));
  EXPECT_TRUE(stored);
  EXPECT_EQ(store->Stats().rows_admitted, 2u);
}

TEST_F(EmbeddingStoreTest, AdmissionKnowsARowOnDiskIsStored) {
  TableSpec spec = SgdTable("emb", 8);
  spec.set_admit_after(2);
  {
    auto store = OpenStore(options_);
    ASSERT_OK(store->tables().DeclareTable(spec));
    ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));
    ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));  // stored
  }
  // After a restart the row is on disk only, and the counts are gone: the
  // push applies because the row is stored, not because of a count.
  auto store = OpenStore(options_);
  ASSERT_OK(store->Push("emb", {7}, std::vector<float>(8, 1.0f)));
  EXPECT_FLOAT_EQ(PullRows(*store, "emb", {7}, 8)[0],
                  InitialRow(spec, 7)[0] - 2.0f);
}

}  // namespace
}  // namespace ps::embedding
