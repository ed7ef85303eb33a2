#include "worker/model_inputs.h"

#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "worker/input/line_parser.h"

namespace ps::worker {
namespace {

constexpr int kDim = 3;

std::vector<Example> ParseAll(const InputLayout& layout,
                              const std::vector<std::string>& lines) {
  std::vector<Example> examples(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok()) << lines[i];
  }
  return examples;
}

// A layout with a cat field, a multi field and a cross of the two.
InputLayout MixedLayout(const char* pooling) {
  return *MakeInputLayout("csv", false, "label,cat,multi,dense", "|", pooling,
                          "0:1");
}

const std::vector<std::string>& MixedLines() {
  static const auto* lines = new std::vector<std::string>{
      "1,a,x|y|z,1", "0,a,x,2", "1,b,y|y,3", "0,c,,4", "1,b,z|x,5"};
  return *lines;
}

void FillRandom(std::vector<float>* values, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& value : *values) value = uniform(rng);
}

TEST(ModelInputsTest, CriteoBatchesHaveNoPooledRowsAndShareTheWideRows) {
  const InputLayout layout =
      *MakeInputLayout("csv", false, "label,cat*2,dense", "|", "sum", "");
  ModelInputs inputs;
  inputs.Prepare(ParseAll(layout, {"1,a,b,1", "0,a,c,2"}), layout, kDim);
  EXPECT_EQ(inputs.unique_keys.size(), 3u);  // a, b (field 1), c
  EXPECT_TRUE(inputs.wide_keys.empty());
  EXPECT_TRUE(inputs.wide_index.empty());
  EXPECT_TRUE(inputs.pool_end.empty());
  EXPECT_EQ(inputs.index, (std::vector<int32_t>{0, 1, 0, 2}));
  EXPECT_EQ(inputs.embedding_rows.size(), 3u * kDim);
  EXPECT_EQ(inputs.wide_rows.size(), 3u);
  EXPECT_EQ(inputs.Step().wide_index, nullptr);
}

TEST(ModelInputsTest, PooledRowsAreTheSumOrMeanOfTheirKeysRows) {
  for (const char* pooling : {"sum", "mean"}) {
    const InputLayout layout = MixedLayout(pooling);
    const std::vector<Example> examples = ParseAll(layout, MixedLines());
    ModelInputs inputs;
    inputs.Prepare(examples, layout, kDim);
    ASSERT_EQ(inputs.embedding_rows.size(),
              inputs.embedding_row_count() * kDim);
    FillRandom(&inputs.embedding_rows, 1);
    FillRandom(&inputs.wide_rows, 2);
    inputs.PoolRows(kDim);
    absl::flat_hash_map<uint64_t, int> wide_position;
    for (size_t i = 0; i < inputs.wide_fetch_keys().size(); ++i)
      wide_position[inputs.wide_fetch_keys()[i]] = i;
    const int fields = layout.fields(), slots = layout.slots();
    for (size_t b = 0; b < examples.size(); ++b) {
      const Example& example = examples[b];
      for (int s = 0; s < slots; ++s) {
        const uint32_t begin = example.slot_begin(s), end = example.slot_end[s];
        const float scale =
            std::string(pooling) == "mean" ? 1.0f / (end - begin) : 1.0f;
        // The wide part: every slot, crosses included.
        float wide = 0;
        for (uint32_t k = begin; k < end; ++k)
          wide += inputs.wide_rows[wide_position.at(example.keys[k])];
        const int32_t wide_row = inputs.wide_index[b * slots + s];
        EXPECT_FLOAT_EQ(inputs.wide_rows[wide_row], wide * scale)
            << pooling << " example " << b << " slot " << s;
        if (s >= fields) continue;
        // The embeddings: the fields only.
        const int32_t row = inputs.index[b * fields + s];
        for (int d = 0; d < kDim; ++d) {
          float sum = 0;
          for (uint32_t k = begin; k < end; ++k) {
            sum +=
                inputs.embedding_rows[wide_position.at(example.keys[k]) * kDim +
                                      d];
          }
          EXPECT_FLOAT_EQ(inputs.embedding_rows[row * kDim + d], sum * scale)
              << pooling << " example " << b << " field " << s;
        }
      }
    }
    // y|y pools the same row twice; an empty multi field is one key.
    EXPECT_EQ(examples[2].slot_end[1] - examples[2].slot_end[0], 2u);
    EXPECT_EQ(examples[3].slot_end[1] - examples[3].slot_end[0], 1u);
  }
}

TEST(ModelInputsTest, FoldingGradientsIsTheAdjointOfPooling) {
  // For rows R and gradients G over every row (fetched and pooled):
  // <Pool(R), G> = <R, Fold(G)>, which holds only if each pooled row's
  // gradient reaches each of its members with the pooling's scale.
  for (const char* pooling : {"sum", "mean"}) {
    const InputLayout layout = MixedLayout(pooling);
    ModelInputs inputs;
    inputs.Prepare(ParseAll(layout, MixedLines()), layout, kDim);
    FillRandom(&inputs.embedding_rows, 3);
    FillRandom(&inputs.wide_rows, 4);
    const size_t fetched = inputs.unique_keys.size();
    const size_t wide_fetched = inputs.wide_fetch_keys().size();
    ASSERT_GT(inputs.wide_row_count(), wide_fetched);
    ASSERT_GT(inputs.embedding_row_count(), fetched);
    ASSERT_GT(wide_fetched, fetched);  // the crosses' keys
    const std::vector<float> rows(
        inputs.embedding_rows.begin(),
        inputs.embedding_rows.begin() + fetched * kDim);
    const std::vector<float> wide_rows(inputs.wide_rows.begin(),
                                       inputs.wide_rows.begin() + wide_fetched);
    inputs.PoolRows(kDim);
    std::vector<float> grads(inputs.embedding_rows.size());
    std::vector<float> wide_grads(inputs.wide_rows.size());
    FillRandom(&grads, 5);
    FillRandom(&wide_grads, 6);
    double pooled_dot = 0, wide_pooled_dot = 0;
    for (size_t i = 0; i < grads.size(); ++i)
      pooled_dot += inputs.embedding_rows[i] * grads[i];
    for (size_t i = 0; i < wide_grads.size(); ++i)
      wide_pooled_dot += inputs.wide_rows[i] * wide_grads[i];
    inputs.FoldPooledGradients(kDim, &grads, &wide_grads);
    ASSERT_EQ(grads.size(), fetched * kDim);
    ASSERT_EQ(wide_grads.size(), wide_fetched);
    double folded_dot = 0, wide_folded_dot = 0;
    for (size_t i = 0; i < grads.size(); ++i) folded_dot += rows[i] * grads[i];
    for (size_t i = 0; i < wide_grads.size(); ++i)
      wide_folded_dot += wide_rows[i] * wide_grads[i];
    EXPECT_NEAR(pooled_dot, folded_dot, 1e-4) << pooling;
    EXPECT_NEAR(wide_pooled_dot, wide_folded_dot, 1e-4) << pooling;
  }
}

TEST(ModelInputsTest, WithoutCrossesTheWideRowsAreTheEmbeddingRows) {
  // A multi field and no cross: no wide index, and the pooled rows sit at
  // the same positions in both tables.
  const InputLayout layout =
      *MakeInputLayout("csv", false, "label,cat,multi", "|", "sum", "");
  ModelInputs inputs;
  inputs.Prepare(ParseAll(layout, {"1,a,x|y", "0,b,y"}), layout, kDim);
  EXPECT_TRUE(inputs.wide_index.empty());
  EXPECT_EQ(inputs.Step().wide_index, nullptr);
  ASSERT_EQ(inputs.unique_keys.size(), 4u);  // a, x, y, b
  ASSERT_EQ(inputs.pool_end.size(), 1u);
  EXPECT_EQ(inputs.index[1], 4);  // the pool, after the 4 fetched rows
  EXPECT_EQ(inputs.wide_rows.size(), 5u);
  EXPECT_EQ(inputs.embedding_rows.size(), 5u * kDim);
  FillRandom(&inputs.embedding_rows, 7);
  FillRandom(&inputs.wide_rows, 8);
  inputs.PoolRows(kDim);
  EXPECT_FLOAT_EQ(inputs.wide_rows[4],
                  inputs.wide_rows[1] + inputs.wide_rows[2]);
  // lr: no embeddings at all; the wide rows still pool.
  ModelInputs lr;
  lr.Prepare(ParseAll(layout, {"1,a,x|y"}), layout, /*embedding_dim=*/0);
  EXPECT_TRUE(lr.embedding_rows.empty());
  FillRandom(&lr.wide_rows, 9);
  lr.PoolRows(0);
  EXPECT_FLOAT_EQ(lr.wide_rows[3], lr.wide_rows[1] + lr.wide_rows[2]);
  std::vector<float> no_embeddings;
  std::vector<float> wide_grads = {0.5f, 0.0f, 0.0f, 2.0f};
  lr.FoldPooledGradients(0, &no_embeddings, &wide_grads);
  EXPECT_EQ(wide_grads, (std::vector<float>{0.5f, 2.0f, 2.0f}));
}

}  // namespace
}  // namespace ps::worker
