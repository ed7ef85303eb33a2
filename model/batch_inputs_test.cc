#include "model/batch_inputs.h"

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/builtin_specs.h"
#include "model/input/line_parser.h"

namespace ps::model {
namespace {

// label, two dense columns, a cat field, a multi field.
constexpr char kColumns[] = "label,dense*2,cat,multi";

// Two tables; the multi field pools by MAX into "emb" and by MEAN (as a
// cross's part, through the cross's own pooling) into "wide"; the first
// dense column bucketized, both standardized.
constexpr char kSpec[] = R"(
name: "m"
table { name: "emb" dim: 2 }
table { name: "wide" dim: 1 }
field { name: "c" column: 3 }
field { name: "m" column: 4 pooling: MAX }
cross { name: "c_x_m" fields: "c" fields: "m" pooling: MEAN }
dense { name: "d" columns: 1 columns: 2 transform: STANDARDIZE
        mean: 1 mean: 10 std: 2 std: 5 }
dense { name: "b" columns: 1 transform: BUCKETIZE boundaries: 2
        boundaries: 4 }
layer { name: "e" inputs: "c" inputs: "m" inputs: "b"
        embedding { table: "emb" } }
layer { name: "w" inputs: "c" inputs: "c_x_m" wide { table: "wide" } }
layer { name: "x" inputs: "e" inputs: "d" concat {} }
layer { name: "deep" inputs: "x" mlp { units: 1 } }
layer { name: "out" inputs: "deep" inputs: "w" add {} }
output: "out"
)";

struct Fixture {
  Fixture() {
    layout = *MakeInputLayout("csv", false, kColumns, "|", "sum", "");
    auto parsed = model::ParseModelSpec(kSpec);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    auto planned = model::ModelPlan::Create(*parsed, ColumnUses(layout));
    EXPECT_TRUE(planned.ok()) << planned.status();
    plan = *std::move(planned);
    EXPECT_TRUE(LayoutForPlan(plan, &layout).ok());
  }
  std::vector<Example> Parse(const std::vector<std::string>& lines) const {
    std::vector<Example> examples(lines.size());
    for (size_t i = 0; i < lines.size(); ++i)
      EXPECT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok()) << lines[i];
    return examples;
  }

  InputLayout layout;
  model::ModelPlan plan;
};

TEST(BatchInputsTest, LayoutForPlanTakesTheSpecsCrosses) {
  Fixture fixture;
  ASSERT_EQ(fixture.layout.crosses.size(), 1u);
  EXPECT_EQ(fixture.layout.crosses[0], std::make_pair(0, 1));
  InputLayout other =
      *MakeInputLayout("csv", false, kColumns, "|", "sum", "1:0");
  EXPECT_EQ(LayoutForPlan(fixture.plan, &other).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BatchInputsTest, LooksUpEachSlotInItsTable) {
  Fixture fixture;
  BatchInputs inputs(&fixture.plan, fixture.layout);
  inputs.Prepare(fixture.Parse({"1,1,10,a,x|y", "0,3,15,a,y", "1,5,0,b,x|x"}));
  ASSERT_EQ(inputs.batch, 3);
  EXPECT_EQ(inputs.labels, (std::vector<float>{1, 0, 1}));
  // Lookups: emb: c, m, b; wide: c, c_x_m.
  ASSERT_EQ(fixture.plan.lookups().size(), 5u);
  const BatchInputs::TableRows& emb = inputs.tables[0];
  // c: a, b; m: x, y; b: buckets 0, 1, 2.
  EXPECT_EQ(emb.keys.size(), 7u);
  EXPECT_EQ(emb.pool_end.size(), 2u);  // m of examples 0 and 2
  EXPECT_EQ(emb.rows.size(), (7u + 2u) * 2);
  const auto index = [&](int lookup, int example) {
    return inputs.lookup_index[lookup * 3 + example];
  };
  EXPECT_EQ(index(0, 0), index(0, 1));  // a twice
  EXPECT_NE(index(0, 0), index(0, 2));
  EXPECT_EQ(index(1, 0), 7);  // the first pool
  EXPECT_EQ(index(1, 2), 8);
  EXPECT_LT(index(1, 1), 7);  // y alone
  // Buckets of 1, 3, 5 under boundaries 2, 4: three keys.
  EXPECT_EQ(emb.keys[index(2, 0)], BucketKey(0, 0));
  EXPECT_EQ(emb.keys[index(2, 1)], BucketKey(0, 1));
  EXPECT_EQ(emb.keys[index(2, 2)], BucketKey(0, 2));
  const BatchInputs::TableRows& wide = inputs.tables[1];
  // c: a, b; crosses: (a,x), (a,y) pooled, (a,y) alone, (b,x) twice pooled:
  // a, b, (a,x), (a,y), (b,x).
  EXPECT_EQ(wide.keys.size(), 5u);
  EXPECT_EQ(wide.pool_end.size(), 2u);
  EXPECT_EQ(wide.scale, (std::vector<float>{0.5f, 0.5f}));
  // The dense group, standardized per column.
  ASSERT_EQ(inputs.dense.size(), 1u);
  EXPECT_EQ(inputs.dense[0],
            (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f, 2.0f, -2.0f}));
}

// A BatchInputs prepared again, for a smaller batch or a larger one, holds
// what one prepared afresh for that batch holds: nothing of the batch
// before it.
TEST(BatchInputsTest, PreparedAgainItHoldsOnlyTheNewBatch) {
  Fixture fixture;
  std::mt19937 random(3);
  const auto batch = [&](int lines) {
    std::vector<std::string> text;
    for (int i = 0; i < lines; ++i) {
      text.push_back(absl::StrCat(i % 2, ",", random() % 7, ",", random() % 20,
                                  ",c", random() % 50, ",m", random() % 40,
                                  "|m", random() % 40));
    }
    return fixture.Parse(text);
  };
  BatchInputs reused(&fixture.plan, fixture.layout);
  for (const int lines : {300, 40, 2000, 7}) {
    const std::vector<Example> examples = batch(lines);
    reused.Prepare(examples);
    BatchInputs fresh(&fixture.plan, fixture.layout);
    fresh.Prepare(examples);
    ASSERT_EQ(reused.batch, lines);
    EXPECT_EQ(reused.lookup_index, fresh.lookup_index) << lines;
    for (size_t t = 0; t < fresh.tables.size(); ++t) {
      EXPECT_EQ(reused.tables[t].keys, fresh.tables[t].keys) << lines;
      EXPECT_EQ(reused.tables[t].members, fresh.tables[t].members) << lines;
      EXPECT_EQ(reused.tables[t].pool_end, fresh.tables[t].pool_end) << lines;
    }
  }
}

// Table "short"'s lookups begin "long"'s (it copies long's first keys);
// "other" reads the same slots in another order (it hashes its own).
constexpr char kSharingSpec[] = R"(
name: "sharing"
table { name: "short" dim: 1 }
table { name: "long" dim: 2 }
table { name: "other" dim: 1 }
field { name: "c" column: 3 }
field { name: "m" column: 4 pooling: MEAN }
cross { name: "c_x_m" fields: "c" fields: "m" }
layer { name: "s" inputs: "c" inputs: "m" wide { table: "short" } }
layer { name: "l" inputs: "c" inputs: "m" inputs: "c_x_m"
        embedding { table: "long" } }
layer { name: "o" inputs: "m" inputs: "c" wide { table: "other" } }
layer { name: "deep" inputs: "l" mlp { units: 1 } }
layer { name: "out" inputs: "deep" inputs: "s" inputs: "o" add {} }
output: "out"
)";

TEST(BatchInputsTest, EveryLookupReadsItsExamplesKeysWhetherCopiedOrNot) {
  InputLayout layout = *MakeInputLayout("csv", false, kColumns, "|", "sum", "");
  auto parsed = model::ParseModelSpec(kSharingSpec);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto plan = model::ModelPlan::Create(*parsed, ColumnUses(layout));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(LayoutForPlan(*plan, &layout).ok());
  BatchInputs inputs(&*plan, layout);
  const std::vector<std::string> lines = {"1,0,0,a,x|y", "0,0,0,b,y",
                                          "1,0,0,a,z|x|y", "0,0,0,c,x"};
  std::vector<Example> examples(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    ASSERT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok());
  inputs.Prepare(examples);
  // The example slot of each categorical node: c, m, then the cross.
  const std::map<std::string, int> example_slot = {
      {"c", 0}, {"m", 1}, {"c_x_m", 2}};
  const int batch = static_cast<int>(examples.size());
  for (size_t l = 0; l < plan->lookups().size(); ++l) {
    const model::Lookup& lookup = plan->lookups()[l];
    const BatchInputs::TableRows& table = inputs.tables[lookup.table];
    const std::string& node = plan->nodes()[lookup.node].name;
    for (int b = 0; b < batch; ++b) {
      const Example& example = examples[b];
      const int slot = example_slot.at(node);
      std::vector<uint64_t> expected(
          example.keys.begin() + example.slot_begin(slot),
          example.keys.begin() + example.slot_end[slot]);
      const int32_t index = inputs.lookup_index[l * batch + b];
      std::vector<uint64_t> read;
      if (index < static_cast<int32_t>(table.keys.size())) {
        read.push_back(table.keys[index]);
      } else {
        const size_t pool = index - table.keys.size();
        ASSERT_LT(pool, table.pool_end.size());
        for (uint32_t m = table.pool_begin(pool); m < table.pool_end[pool];
             ++m) {
          read.push_back(table.keys[table.members[m]]);
        }
      }
      EXPECT_EQ(read, expected)
          << "table " << lookup.table << " node " << node << " example " << b;
    }
  }
  // Each table holds each of its keys once.
  for (const BatchInputs::TableRows& table : inputs.tables) {
    std::set<uint64_t> distinct(table.keys.begin(), table.keys.end());
    EXPECT_EQ(distinct.size(), table.keys.size());
  }
  // short holds c's and m's keys alone; long the cross's too.
  EXPECT_LT(inputs.tables[0].keys.size(), inputs.tables[1].keys.size());
  EXPECT_EQ(inputs.tables[0].keys.size(), inputs.tables[2].keys.size());
}

TEST(BatchInputsTest, MaxPoolsPerDimensionAndFoldsToTheMaximum) {
  Fixture fixture;
  BatchInputs inputs(&fixture.plan, fixture.layout);
  inputs.Prepare(fixture.Parse({"1,1,10,a,x|y"}));
  BatchInputs::TableRows& emb = inputs.tables[0];
  const int32_t x = inputs.lookup_index[1] == 0 ? -1 : emb.members[0];
  const int32_t y = emb.members[1];
  ASSERT_GE(x, 0);
  // x = (1, -5), y = (3, -7): the maximum takes x's second and y's first.
  std::fill(emb.rows.begin(), emb.rows.end(), 0.0f);
  emb.rows[x * 2] = 1;
  emb.rows[x * 2 + 1] = -5;
  emb.rows[y * 2] = 3;
  emb.rows[y * 2 + 1] = -7;
  inputs.PoolRows();
  const size_t pooled = emb.keys.size() * 2;
  EXPECT_EQ(emb.rows[pooled], 3);
  EXPECT_EQ(emb.rows[pooled + 1], -5);
  std::vector<std::vector<float>> grads = {
      std::vector<float>(emb.rows.size(), 0.0f),
      std::vector<float>(inputs.tables[1].row_count(), 0.0f)};
  grads[0][pooled] = 10;
  grads[0][pooled + 1] = 20;
  inputs.FoldPooledGradients(&grads);
  ASSERT_EQ(grads[0].size(), emb.keys.size() * 2);
  EXPECT_EQ(grads[0][y * 2], 10);
  EXPECT_EQ(grads[0][x * 2 + 1], 20);
  EXPECT_EQ(grads[0][x * 2], 0);
  EXPECT_EQ(grads[0][y * 2 + 1], 0);
}

TEST(BatchInputsTest, MeanPoolsAndFoldsScaled) {
  Fixture fixture;
  BatchInputs inputs(&fixture.plan, fixture.layout);
  inputs.Prepare(fixture.Parse({"1,1,10,a,x|y"}));
  BatchInputs::TableRows& wide = inputs.tables[1];
  // Keys: a, then the crosses (a,x) and (a,y), pooled by MEAN.
  ASSERT_EQ(wide.keys.size(), 3u);
  ASSERT_EQ(wide.pool_end.size(), 1u);
  wide.rows = {100, 4, 8, 0};
  inputs.PoolRows();
  EXPECT_EQ(wide.rows[3], 6);
  std::vector<std::vector<float>> grads = {
      std::vector<float>(inputs.tables[0].rows.size(), 0.0f), {0, 0, 0, 2}};
  inputs.FoldPooledGradients(&grads);
  EXPECT_EQ(grads[1], (std::vector<float>{0, 1, 1}));
}

TEST(BatchInputsTest, FoldingGradientsIsTheAdjointOfPooling) {
  // For rows R and gradients G over every row (fetched and pooled):
  // <Pool(R), G> = <R, Fold(G)>, which holds only if each pooled row's
  // gradient reaches its members with the pooling's scale (SUM, MEAN), or
  // the member that held the maximum (MAX, locally linear). The fixture's
  // multi field pools by MAX into "emb" and its cross by MEAN into "wide";
  // a SUM field is added through a spec of its own below.
  for (const char* pooling : {"MAX", "SUM"}) {
    std::string spec = kSpec;
    const size_t at = spec.find("pooling: MAX");
    spec.replace(at, 12, std::string("pooling: ") + pooling);
    InputLayout layout =
        *MakeInputLayout("csv", false, kColumns, "|", "sum", "");
    auto parsed = model::ParseModelSpec(spec);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto plan = model::ModelPlan::Create(*parsed, ColumnUses(layout));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(LayoutForPlan(*plan, &layout).ok());
    BatchInputs inputs(&*plan, layout);
    std::vector<Example> examples(4);
    const char* lines[] = {"1,1,10,a,x|y|z", "0,3,15,a,y", "1,5,0,b,y|y",
                           "0,2,2,c,z|x"};
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok());
    inputs.Prepare(examples);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<std::vector<float>> fetched, grads;
    for (BatchInputs::TableRows& table : inputs.tables) {
      ASSERT_FALSE(table.pool_end.empty());
      for (float& v : table.rows) v = uniform(rng);
      fetched.emplace_back(table.rows.begin(),
                           table.rows.begin() + table.keys.size() * table.dim);
      grads.emplace_back(table.rows.size());
      for (float& g : grads.back()) g = uniform(rng);
    }
    inputs.PoolRows();
    for (size_t t = 0; t < inputs.tables.size(); ++t) {
      double pooled_dot = 0;
      for (size_t i = 0; i < grads[t].size(); ++i)
        pooled_dot += inputs.tables[t].rows[i] * grads[t][i];
      std::vector<std::vector<float>> folded = grads;
      inputs.FoldPooledGradients(&folded);
      ASSERT_EQ(folded[t].size(), fetched[t].size());
      double folded_dot = 0;
      for (size_t i = 0; i < folded[t].size(); ++i)
        folded_dot += fetched[t][i] * folded[t][i];
      EXPECT_NEAR(pooled_dot, folded_dot, 1e-4) << pooling << " table " << t;
    }
  }
}

// A table stored with another (declared before it here): the stored rows
// are copied out into each table's rows before pooling (MAX, per column),
// and the folded gradients packed back side by side: the same rows and
// gradients as the two tables fetched apart.
TEST(BatchInputsTest, TablesStoredTogetherPoolAndFoldAsApart) {
  // The embedding's widths: copied as sizes known at compile time (16) or
  // not (2, 33).
  for (const int dim : {2, 16, 33}) {
    SCOPED_TRACE(absl::StrCat("dim ", dim));
    std::string together_text = R"(
name: "m"
table { name: "wide" dim: 1 stored_with: "emb" }
table { name: "emb" dim: 2 }
field { name: "c" column: 3 }
field { name: "m" column: 4 pooling: MAX }
layer { name: "e" inputs: "c" inputs: "m" embedding { table: "emb" } }
layer { name: "w" inputs: "c" inputs: "m" wide { table: "wide" } }
layer { name: "deep" inputs: "e" mlp { units: 1 } }
layer { name: "out" inputs: "deep" inputs: "w" add {} }
output: "out"
)";
    together_text.replace(together_text.find("dim: 2"), 6,
                          absl::StrCat("dim: ", dim));
    std::string apart_text = together_text;
    const std::string stored_with = " stored_with: \"emb\"";
    apart_text.erase(apart_text.find(stored_with), stored_with.size());
    InputLayout layout =
        *MakeInputLayout("csv", false, kColumns, "|", "sum", "");
    auto together_spec = model::ParseModelSpec(together_text);
    auto apart_spec = model::ParseModelSpec(apart_text);
    ASSERT_TRUE(together_spec.ok() && apart_spec.ok());
    auto together_plan =
        model::ModelPlan::Create(*together_spec, ColumnUses(layout));
    auto apart_plan = model::ModelPlan::Create(*apart_spec, ColumnUses(layout));
    ASSERT_TRUE(together_plan.ok()) << together_plan.status();
    ASSERT_TRUE(apart_plan.ok()) << apart_plan.status();
    ASSERT_EQ(together_plan->stored_tables().size(), 1u);
    EXPECT_EQ(together_plan->stored_tables()[0].tables,
              std::vector<int>({1, 0}));
    EXPECT_EQ(together_plan->stored_tables()[0].dim, dim + 1);
    ASSERT_EQ(apart_plan->stored_tables().size(), 2u);

    std::vector<Example> examples(4);
    const char* lines[] = {"1,1,10,a,x|y|z", "0,3,15,a,y", "1,5,0,b,y|y",
                           "0,2,2,c,z|x"};
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok());
    BatchInputs together(&*together_plan, layout);
    BatchInputs apart(&*apart_plan, layout);
    together.Prepare(examples);
    apart.Prepare(examples);
    const std::vector<uint64_t>& keys = together.StoredKeys(0);
    ASSERT_EQ(keys, apart.tables[1].keys);
    ASSERT_EQ(keys, apart.tables[0].keys);
    ASSERT_FALSE(apart.tables[1].pool_end.empty());
    // Row k of the stored table: emb's dim columns, then wide's one.
    const int row = dim + 1;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    float* joined = together.StoredRows(0);
    for (size_t k = 0; k < keys.size(); ++k) {
      for (int c = 0; c < row; ++c) {
        const float value = uniform(rng);
        joined[k * row + c] = value;
        if (c < dim) {
          apart.tables[1].rows[k * dim + c] = value;
        } else {
          apart.tables[0].rows[k] = value;
        }
      }
    }
    together.PoolRows();
    apart.PoolRows();
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(together.tables[t].rows, apart.tables[t].rows) << t;
      EXPECT_EQ(together.tables[t].argmax, apart.tables[t].argmax) << t;
    }
    std::vector<std::vector<float>> grads(2);
    for (size_t t = 0; t < 2; ++t) {
      grads[t].resize(apart.tables[t].rows.size());
      for (float& g : grads[t]) g = uniform(rng);
    }
    std::vector<std::vector<float>> apart_grads = grads;
    apart.FoldPooledGradients(&apart_grads);
    together.FoldPooledGradients(&grads);
    const std::vector<std::vector<float>> stored =
        together.StoredGradients(&grads);
    ASSERT_EQ(stored.size(), 1u);
    ASSERT_EQ(stored[0].size(), keys.size() * row);
    for (size_t k = 0; k < keys.size(); ++k) {
      for (int c = 0; c < dim; ++c) {
        EXPECT_EQ(stored[0][k * row + c], apart_grads[1][k * dim + c]) << k;
      }
      EXPECT_EQ(stored[0][k * row + dim], apart_grads[0][k]) << k;
    }
  }
}

TEST(BatchInputsTest, WeightsScaleEachExampleByItsWeightOverTheMean) {
  InputLayout layout =
      *MakeInputLayout("csv", false, "label,cat,weight", "|", "sum", "");
  model::BuiltinOptions options;
  auto spec = model::BuiltinModelSpec("lr", ColumnUses(layout), options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = model::ModelPlan::Create({*spec, {}}, ColumnUses(layout));
  ASSERT_TRUE(plan.ok()) << plan.status();
  BatchInputs inputs(&*plan, layout);
  auto parse = [&](const std::vector<std::string>& lines) {
    std::vector<Example> examples(lines.size());
    for (size_t i = 0; i < lines.size(); ++i)
      EXPECT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok()) << lines[i];
    return examples;
  };
  inputs.Prepare(parse({"1,a,3", "0,b,1", "0,c,2"}));
  ASSERT_EQ(inputs.loss_scale.size(), 3u);
  EXPECT_FLOAT_EQ(inputs.loss_scale[0], 1.5f);  // 3 over the mean, 2
  EXPECT_FLOAT_EQ(inputs.loss_scale[1], 0.5f);
  EXPECT_FLOAT_EQ(inputs.loss_scale[2], 1.0f);
  EXPECT_EQ(inputs.Inputs().loss_scale, inputs.loss_scale.data());
  // The same weight everywhere is the plain mean.
  inputs.Prepare(parse({"1,a,4", "0,b,4"}));
  EXPECT_TRUE(inputs.loss_scale.empty());
  EXPECT_EQ(inputs.Inputs().loss_scale, nullptr);
}

// Two tasks on two named labels, one of them weighted 2.
constexpr char kTwoTaskSpec[] = R"(
name: "m"
table { name: "wide" dim: 1 }
field { name: "c" column: 2 }
layer { name: "ctr" inputs: "c" wide { table: "wide" } }
layer { name: "cvr" inputs: "c" wide { table: "wide" } }
task { name: "ctr" label: "click" output: "ctr" }
task { name: "cvr" label: "convert" output: "cvr" loss_weight: 2 }
)";

TEST(BatchInputsTest, EachTaskScalesItsKnownExamplesByWeightOverTheirMean) {
  InputLayout layout = *MakeInputLayout(
      "csv", false, "label:convert,label:click,cat,weight", "|", "sum", "");
  auto parsed = model::ParseModelSpec(kTwoTaskSpec);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto plan = PlanForLayout(*parsed, layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The tasks in spec order, each reading its label by name.
  EXPECT_EQ(plan->tasks()[0].label, 1);
  EXPECT_EQ(plan->tasks()[1].label, 0);
  BatchInputs inputs(&*plan, layout);
  std::vector<Example> examples(4);
  const char* lines[] = {",1,a,3", "1,1,b,1", "0,0,c,2", ",,d,1"};
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok()) << lines[i];
  inputs.Prepare(examples);
  ASSERT_EQ(inputs.labels.size(), 8u);
  // Task-major: ctr's labels (click), then cvr's (convert).
  EXPECT_EQ(inputs.labels, (std::vector<float>{1, 1, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(inputs.label_known, (std::vector<uint8_t>{1, 1, 1, 0, 0, 1, 1, 0}));
  ASSERT_EQ(inputs.loss_scale.size(), 8u);
  // ctr knows weights 3, 1, 2 (mean 2) of a batch of 4: w * 4 / 6.
  EXPECT_FLOAT_EQ(inputs.loss_scale[0], 2.0f);
  EXPECT_FLOAT_EQ(inputs.loss_scale[1], 4.0f / 6);
  EXPECT_FLOAT_EQ(inputs.loss_scale[2], 8.0f / 6);
  EXPECT_EQ(inputs.loss_scale[3], 0.0f);
  // cvr knows weights 1, 2: w * 4 / 3, times its loss weight 2.
  EXPECT_EQ(inputs.loss_scale[4], 0.0f);
  EXPECT_FLOAT_EQ(inputs.loss_scale[5], 8.0f / 3);
  EXPECT_FLOAT_EQ(inputs.loss_scale[6], 16.0f / 3);
  EXPECT_EQ(inputs.loss_scale[7], 0.0f);
  // A task that knows no label of the batch has no loss, not a NaN.
  inputs.Prepare({examples[3]});
  EXPECT_EQ(inputs.loss_scale, (std::vector<float>{0.0f, 0.0f}));
}

// A sequence reads a seq column's most recent items first, the field's
// missing key where it has none, with a mask; a field of it pools its most
// recent max_length items.
TEST(BatchInputsTest, SequencesReadTheMostRecentItemsFirstAndMaskTheRest) {
  InputLayout layout =
      *MakeInputLayout("csv", false, "label,cat,seq", "|", "sum", "");
  auto parsed = model::ParseModelSpec(R"(
name: "m"
table { name: "emb" dim: 2 }
field { name: "recent" column: 2 max_length: 2 }
sequence { name: "history" column: 2 max_length: 3 }
layer { name: "pooled" inputs: "recent" embedding { table: "emb" } }
layer { name: "keys" inputs: "history" embedding { table: "emb" } }
layer { name: "x" inputs: "pooled" inputs: "keys" concat {} }
layer { name: "out" inputs: "x" mlp { units: 1 } }
output: "out"
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto plan = PlanForLayout(*parsed, layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->sequence_nodes().size(), 1u);
  BatchInputs inputs(&*plan, layout);
  std::vector<Example> examples(3);
  const char* lines[] = {"1,a,x|y|z|w", "0,b,", "0,c,v"};
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(ParseLine(lines[i], layout, &examples[i]).ok()) << lines[i];
  inputs.Prepare(examples);
  const uint32_t field = 1;  // the seq column is the second field
  // Lookups: the field's slot, then the sequence's three positions.
  ASSERT_EQ(plan->lookups().size(), 4u);
  const auto key_of = [&](int lookup, int b) {
    int32_t row = inputs.lookup_index[lookup * 3 + b];
    return row < static_cast<int32_t>(inputs.tables[0].keys.size())
               ? inputs.tables[0].keys[row]
               : 0;  // a pooled row
  };
  EXPECT_EQ(key_of(1, 0), FeatureKey(field, "w"));
  EXPECT_EQ(key_of(2, 0), FeatureKey(field, "z"));
  EXPECT_EQ(key_of(3, 0), FeatureKey(field, "y"));
  EXPECT_EQ(key_of(1, 1), FeatureKey(field, ""));
  EXPECT_EQ(key_of(1, 2), FeatureKey(field, "v"));
  EXPECT_EQ(key_of(2, 2), FeatureKey(field, ""));
  EXPECT_EQ(inputs.sequence_masks[0],
            (std::vector<float>{1, 1, 1, 0, 0, 0, 1, 0, 0}));
  // The field pools "z" and "w" alone (its max_length): one pool of two.
  const BatchInputs::TableRows& table = inputs.tables[0];
  ASSERT_EQ(table.pool_end.size(), 1u);
  ASSERT_EQ(table.pool_end[0], 2u);
  EXPECT_EQ(table.keys[table.members[0]], FeatureKey(field, "z"));
  EXPECT_EQ(table.keys[table.members[1]], FeatureKey(field, "w"));
  EXPECT_EQ(inputs.Inputs().sequence_masks.size(), 1u);
}

// A sequence of seq:0 items reads field 0's keys: a candidate and an item of
// one id are one row.
TEST(BatchInputsTest, ASequenceOfAFieldsValuesSharesItsKeys) {
  InputLayout layout =
      *MakeInputLayout("csv", false, "label,cat,seq:0", "|", "sum", "");
  auto parsed = model::ParseModelSpec(R"(
name: "m"
table { name: "emb" dim: 2 }
field { name: "item" column: 1 }
sequence { name: "history" column: 2 max_length: 2 }
layer { name: "q" inputs: "item" embedding { table: "emb" } }
layer { name: "k" inputs: "history" embedding { table: "emb" } }
layer { name: "a" inputs: "q" inputs: "k" attention_pooling {} }
layer { name: "out" inputs: "a" mlp { units: 1 } }
output: "out"
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto plan = PlanForLayout(*parsed, layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  BatchInputs inputs(&*plan, layout);
  std::vector<Example> examples(2);
  ASSERT_TRUE(ParseLine("1,i7,i3|i7", layout, &examples[0]).ok());
  ASSERT_TRUE(ParseLine("0,i3,", layout, &examples[1]).ok());
  inputs.Prepare(examples);
  // Lookups: the item, then the history's two positions.
  const auto& index = inputs.lookup_index;
  EXPECT_EQ(index[0 * 2 + 0], index[1 * 2 + 0]);  // i7, and its latest item
  EXPECT_EQ(index[0 * 2 + 1], index[2 * 2 + 0]);  // i3, and the item before
  EXPECT_EQ(inputs.tables[0].keys[index[1 * 2 + 1]], FeatureKey(0, ""));
  EXPECT_EQ(inputs.sequence_masks[0], (std::vector<float>{1, 1, 0, 0}));
}

TEST(BatchInputsTest, APlanOfOneOutputRefusesSeveralLabels) {
  InputLayout layout =
      *MakeInputLayout("csv", false, "label:a,label:b,cat", "|", "sum", "");
  model::BuiltinOptions options;
  auto spec = model::BuiltinModelSpec("lr", ColumnUses(layout), options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = PlanForLayout({*spec, {}}, layout);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("2 labels (a, b)"), std::string::npos)
      << plan.status();
}

TEST(BatchInputsTest, BuiltinsReadTheLayoutsFieldsAndLog1pDense) {
  InputLayout layout =
      *MakeInputLayout("csv", false, kColumns, "|", "mean", "0:1");
  model::BuiltinOptions options;
  options.crosses = layout.crosses;
  options.pooling = model::Field::MEAN;
  auto spec = model::BuiltinModelSpec("wide_deep", ColumnUses(layout), options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = model::ModelPlan::Create({*spec, {}}, ColumnUses(layout));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(LayoutForPlan(*plan, &layout).ok());
  BatchInputs inputs(&*plan, layout);
  std::vector<Example> examples(1);
  ASSERT_TRUE(ParseLine("1,3,-2,a,x|y", layout, &examples[0]).ok());
  inputs.Prepare(examples);
  ASSERT_EQ(inputs.dense.size(), 1u);
  EXPECT_FLOAT_EQ(inputs.dense[0][0], std::log1p(3.0f));
  EXPECT_EQ(inputs.dense[0][1], 0.0f);
  // embedding: a, x, y + one pool; wide: the same and the cross pool.
  EXPECT_EQ(inputs.tables[0].keys.size(), 3u);
  EXPECT_EQ(inputs.tables[0].pool_end.size(), 1u);
  EXPECT_EQ(inputs.tables[1].keys.size(), 5u);
  EXPECT_EQ(inputs.tables[1].pool_end.size(), 2u);
}

}  // namespace
}  // namespace ps::model
