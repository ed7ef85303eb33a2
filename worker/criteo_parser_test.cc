#include "worker/criteo_parser.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  std::vector<std::string> columns = {label};
  columns.insert(columns.end(), ints.begin(), ints.end());
  columns.insert(columns.end(), cats.begin(), cats.end());
  return absl::StrJoin(columns, "\t");
}

std::vector<std::string> Ints() { return std::vector<std::string>(13, "3"); }
std::vector<std::string> Cats() {
  return std::vector<std::string>(26, "68fd1e64");
}

TEST(CriteoParserTest, ParsesAGoodLine) {
  std::vector<std::string> ints = Ints();
  ints[0] = "";    // missing
  ints[1] = "-2";  // negative clips to 0
  std::vector<std::string> cats = Cats();
  cats[5] = "";
  Example example;
  ASSERT_OK(ParseCriteoLine(Line("1", ints, cats), &example));
  EXPECT_EQ(example.label, 1.0f);
  EXPECT_EQ(example.dense[0], 0.0f);
  EXPECT_EQ(example.dense[1], 0.0f);
  EXPECT_FLOAT_EQ(example.dense[2], std::log1p(3.0f));
  EXPECT_EQ(example.keys[0], FeatureKey(0, "68fd1e64"));
  // The same string in another field is another key; missing has its own.
  EXPECT_NE(example.keys[0], example.keys[1]);
  EXPECT_EQ(example.keys[5], FeatureKey(5, ""));
}

TEST(CriteoParserTest, KeysArePinned) {
  // XXH3 is stable across processes and machines; a change here would remap
  // every trained row.
  EXPECT_EQ(FeatureKey(0, "68fd1e64"), 0xb0431058060b4dULL);
  EXPECT_EQ(FeatureKey(3, ""), 0xd8d13f8b2da6c9adULL);
}

TEST(CriteoParserTest, AcceptsWindowsLineEnd) {
  Example example;
  EXPECT_OK(ParseCriteoLine(Line("0", Ints(), Cats()) + "\r", &example));
}

TEST(CriteoParserTest, RejectsMalformedLines) {
  Example example;
  EXPECT_THAT(ParseCriteoLine("", &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCriteoLine(Line("2", Ints(), Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCriteoLine(Line("yes", Ints(), Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<std::string> ints = Ints();
  ints[4] = "12x";
  EXPECT_THAT(ParseCriteoLine(Line("0", ints, Cats()), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<std::string> short_cats(25, "a");
  EXPECT_THAT(ParseCriteoLine(Line("0", Ints(), short_cats), &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCriteoLine(Line("0", Ints(), Cats()) + "\textra", &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CriteoParserTest, ALineWithoutALabelIsScoredOnlyWhenAllowed) {
  std::vector<std::string> ints = Ints();
  ints[2] = "7";
  std::vector<std::string> cats = Cats();
  cats[25] = "last";
  // Without the label column: 39 columns, the features where they belong.
  const std::string line = Line("", ints, cats).substr(1);
  Example example;
  EXPECT_THAT(ParseCriteoLine(line, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(ParseCriteoLine(line, &example, LabelColumn::kOptional));
  EXPECT_FALSE(example.has_label);
  EXPECT_FLOAT_EQ(example.dense[2], std::log1p(7.0f));
  EXPECT_EQ(example.keys[25], FeatureKey(25, "last"));
  // A labeled line reads the same either way.
  Example labeled;
  ASSERT_OK(
      ParseCriteoLine(Line("1", ints, cats), &labeled, LabelColumn::kOptional));
  EXPECT_TRUE(labeled.has_label);
  EXPECT_EQ(labeled.label, 1.0f);
  EXPECT_EQ(labeled.keys[25], example.keys[25]);
  EXPECT_EQ(labeled.dense[2], example.dense[2]);
  // 38 columns are still too few.
  EXPECT_THAT(ParseCriteoLine(line.substr(line.find('\t') + 1), &example,
                              LabelColumn::kOptional),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ps::worker
