#include "model/model_plan.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "model/builtin_specs.h"

namespace ps::model {
namespace {

// label, dense x 2, cat x 3.
const std::vector<ColumnUse> kColumns = {
    ColumnUse::kOther,       ColumnUse::kDense,       ColumnUse::kDense,
    ColumnUse::kCategorical, ColumnUse::kCategorical, ColumnUse::kCategorical};

absl::Status PlanStatus(const std::string& text) {
  absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(text);
  if (!parsed.ok()) return parsed.status();
  return ModelPlan::Create(*parsed, kColumns).status();
}

// A valid spec (line numbers matter to the tests below: "deep" is on line
// 9).
constexpr char kValid[] = R"(name: "mine"
table { name: "emb" dim: 4 }
field { name: "a" column: 3 }
field { name: "b" column: 4 }
field { name: "c" column: 5 }
dense { name: "d" columns: 1 columns: 2 }
layer { name: "e" inputs: "a" inputs: "b" inputs: "c" embedding { table: "emb" } }
layer { name: "x" inputs: "e" inputs: "d" concat {} }
layer { name: "deep" inputs: "x" mlp { units: 8 units: 1 } }
output: "deep"
)";

std::string Replace(std::string text, const std::string& from,
                    const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ModelPlanTest, PlansAValidSpec) {
  absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(kValid);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, kColumns);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // a, b, c, d, then e, x, deep.
  ASSERT_EQ(plan->nodes().size(), 7u);
  EXPECT_EQ(plan->nodes()[4].name, "e");
  EXPECT_EQ(plan->nodes()[4].width, 12);
  EXPECT_EQ(plan->nodes()[5].width, 14);
  EXPECT_EQ(plan->nodes()[plan->output()].name, "deep");
  EXPECT_EQ(plan->nodes()[plan->output()].line, 9);
  EXPECT_EQ(plan->lookups().size(), 3u);
  ASSERT_EQ(plan->dense_tensors().size(), 4u);
  EXPECT_EQ(plan->dense_tensors()[0].name, "deep.0.weights");
  EXPECT_EQ(plan->dense_tensors()[0].rows, 14);
  EXPECT_EQ(plan->dense_tensors()[0].cols, 8);
  EXPECT_EQ(plan->dense_tensors()[3].name, "deep.1.bias");
  // deep: 14 x 8, then 8 x 1; the biases add nothing.
  EXPECT_EQ(plan->DenseMultiplyAddsPerExample(), 14 * 8 + 8 * 1);
}

TEST(ModelPlanTest, CountsTheCrossesMultiplyAdds) {
  // x is 14 wide: a full-rank cross of 2 layers is 2 x 14 x 14, a rank-3
  // one 2 x (14 x 3 + 3 x 14).
  const std::string full = Replace(
      kValid, R"(layer { name: "deep" inputs: "x" mlp { units: 8 units: 1 } })",
      R"(layer { name: "crossed" inputs: "x" cross { num_layers: 2 } }
layer { name: "deep" inputs: "crossed" mlp { units: 1 } })");
  for (const auto& [text, cross] :
       {std::pair{full, 2 * 14 * 14},
        std::pair{Replace(full, "num_layers: 2", "num_layers: 2 low_rank: 3"),
                  2 * (14 * 3 + 3 * 14)},
        // Rank 1: v is one row, a matrix all the same.
        std::pair{Replace(full, "num_layers: 2", "num_layers: 2 low_rank: 1"),
                  2 * (14 * 1 + 1 * 14)}}) {
    absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, kColumns);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->DenseMultiplyAddsPerExample(), cross + 14);
  }
}

TEST(ModelPlanTest, LayersMayComeInAnyOrder) {
  // deep before its inputs in the text.
  const std::string text = std::string(R"(name: "mine"
table { name: "emb" dim: 4 }
field { name: "a" column: 3 }
layer { name: "deep" inputs: "e" mlp { units: 1 } }
layer { name: "e" inputs: "a" embedding { table: "emb" } }
output: "deep"
)");
  EXPECT_TRUE(PlanStatus(text).ok()) << PlanStatus(text);
}

TEST(ModelPlanTest, ASyntaxErrorNamesItsLine) {
  const absl::Status status =
      PlanStatus(Replace(kValid, "units: 8", "unitz: 8"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line 9"), std::string::npos) << status;
  EXPECT_NE(status.message().find("unitz"), std::string::npos) << status;
}

TEST(ModelPlanTest, AnUnknownInputIsRefusedWithTheNodeAndLine) {
  const absl::Status status =
      PlanStatus(Replace(kValid, "inputs: \"x\"", "inputs: \"y\""));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line 9"), std::string::npos) << status;
  EXPECT_NE(status.message().find("\"deep\""), std::string::npos) << status;
  EXPECT_NE(status.message().find("unknown input \"y\""), std::string::npos)
      << status;
}

TEST(ModelPlanTest, ACycleIsRefusedNamingItsLayers) {
  const absl::Status status =
      PlanStatus(Replace(kValid, "inputs: \"e\" inputs: \"d\"",
                         "inputs: \"e\" inputs: \"d\" inputs: \"deep\""));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cycle"), std::string::npos) << status;
  EXPECT_NE(status.message().find("x -> deep -> x"), std::string::npos)
      << status;
}

TEST(ModelPlanTest, AShapeMismatchIsRefused) {
  // add of widths 12 and 2.
  absl::Status status =
      PlanStatus(Replace(kValid, "inputs: \"e\" inputs: \"d\" concat {}",
                         "inputs: \"e\" inputs: \"d\" add {}"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line 8"), std::string::npos) << status;
  EXPECT_NE(status.message().find("one width"), std::string::npos) << status;
  // The output is not one logit wide.
  status =
      PlanStatus(Replace(kValid, "units: 8 units: 1", "units: 8 units: 2"));
  EXPECT_NE(status.message().find("width 1"), std::string::npos) << status;
  // fm over rows of 4 and a dense group of 2.
  status = PlanStatus(Replace(kValid, "inputs: \"e\" inputs: \"d\" concat {}",
                              "inputs: \"e\" inputs: \"d\" fm {}"));
  EXPECT_NE(status.message().find("rows of one width"), std::string::npos)
      << status;
}

TEST(ModelPlanTest, RefusesTheWrongKindOfInputOrColumn) {
  // An mlp reading a field's keys.
  absl::Status status =
      PlanStatus(Replace(kValid, "inputs: \"x\" mlp", "inputs: \"a\" mlp"));
  EXPECT_NE(status.message().find("cannot read keys"), std::string::npos)
      << status;
  // A field on a dense column.
  status = PlanStatus(
      Replace(kValid, "name: \"a\" column: 3", "name: \"a\" column: 1"));
  EXPECT_NE(status.message().find("line 3"), std::string::npos) << status;
  EXPECT_NE(status.message().find("not a cat, multi or seq column"),
            std::string::npos)
      << status;
  // A column --columns does not have.
  status = PlanStatus(Replace(kValid, "columns: 2", "columns: 9"));
  EXPECT_NE(status.message().find("column 9"), std::string::npos) << status;
  // An unknown table, and a wide layer on a table of dim 4.
  status = PlanStatus(Replace(kValid, "embedding { table: \"emb\" }",
                              "embedding { table: \"nope\" }"));
  EXPECT_NE(status.message().find("unknown table \"nope\""), std::string::npos)
      << status;
  status = PlanStatus(Replace(kValid, "embedding { table: \"emb\" }",
                              "wide { table: \"emb\" }"));
  EXPECT_NE(status.message().find("dim 1"), std::string::npos) << status;
}

TEST(ModelPlanTest, RefusesNamesUsedTwiceAndLayersThatLeadNowhere) {
  absl::Status status =
      PlanStatus(Replace(kValid, "name: \"b\"", "name: \"a\""));
  EXPECT_NE(status.message().find("used twice"), std::string::npos) << status;
  status = PlanStatus(Replace(
      kValid, "output:",
      "layer { name: \"spare\" inputs: \"x\" mlp { units: 1 } }\noutput:"));
  EXPECT_NE(status.message().find("\"spare\""), std::string::npos) << status;
  EXPECT_NE(status.message().find("does not lead to the output"),
            std::string::npos)
      << status;
  status = PlanStatus(Replace(kValid, "output: \"deep\"", ""));
  EXPECT_NE(status.message().find("output"), std::string::npos) << status;
}

// kValid with two tasks on labels "click" and "convert" in place of output.
std::string TwoTasks(const std::string& tasks) {
  return Replace(Replace(kValid, "output: \"deep\"", tasks),
                 "units: 8 units: 1",
                 "units: 8 units: 1 } }\nlayer { name: \"deep2\" inputs: "
                 "\"x\" mlp { units: 1");
}

absl::Status TwoLabelStatus(const std::string& text) {
  absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(text);
  if (!parsed.ok()) return parsed.status();
  const std::vector<std::string> labels = {"click", "convert"};
  return ModelPlan::Create(*parsed, kColumns, labels).status();
}

TEST(ModelPlanTest, TasksNameTheirLabelsAndOutputs) {
  const std::string valid = TwoTasks(
      "task { name: \"ctr\" label: \"click\" output: \"deep\" }\n"
      "task { name: \"cvr\" label: \"convert\" output: \"deep2\" "
      "loss_weight: 0.25 }");
  absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(valid);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<std::string> labels = {"click", "convert"};
  absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, kColumns, labels);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks().size(), 2u);
  EXPECT_EQ(plan->tasks()[1].name, "cvr");
  EXPECT_EQ(plan->tasks()[1].label, 1);
  EXPECT_EQ(plan->tasks()[1].loss_weight, 0.25f);
  EXPECT_EQ(plan->nodes()[plan->tasks()[1].output].name, "deep2");
  EXPECT_EQ(plan->tasks()[0].loss_weight, 1.0f);  // 0: 1
  EXPECT_EQ(plan->output(), plan->tasks()[0].output);

  struct Case {
    std::string text;
    const char* message;
  };
  const std::string ctr =
      "task { name: \"ctr\" label: \"click\" output: \"deep\" }\n";
  const Case cases[] = {
      {ctr + "task { name: \"cvr\" label: \"clicks\" output: \"deep2\" }",
       "not one of the click log's labels (click, convert"},
      {ctr + "task { name: \"cvr\" label: \"click\" output: \"deep2\" }",
       "learns label \"click\" already"},
      {ctr + "task { name: \"ctr\" label: \"convert\" output: \"deep2\" }",
       "used twice"},
      {ctr + "task { name: \"cv r\" label: \"convert\" output: \"deep2\" }",
       "letters, digits"},
      {ctr + "task { name: \"cvr\" label: \"convert\" output: \"nope\" }",
       "output \"nope\" is not a node"},
      {ctr + "task { name: \"cvr\" label: \"convert\" output: \"x\" }",
       "width 1"},
      {ctr + "task { name: \"cvr\" label: \"convert\" }", "names no node"},
      {ctr + "task { name: \"cvr\" label: \"convert\" output: \"deep2\" "
             "loss_weight: -1 }",
       "loss_weight"},
      // deep2 leads nowhere with one task.
      {ctr, "\"deep2\": it does not lead to the output \"deep\""},
      {ctr + "output: \"deep2\"", "not both"},
  };
  for (const Case& c : cases) {
    const absl::Status status = TwoLabelStatus(TwoTasks(c.text));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.text << "\n"
        << status;
  }
  // A task's error names its line.
  const absl::Status unknown = TwoLabelStatus(
      TwoTasks(ctr + "task { name: \"cvr\" label: \"x\" output: \"deep2\" }"));
  EXPECT_NE(unknown.message().find("line 12: task \"cvr\""), std::string::npos)
      << unknown;
  // One output on a click log of two labels: which one is not guessed.
  const absl::Status one_output = TwoLabelStatus(kValid);
  EXPECT_NE(one_output.message().find("2 labels (click, convert)"),
            std::string::npos)
      << one_output;
}

TEST(ModelPlanTest, AttentionPoolingReadsAQueryAndOneSequencesKeys) {
  // label, cat, seq.
  const std::vector<ColumnUse> columns = {
      ColumnUse::kOther, ColumnUse::kCategorical, ColumnUse::kSequence};
  const std::string header = R"(name: "din"
table { name: "emb" dim: 4 }
table { name: "other" dim: 3 }
field { name: "item" column: 1 }
sequence { name: "history" column: 2 max_length: 5 }
layer { name: "q" inputs: "item" embedding { table: "emb" } }
layer { name: "k" inputs: "history" embedding { table: "emb" } }
)";
  const auto status = [&](const std::string& rest) {
    absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(header + rest);
    if (!parsed.ok()) return parsed.status();
    return ModelPlan::Create(*parsed, columns).status();
  };
  absl::StatusOr<ParsedModelSpec> parsed =
      ParseModelSpec(header +
                     "layer { name: \"a\" inputs: \"q\" inputs: \"k\" "
                     "attention_pooling { units: 8 } }\n"
                     "layer { name: \"out\" inputs: \"a\" mlp { units: 1 } }\n"
                     "output: \"out\"");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, columns);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int a = 0;
  while (plan->nodes()[a].name != "a") ++a;
  EXPECT_EQ(plan->nodes()[a].width, 4);
  EXPECT_EQ(plan->nodes()[a].rows, 5);
  // [q, k, q - k, q * k] (16) -> 8 -> 1.
  const kernels::DenseTensorSpec& first =
      plan->dense_tensors()[plan->FirstTensor(a)];
  EXPECT_EQ(first.name, "a.0.weights");
  EXPECT_EQ(first.rows, 16);
  EXPECT_EQ(first.cols, 8);
  EXPECT_EQ(plan->dense_tensors()[plan->FirstTensor(a) + 2].cols, 1);

  struct Case {
    std::string rest;
    const char* message;
  };
  const std::string tail =
      "layer { name: \"out\" inputs: \"a\" mlp { units: 1 } }\n"
      "output: \"out\"";
  const Case cases[] = {
      {"layer { name: \"a\" inputs: \"k\" inputs: \"q\" attention_pooling "
       "{} }\n" +
           tail,
       "must be an embedding layer of one sequence"},
      {"layer { name: \"k3\" inputs: \"history\" embedding { table: "
       "\"other\" } }\nlayer { name: \"a\" inputs: \"q\" inputs: \"k3\" "
       "attention_pooling {} }\n" +
           tail,
       "the keys' dim is 3"},
      {"layer { name: \"a\" inputs: \"q\" attention_pooling {} }\n" + tail,
       "reads two inputs"},
      {"layer { name: \"a\" inputs: \"q\" inputs: \"k\" attention_pooling "
       "{ units: 0 } }\n" +
           tail,
       "units must be >= 1"},
  };
  for (const Case& c : cases) {
    const absl::Status s = status(c.rest);
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.rest << "\n"
                                                              << s;
  }
  // A sequence reads a seq column, of 1 to 1000 positions; a field's
  // max_length is a seq column's.
  absl::StatusOr<ParsedModelSpec> wrong = ParseModelSpec(
      "name: \"m\"\nsequence { name: \"s\" column: 1 "
      "max_length: 2 }\ntable { name: \"e\" dim: 2 }\n"
      "layer { name: \"o\" inputs: \"s\" wide { table: "
      "\"e\" } }\noutput: \"o\"");
  ASSERT_TRUE(wrong.ok());
  EXPECT_NE(ModelPlan::Create(*wrong, columns)
                .status()
                .message()
                .find("not a seq column"),
            std::string::npos);
  for (const char* text :
       {"name: \"m\"\nsequence { name: \"s\" column: 2 }\n",
        "name: \"m\"\nsequence { name: \"s\" column: 2 max_length: 1001 "
        "}\n",
        "name: \"m\"\nfield { name: \"f\" column: 1 max_length: 2 }\n"}) {
    absl::StatusOr<ParsedModelSpec> spec = ParseModelSpec(text);
    ASSERT_TRUE(spec.ok()) << text;
    const absl::Status s = ModelPlan::Create(*spec, columns).status();
    EXPECT_NE(s.message().find("max_length"), std::string::npos) << s;
  }
}

TEST(ModelPlanTest, ChecksTheDenseTransformsNumbers) {
  absl::Status status = PlanStatus(
      Replace(kValid, "columns: 1 columns: 2 }",
              "columns: 1 columns: 2 transform: STANDARDIZE mean: 1 std: 1 }"));
  EXPECT_NE(status.message().find("one mean and one std per column"),
            std::string::npos)
      << status;
  status = PlanStatus(
      Replace(kValid, "columns: 1 columns: 2 }",
              "columns: 1 columns: 2 transform: BUCKETIZE boundaries: 2 "
              "boundaries: 1 }"));
  EXPECT_NE(status.message().find("ascending"), std::string::npos) << status;
  status = PlanStatus(Replace(kValid, "columns: 1 columns: 2 }",
                              "columns: 1 columns: 2 boundaries: 1 }"));
  EXPECT_NE(status.message().find("BUCKETIZE"), std::string::npos) << status;
}

TEST(ModelPlanTest, RowsOfEmbeddingsOfDifferentDimsAreRefused) {
  // fm over an embedding of 4 and one of 8: its rows are not of one width.
  const std::string text = R"(name: "mine"
table { name: "small" dim: 4 }
table { name: "large" dim: 8 }
field { name: "a" column: 3 }
field { name: "b" column: 4 }
layer { name: "e4" inputs: "a" embedding { table: "small" } }
layer { name: "e8" inputs: "b" embedding { table: "large" } }
layer { name: "f" inputs: "e4" inputs: "e8" fm {} }
layer { name: "deep" inputs: "f" mlp { units: 1 } }
output: "deep"
)";
  const absl::Status status = PlanStatus(text);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("line 8"), std::string::npos) << status;
  EXPECT_NE(status.message().find("\"e8\" of 8"), std::string::npos) << status;
  // One dim: planned.
  EXPECT_TRUE(PlanStatus(Replace(text, "dim: 8", "dim: 4")).ok());
}

TEST(ModelPlanTest, OptimizersAreCheckedBeforeTraining) {
  const absl::Status table = PlanStatus(Replace(
      kValid, R"(table { name: "emb" dim: 4 })",
      R"(table { name: "emb" dim: 4 optimizer { kind: ADAGRAD learning_rate: -1 } })"));
  EXPECT_EQ(table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(table.message().find("table \"emb\""), std::string::npos) << table;
  EXPECT_NE(table.message().find("line 2"), std::string::npos) << table;
  const absl::Status dense = PlanStatus(
      std::string(kValid) + "dense_optimizer { kind: ADAM beta1: 1.5 }\n");
  EXPECT_EQ(dense.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dense.message().find("dense_optimizer"), std::string::npos)
      << dense;
  // Groups of columns are for tables stored together (stored_with).
  const absl::Status grouped = PlanStatus(Replace(
      kValid, R"(table { name: "emb" dim: 4 })",
      R"(table { name: "emb" dim: 4 optimizer { later_columns { first_column: 2 } } })"));
  EXPECT_NE(grouped.message().find("later_columns"), std::string::npos)
      << grouped;
  EXPECT_FALSE(PlanStatus(std::string(kValid) +
                          "dense_optimizer { later_columns { first_column: 1 } "
                          "}\n")
                   .ok());
}

TEST(ModelPlanTest, CrossesAreForTheBuiltinsWithAWidePart) {
  BuiltinOptions options;
  options.crosses = {{0, 1}};
  for (const std::string name : {"dcn_v2", "dlrm"}) {
    const absl::Status status =
        BuiltinModelSpec(name, kColumns, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(status.message().find("crosses feed the wide part"),
              std::string::npos)
        << status;
  }
  absl::StatusOr<ModelSpec> wide_deep =
      BuiltinModelSpec("wide_deep", kColumns, options);
  ASSERT_TRUE(wide_deep.ok()) << wide_deep.status();
  EXPECT_EQ(wide_deep->cross_size(), 1);
}

// kColumns and a seq column (which the built-ins pool as a field, and din
// reads as a sequence).
std::vector<ColumnUse> WithSequence(std::vector<ColumnUse> columns) {
  columns.push_back(ColumnUse::kSequence);
  return columns;
}

TEST(ModelPlanTest, EveryBuiltinPlansAndReadsBackFromItsText) {
  const std::vector<ColumnUse> columns = WithSequence(kColumns);
  for (const std::string& name : BuiltinModelNames()) {
    BuiltinOptions options;
    if (name == "mmoe") options.labels = {"click", "convert"};
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, columns, options);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    absl::StatusOr<ParsedModelSpec> parsed =
        ParseModelSpec(ModelSpecText(*spec));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(parsed->spec.SerializeAsString(), spec->SerializeAsString());
    absl::StatusOr<ModelPlan> plan =
        ModelPlan::Create(*parsed, columns, options.labels);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    EXPECT_EQ(plan->tasks().size(), options.labels.size()) << name;
    for (const PlanTask& task : plan->tasks())
      EXPECT_EQ(plan->nodes()[task.output].width, 1) << name;
  }
}

TEST(ModelPlanTest, MmoeAndDinNameWhatTheColumnsLack) {
  const absl::StatusOr<ModelSpec> one_label =
      BuiltinModelSpec("mmoe", kColumns, BuiltinOptions());
  EXPECT_NE(one_label.status().message().find("needs two at least"),
            std::string::npos)
      << one_label.status();
  const absl::StatusOr<ModelSpec> no_sequence =
      BuiltinModelSpec("din", kColumns, BuiltinOptions());
  EXPECT_NE(no_sequence.status().message().find("no seq column"),
            std::string::npos)
      << no_sequence.status();
  const absl::StatusOr<ModelSpec> no_candidate = BuiltinModelSpec(
      "din", {ColumnUse::kOther, ColumnUse::kSequence}, BuiltinOptions());
  EXPECT_NE(no_candidate.status().message().find("no cat column"),
            std::string::npos)
      << no_candidate.status();
  BuiltinOptions two_labels;
  two_labels.labels = {"click", "convert"};
  const absl::StatusOr<ModelSpec> one_output =
      BuiltinModelSpec("wide_deep", kColumns, two_labels);
  EXPECT_NE(one_output.status().message().find("2 labels (click, convert)"),
            std::string::npos)
      << one_output.status();
}

TEST(ModelPlanTest, BuiltinsFitColumnsWithoutDenseOrWithoutFields) {
  const std::vector<ColumnUse> categorical = {
      ColumnUse::kOther, ColumnUse::kCategorical, ColumnUse::kCategorical};
  const std::vector<ColumnUse> dense = {ColumnUse::kOther, ColumnUse::kDense,
                                        ColumnUse::kDense};
  for (const std::string& name : BuiltinModelNames()) {
    if (name == "din") continue;  // a seq column and a cat one, always
    BuiltinOptions options;
    if (name == "mmoe") options.labels = {"click", "convert"};
    absl::StatusOr<ModelSpec> spec =
        BuiltinModelSpec(name, categorical, options);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_TRUE(
        ModelPlan::Create({*spec, {}}, categorical, options.labels).ok())
        << name;
    spec = BuiltinModelSpec(name, dense, options);
    if (name == "dlrm") {
      // Nothing for the dense rows to interact with.
      EXPECT_FALSE(spec.ok()) << name;
      continue;
    }
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_TRUE(ModelPlan::Create({*spec, {}}, dense, options.labels).ok())
        << name;
  }
  EXPECT_FALSE(BuiltinModelSpec("xgboost", kColumns, BuiltinOptions()).ok());
}

// A wide table in the embedding's rows: one stored table of dim 4 + 1.
TEST(ModelPlanTest, ATableStoredWithAnotherSharesItsRows) {
  const std::string spec = Replace(
      Replace(kValid, "table { name: \"emb\" dim: 4 }",
              "table { name: \"emb\" dim: 4 }\n"
              "table { name: \"w\" dim: 1 stored_with: \"emb\" }"),
      "output: \"deep\"",
      "layer { name: \"wide\" inputs: \"a\" inputs: \"b\" inputs: \"c\" "
      "wide { table: \"w\" } }\n"
      "layer { name: \"sum\" inputs: \"deep\" inputs: \"wide\" add {} }\n"
      "output: \"sum\"");
  absl::StatusOr<ParsedModelSpec> parsed = ParseModelSpec(spec);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ModelPlan> plan = ModelPlan::Create(*parsed, kColumns);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stored_tables().size(), 1u);
  EXPECT_EQ(plan->stored_tables()[0].tables, std::vector<int>({0, 1}));
  EXPECT_EQ(plan->stored_tables()[0].first_column, std::vector<int>({0, 4}));
  EXPECT_EQ(plan->stored_tables()[0].dim, 5);
  EXPECT_EQ(plan->StoredTableOf(1), 0);
  EXPECT_EQ(plan->FirstColumnOf(1), 4);

  auto refused = [&](const std::string& from, const std::string& to,
                     const std::string& says) {
    const absl::Status status = PlanStatus(Replace(spec, from, to));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << to;
    EXPECT_NE(status.message().find(says), std::string::npos)
        << status.message();
  };
  refused("stored_with: \"emb\"", "stored_with: \"none\"",
          "line 3: table \"w\": stored_with \"none\" is not another table");
  refused("stored_with: \"emb\"", "stored_with: \"w\"", "is not another table");
  refused("table { name: \"emb\" dim: 4 }",
          "table { name: \"emb\" dim: 4 stored_with: \"w\" }",
          "a table stored with");
  // The wide part reads two of the embedding's three fields.
  refused("wide\" inputs: \"a\" inputs: \"b\" inputs: \"c\"",
          "wide\" inputs: \"a\" inputs: \"b\"", "looked up with other keys");
  // The same fields in another order are other lookups too.
  refused("wide\" inputs: \"a\" inputs: \"b\" inputs: \"c\"",
          "wide\" inputs: \"b\" inputs: \"a\" inputs: \"c\"",
          "looked up with other keys");
}

TEST(ModelPlanTest, BuiltinsStoreTheWideWeightInTheEmbeddingRowWhenAsked) {
  BuiltinOptions options;
  options.wide_in_embedding_row = true;
  for (const std::string name : {"wide_deep", "deepfm"}) {
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(name, kColumns, options);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<ModelPlan> plan = ModelPlan::Create({*spec, {}}, kColumns);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->stored_tables().size(), 1u) << name;
    EXPECT_EQ(plan->stored_tables()[0].dim, 17) << name;
  }
  // Crosses feed the wide part alone: its keys are not the embedding's.
  options.crosses = {{0, 1}};
  absl::StatusOr<ModelSpec> crossed =
      BuiltinModelSpec("wide_deep", kColumns, options);
  ASSERT_TRUE(crossed.ok()) << crossed.status();
  EXPECT_TRUE(crossed->table(1).stored_with().empty());
  // Without the option the tables stay apart.
  options = BuiltinOptions();
  absl::StatusOr<ModelSpec> apart =
      BuiltinModelSpec("wide_deep", kColumns, options);
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_TRUE(apart->table(1).stored_with().empty());
}

}  // namespace
}  // namespace ps::model
