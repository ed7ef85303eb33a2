#include "model/input/line_parser.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::model {
namespace {

std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  std::vector<std::string> columns = {label};
  columns.insert(columns.end(), ints.begin(), ints.end());
  columns.insert(columns.end(), cats.begin(), cats.end());
  return absl::StrJoin(columns, "\t");
}

absl::Status Parse(absl::string_view line, Example* example,
                   LabelColumn label = LabelColumn::kRequired) {
  return ParseLine(line, InputLayout::Criteo(), example, label);
}

std::vector<std::string> Ints() { return std::vector<std::string>(13, "3"); }
std::vector<std::string> Cats() {
  return std::vector<std::string>(26, "68fd1e64");
}

TEST(LineParserTest, ParsesAGoodLine) {
  std::vector<std::string> ints = Ints();
  ints[0] = "";    // missing
  ints[1] = "-2";  // kept as read (the model clips it)
  std::vector<std::string> cats = Cats();
  cats[5] = "";
  Example example;
  ASSERT_OK(Parse(Line("1", ints, cats), &example));
  EXPECT_EQ(example.label, 1.0f);
  ASSERT_EQ(example.dense.size(), 13u);
  ASSERT_EQ(example.keys.size(), 26u);
  EXPECT_EQ(example.dense[0], 0.0);
  EXPECT_EQ(example.dense[1], -2.0);
  EXPECT_EQ(example.dense[2], 3.0);  // as read: the model transforms it
  EXPECT_EQ(example.keys[0], FeatureKey(0, "68fd1e64"));
  // The same string in another field is another key; missing has its own.
  EXPECT_NE(example.keys[0], example.keys[1]);
  EXPECT_EQ(example.keys[5], FeatureKey(5, ""));
}

TEST(LineParserTest, AWeightIsAPositiveFiniteNumber) {
  auto layout =
      MakeInputLayout("csv", false, "label,cat,weight", "|", "sum", "");
  ASSERT_OK(layout);
  Example example;
  ASSERT_OK(ParseLine("1,a,2.5", *layout, &example));
  EXPECT_EQ(example.weight, 2.5f);
  ASSERT_OK(ParseLine("0,a,3", *layout, &example));
  EXPECT_EQ(example.weight, 3.0f);
  for (const char* bad : {"0", "-1", "", "x", "nan", "inf", "1e300", "1e-60"}) {
    const absl::Status status =
        ParseLine(absl::StrCat("1,a,", bad), *layout, &example);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_NE(status.message().find("weight (column 3)"), std::string::npos)
        << status;
  }
  // Scoring does not read it.
  ASSERT_OK(ParseLine("1,a,0", *layout, &example, LabelColumn::kOptional));
  EXPECT_EQ(example.weight, 1.0f);
  ASSERT_OK(ParseLine("a,", *layout, &example, LabelColumn::kOptional));
  EXPECT_EQ(example.weight, 1.0f);
  // A layout without one weighs every line 1, whatever was parsed before.
  example.weight = 7.0f;
  ASSERT_OK(Parse(Line("1", Ints(), Cats()), &example));
  EXPECT_EQ(example.weight, 1.0f);
}

TEST(LineParserTest, KeysArePinned) {
  // XXH3 is stable across processes and machines; a change here would remap
  // every trained row.
  EXPECT_EQ(FeatureKey(0, "68fd1e64"), 0xb0431058060b4dULL);
  EXPECT_EQ(FeatureKey(3, ""), 0xd8d13f8b2da6c9adULL);
}

TEST(LineParserTest, CrossKeysArePinned) {
  // Like field keys: a change would remap every trained cross row.
  EXPECT_EQ(CrossKey(0, FeatureKey(0, "68fd1e64"), FeatureKey(3, "")),
            CrossKey(0, 0xb0431058060b4dULL, 0xd8d13f8b2da6c9adULL));
  EXPECT_EQ(CrossKey(0, 1, 2), 0x705eb3b932907c77ULL);
  // Never a field's key for the same bytes.
  const uint64_t pair[2] = {1, 2};
  for (uint32_t field = 0; field < 64; ++field) {
    EXPECT_NE(CrossKey(0, 1, 2),
              FeatureKey(field, absl::string_view(
                                    reinterpret_cast<const char*>(pair), 16)));
  }
}

TEST(LineParserTest, AcceptsWindowsLineEnd) {
  Example example;
  EXPECT_OK(Parse(Line("0", Ints(), Cats()) + "\r", &example));
}

TEST(LineParserTest, RejectsMalformedLines) {
  Example example;
  EXPECT_THAT(Parse("", &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Parse(Line("2", Ints(), Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Parse(Line("yes", Ints(), Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<std::string> ints = Ints();
  ints[4] = "12x";
  EXPECT_THAT(Parse(Line("0", ints, Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<std::string> short_cats(25, "a");
  EXPECT_THAT(Parse(Line("0", Ints(), short_cats), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Parse(Line("0", Ints(), Cats()) + "\textra", &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Columns of every length from empty to past two 16-byte blocks, so that
// delimiters fall at each position of a block and columns span blocks.
TEST(LineParserTest, EveryColumnIsFoundWhereverItsDelimiterFalls) {
  std::mt19937 rng(3);
  for (const char* format : {"tsv", "csv"}) {
    const char delimiter = std::string(format) == "csv" ? ',' : '\t';
    auto layout = MakeInputLayout(format, true, "label,cat*7", "|", "sum", "");
    ASSERT_OK(layout);
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<std::string> values;
      for (int c = 0; c < 7; ++c) {
        std::string value;
        const int length = static_cast<int>(rng() % 40);
        for (int i = 0; i < length; ++i)
          value += static_cast<char>('a' + rng() % 26);
        values.push_back(value);
      }
      const std::string line =
          absl::StrCat(trial % 2, std::string(1, delimiter),
                       absl::StrJoin(values, std::string(1, delimiter)));
      Example example;
      ASSERT_OK(ParseLine(line, *layout, &example)) << line;
      EXPECT_EQ(example.label, static_cast<float>(trial % 2));
      ASSERT_EQ(example.keys.size(), 7u);
      for (int c = 0; c < 7; ++c)
        EXPECT_EQ(example.keys[c], FeatureKey(c, values[c])) << line;
      // One column more or less is refused.
      EXPECT_THAT(ParseLine(line + delimiter, *layout, &example),
                  StatusIs(absl::StatusCode::kInvalidArgument));
      EXPECT_THAT(
          ParseLine(line.substr(0, line.rfind(delimiter)), *layout, &example),
          StatusIs(absl::StatusCode::kInvalidArgument));
    }
  }
}

TEST(LineParserTest, ALineWithoutALabelIsScoredOnlyWhenAllowed) {
  std::vector<std::string> ints = Ints();
  ints[2] = "7";
  std::vector<std::string> cats = Cats();
  cats[25] = "last";
  // Without the label column: 39 columns, the features where they belong.
  const std::string line = Line("", ints, cats).substr(1);
  Example example;
  EXPECT_THAT(Parse(line, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(Parse(line, &example, LabelColumn::kOptional));
  EXPECT_FALSE(example.has_label);
  EXPECT_EQ(example.dense[2], 7.0);
  EXPECT_EQ(example.keys[25], FeatureKey(25, "last"));
  // A labeled line reads the same either way.
  Example labeled;
  ASSERT_OK(Parse(Line("1", ints, cats), &labeled, LabelColumn::kOptional));
  EXPECT_TRUE(labeled.has_label);
  EXPECT_EQ(labeled.label, 1.0f);
  EXPECT_EQ(labeled.keys[25], example.keys[25]);
  EXPECT_EQ(labeled.dense[2], example.dense[2]);
  // 38 columns are still too few.
  EXPECT_THAT(
      Parse(line.substr(line.find('\t') + 1), &example, LabelColumn::kOptional),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineParserTest, ReadsAnyLayout) {
  // An id, the label last, a multi field between two cats, a cross of the
  // cat fields, comma-separated.
  auto layout = MakeInputLayout("csv", true, "skip,cat,multi,dense*2,cat,label",
                                "|", "sum", "0:2,1:2");
  ASSERT_OK(layout);
  EXPECT_EQ(layout->fields(), 3);
  EXPECT_EQ(layout->dense_features(), 2);
  EXPECT_EQ(layout->slots(), 5);
  Example example;
  ASSERT_OK(ParseLine("id7,a,x|y||z,2.5,,b,1", *layout, &example));
  EXPECT_EQ(example.label, 1.0f);
  ASSERT_EQ(example.dense.size(), 2u);
  EXPECT_EQ(example.dense[0], 2.5);
  EXPECT_EQ(example.dense[1], 0.0);
  ASSERT_EQ(example.slots(), 5);
  // Field 0: one key; field 1: three (the empty value between || is not
  // one); field 2: one; cross 0:2 one key; cross 1:2 three.
  EXPECT_EQ(example.slot_end[0], 1u);
  EXPECT_EQ(example.slot_end[1], 4u);
  EXPECT_EQ(example.slot_end[2], 5u);
  EXPECT_EQ(example.slot_end[3], 6u);
  EXPECT_EQ(example.slot_end[4], 9u);
  EXPECT_EQ(example.keys[0], FeatureKey(0, "a"));
  EXPECT_EQ(example.keys[1], FeatureKey(1, "x"));
  EXPECT_EQ(example.keys[3], FeatureKey(1, "z"));
  EXPECT_EQ(example.keys[4], FeatureKey(2, "b"));
  EXPECT_EQ(example.keys[5],
            CrossKey(0, FeatureKey(0, "a"), FeatureKey(2, "b")));
  EXPECT_EQ(example.keys[8],
            CrossKey(1, FeatureKey(1, "z"), FeatureKey(2, "b")));
  // The two crosses of the same pair of keys differ from each other and
  // from every field key.
  EXPECT_NE(CrossKey(0, 1, 2), CrossKey(1, 1, 2));
  EXPECT_NE(CrossKey(0, 1, 2), CrossKey(0, 2, 1));
  // An empty multi column is the field's missing key.
  ASSERT_OK(ParseLine("id8,a,,1,2,b,0", *layout, &example));
  EXPECT_EQ(example.slot_end[1] - example.slot_end[0], 1u);
  EXPECT_EQ(example.keys[1], FeatureKey(1, ""));
}

TEST(LineParserTest, AnIdColumnIsKeptVerbatimAndIsNoFeature) {
  auto layout =
      MakeInputLayout("tsv", false, "id,cat,label,dense", "|", "sum", "");
  ASSERT_OK(layout);
  Example example;
  ASSERT_OK(ParseLine("row 17/a\tx\t1\t3", *layout, &example));
  EXPECT_EQ(example.id, "row 17/a");
  ASSERT_EQ(example.keys.size(), 1u);
  EXPECT_EQ(example.keys[0], FeatureKey(0, "x"));
  EXPECT_EQ(example.dense.size(), 1u);
  // Scored without its label, the id is still the line's; the next line's
  // replaces it.
  ASSERT_OK(ParseLine("r18\ty\t4", *layout, &example, LabelColumn::kOptional));
  EXPECT_EQ(example.id, "r18");
  EXPECT_FALSE(example.has_label);
  // Without an id column, no id.
  ASSERT_OK(Parse(Line("0", Ints(), Cats()), &example));
  EXPECT_EQ(example.id, "");
}

TEST(LineParserTest, AValueThatDoesNotFitItsKindIsAnError) {
  auto layout =
      MakeInputLayout("csv", false, "label,dense,multi", "|", "mean", "");
  ASSERT_OK(layout);
  Example example;
  EXPECT_OK(ParseLine("0,1e3,a|b", *layout, &example));
  EXPECT_OK(ParseLine("0,-0.5,a", *layout, &example));
  for (const char* line : {"0,abc,a", "0,nan,a", "0,inf,a", "x,1,a", "0,1",
                           "0,1,a,b", "0\t1\ta"}) {
    EXPECT_THAT(ParseLine(line, *layout, &example),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << line;
  }
  // Without the label, when allowed: the label column anywhere is the one
  // left out.
  auto label_last =
      MakeInputLayout("tsv", false, "cat,dense,label", "|", "sum", "");
  ASSERT_OK(label_last);
  ASSERT_OK(ParseLine("v\t3", *label_last, &example, LabelColumn::kOptional));
  EXPECT_FALSE(example.has_label);
  EXPECT_EQ(example.dense[0], 3.0);
  EXPECT_EQ(example.keys[0], FeatureKey(0, "v"));
}

TEST(LineParserTest, TooManyValuesInAFieldOrACrossIsAnError) {
  auto layout =
      MakeInputLayout("csv", false, "label,multi,multi", "|", "sum", "0:1");
  ASSERT_OK(layout);
  layout->max_values_per_field = 4;
  Example example;
  EXPECT_OK(ParseLine("1,a|b,c|d", *layout, &example));  // a cross of 4
  EXPECT_THAT(ParseLine("1,a|b|c|d|e,c", *layout, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseLine("1,a|b|c,c|d", *layout, &example),  // 6 pairs
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineParserTest, NamedLabelsMayBeUnknownAndScoringDropsThemAll) {
  auto layout = MakeInputLayout("csv", false, "label:click,cat,label:convert",
                                "|", "sum", "");
  ASSERT_OK(layout);
  Example example;
  ASSERT_OK(ParseLine("1,a,", *layout, &example));
  ASSERT_EQ(example.labels.size(), 2u);
  EXPECT_EQ(example.label, 1.0f);
  EXPECT_TRUE(example.label_known[0]);
  EXPECT_FALSE(example.label_known[1]);
  EXPECT_EQ(example.labels[1], 0.0f);
  ASSERT_OK(ParseLine(",a,1", *layout, &example));
  EXPECT_FALSE(example.label_known[0]);
  EXPECT_EQ(example.label, 0.0f);
  EXPECT_TRUE(example.label_known[1]);
  EXPECT_EQ(example.labels[1], 1.0f);
  const absl::Status bad = ParseLine("1,a,2", *layout, &example);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(bad.message().find("label convert (column 3)"), std::string::npos)
      << bad;
  // Scoring: a line without either label (one column); one label only is
  // neither a labeled nor an unlabeled line.
  ASSERT_OK(ParseLine("b", *layout, &example, LabelColumn::kOptional));
  EXPECT_FALSE(example.has_label);
  EXPECT_TRUE(example.labels.empty());
  EXPECT_EQ(example.keys[0], FeatureKey(0, "b"));
  const absl::Status half =
      ParseLine("1,b", *layout, &example, LabelColumn::kOptional);
  EXPECT_THAT(half, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(half.message().find("or 1 without the labels"), std::string::npos)
      << half;
}

TEST(LineParserTest, APlainLabelIsNeverUnknown) {
  auto layout = MakeInputLayout("csv", false, "label,cat", "|", "sum", "");
  ASSERT_OK(layout);
  Example example;
  EXPECT_THAT(ParseLine(",a", *layout, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(ParseLine("1,a", *layout, &example));
  EXPECT_EQ(example.labels, (absl::InlinedVector<float, 2>{1.0f}));
  EXPECT_TRUE(example.label_known[0]);
}

TEST(LineParserTest, ALongSequenceKeepsItsMostRecentValues) {
  auto layout =
      MakeInputLayout("csv", false, "label,seq,multi", "|", "sum", "");
  ASSERT_OK(layout);
  layout->max_values_per_field = 3;
  layout->max_sequence_values = 3;
  Example example;
  // Oldest first: a is dropped; an empty item is no value.
  ASSERT_OK(ParseLine("1,a|b|c||e|,x", *layout, &example));
  EXPECT_EQ(example.slot_end[0], 3u);
  EXPECT_EQ(example.keys[0], FeatureKey(0, "b"));
  EXPECT_EQ(example.keys[1], FeatureKey(0, "c"));
  EXPECT_EQ(example.keys[2], FeatureKey(0, "e"));
  ASSERT_OK(ParseLine("1,a|b|c|d,x", *layout, &example));
  EXPECT_EQ(example.slot_end[0], 3u);
  EXPECT_EQ(example.keys[0], FeatureKey(0, "b"));
  EXPECT_EQ(example.keys[2], FeatureKey(0, "d"));
  // A multi column over the limit is still a bad line.
  EXPECT_THAT(ParseLine("1,a,w|x|y|z", *layout, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineParserTest, ASeqColumnOfAFieldsValuesHasThatFieldsKeys) {
  auto layout =
      MakeInputLayout("csv", false, "label,cat,seq:0", "|", "sum", "");
  ASSERT_OK(layout);
  Example example;
  ASSERT_OK(ParseLine("1,i7,i3|i7", *layout, &example));
  EXPECT_EQ(example.keys[0], FeatureKey(0, "i7"));
  EXPECT_EQ(example.keys[2], example.keys[0]);  // the same item, one key
  EXPECT_EQ(example.keys[1], FeatureKey(0, "i3"));
  ASSERT_OK(ParseLine("1,i7,", *layout, &example));
  EXPECT_EQ(example.keys[1], FeatureKey(0, ""));
}

}  // namespace
}  // namespace ps::model
