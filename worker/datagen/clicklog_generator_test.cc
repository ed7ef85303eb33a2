#include "worker/datagen/clicklog_generator.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "model/input/line_parser.h"

namespace ps::worker {
namespace {

TEST(ClickLogGeneratorTest, SameSeedsGiveSameLines) {
  GeneratorOptions options;
  ClickLogGenerator a(options, 3), b(options, 3), c(options, 4);
  std::string line_a, line_b, line_c;
  double p_a, p_b, p_c;
  bool any_difference = false;
  for (int i = 0; i < 100; ++i) {
    a.Next(&line_a, &p_a);
    b.Next(&line_b, &p_b);
    c.Next(&line_c, &p_c);
    ASSERT_EQ(line_a, line_b);
    ASSERT_EQ(p_a, p_b);
    any_difference |= line_a != line_c;
  }
  EXPECT_TRUE(any_difference);
}

TEST(ClickLogGeneratorTest, LinesParseAndHaveLongTailedVocabularies) {
  GeneratorOptions options;
  ClickLogGenerator generator(options, 1);
  std::string line;
  double probability;
  double clicks = 0, probability_sum = 0;
  int missing = 0;
  constexpr int kLines = 20000;
  std::vector<std::set<std::string>> distinct(kGeneratedCategorical);
  for (int i = 0; i < kLines; ++i) {
    generator.Next(&line, &probability);
    model::Example example;
    ASSERT_OK(model::ParseLine(line, model::InputLayout::Criteo(), &example))
        << line;
    ASSERT_GT(probability, 0.0);
    ASSERT_LT(probability, 1.0);
    clicks += example.label;
    probability_sum += probability;
    std::vector<std::string> columns = absl::StrSplit(line, '\t');
    for (int f = 0; f < kGeneratedCategorical; ++f) {
      const std::string& value = columns[1 + kGeneratedDense + f];
      if (value.empty()) ++missing;
      distinct[f].insert(value);
    }
  }
  // Labels follow the probabilities.
  EXPECT_NEAR(clicks / kLines, probability_sum / kLines, 0.015);
  EXPECT_GT(probability_sum / kLines, 0.1);
  EXPECT_LT(probability_sum / kLines, 0.45);
  EXPECT_GT(missing, 0);
  // Vocabulary sizes range from tens to millions: the smallest field shows
  // at most its 10 values (+ missing); the largest keeps producing new ones.
  size_t smallest = kLines, largest = 0;
  for (const auto& values : distinct) {
    smallest = std::min(smallest, values.size());
    largest = std::max(largest, values.size());
  }
  EXPECT_LE(smallest, 11u);
  EXPECT_GT(largest, kLines / 4);
}

TEST(ClickLogGeneratorTest, WritesOtherLayoutsWithMultiValuedFields) {
  GeneratorOptions options;
  options.multi_fields = 2;
  const model::InputLayout layout = *model::MakeInputLayout(
      "csv", true, "skip,cat*26,label,dense*13,multi*2", "|", "sum", "");
  EXPECT_EQ(HeaderLine(layout).substr(0, 10), "id,C1,C2,C");
  ClickLogGenerator generator(options, 1), criteo(GeneratorOptions(), 1);
  GeneratedExample example;
  std::string line, criteo_line;
  double probability, criteo_probability;
  int values = 0;
  for (int i = 0; i < 200; ++i) {
    generator.Next(&example, &probability);
    FormatLine(example, layout, i, &line);
    model::Example parsed;
    ASSERT_OK(model::ParseLine(line, layout, &parsed)) << line;
    EXPECT_EQ(parsed.label, example.click ? 1.0f : 0.0f);
    EXPECT_EQ(line.substr(0, line.find(',')), std::to_string(i));
    ASSERT_EQ(parsed.slots(), 28);
    const int multi = parsed.slot_end[27] - parsed.slot_end[25];
    EXPECT_GE(multi, 2);
    EXPECT_LE(multi, 16);
    values += multi;
    // The multi fields change the click probabilities, not the rest.
    criteo.Next(&criteo_line, &criteo_probability);
    model::Example criteo_parsed;
    ASSERT_OK(model::ParseLine(criteo_line, model::InputLayout::Criteo(),
                               &criteo_parsed));
    EXPECT_TRUE(std::equal(criteo_parsed.keys.begin(), criteo_parsed.keys.end(),
                           parsed.keys.begin()));
    EXPECT_EQ(criteo_parsed.dense, parsed.dense);
    if (i > 0) {
      EXPECT_NE(probability, criteo_probability);
    }
  }
  EXPECT_GT(values, 200 * 2 * 3);  // 4.5 values per field on average
}

// The distinct values of categorical field `field` in `lines` lines of `g`.
std::set<std::string> FieldValues(ClickLogGenerator& g, int field, int lines) {
  std::set<std::string> values;
  GeneratedExample example;
  double probability;
  for (int i = 0; i < lines; ++i) {
    g.Next(&example, &probability);
    if (!example.categorical[field].empty())
      values.insert(example.categorical[field]);
  }
  return values;
}

size_t Overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
  size_t common = 0;
  for (const std::string& value : a) common += b.count(value);
  return common;
}

TEST(ClickLogGeneratorTest,
     DriftReplacesValuesAndATestFileStartsWhereTrainingEnded) {
  GeneratorOptions options;
  // The field with the smallest vocabulary (about 10 values).
  ClickLogGenerator probe(options, 1);
  int field = 0;
  for (int f = 1; f < kGeneratedCategorical; ++f)
    if (probe.vocabulary(f) < probe.vocabulary(field)) field = f;
  ASSERT_LE(probe.vocabulary(field), 20);

  // Without drift, a late stretch of the stream has the early values.
  ClickLogGenerator still(options, 1);
  const std::set<std::string> still_early = FieldValues(still, field, 2000);
  FieldValues(still, field, 20000);
  const std::set<std::string> still_late = FieldValues(still, field, 2000);
  EXPECT_EQ(Overlap(still_early, still_late), still_early.size());

  // With 5 new values per 1000 lines, 20000 lines later every value of a
  // 10-value field is new.
  options.drift = 5;
  ClickLogGenerator drifting(options, 1);
  const std::set<std::string> early = FieldValues(drifting, field, 2000);
  FieldValues(drifting, field, 20000);
  const std::set<std::string> late = FieldValues(drifting, field, 2000);
  EXPECT_EQ(Overlap(early, late), 0u);
  EXPECT_GT(late.size(), 5u);

  // A file that starts at line 22000 of the stream draws from the same
  // values as the stream there, though it draws other lines.
  options.first_line = 22000;
  ClickLogGenerator test(options, 2);
  const std::set<std::string> test_values = FieldValues(test, field, 2000);
  EXPECT_GE(Overlap(test_values, late), test_values.size() * 8 / 10);
  EXPECT_EQ(Overlap(test_values, early), 0u);
}

TEST(ClickLogGeneratorTest, ASecondTaskConvertsOnlyAfterAClick) {
  GeneratorOptions one, two;
  two.tasks = 2;
  ClickLogGenerator clicks_only(one, 5), with_converts(two, 5);
  const model::InputLayout criteo = model::InputLayout::Criteo();
  auto layout = model::MakeInputLayout(
      "tsv", false, "label:click,label:convert,dense*13,cat*26", "|", "sum",
      "");
  ASSERT_OK(layout);
  GeneratedExample a, b;
  double p_a = 0, p_b = 0, convert_probability = 0;
  double converts = 0, convert_truth = 0, clicks = 0;
  constexpr int kLines = 20000;
  std::string line_a, line_b;
  for (int i = 0; i < kLines; ++i) {
    clicks_only.Next(&a, &p_a);
    with_converts.Next(&b, &p_b, &convert_probability);
    // The second task draws from its own stream: everything else is the
    // same line.
    FormatLine(a, criteo, i, &line_a);
    FormatLine(b, criteo, i, &line_b);
    ASSERT_EQ(line_a, line_b);
    ASSERT_EQ(p_a, p_b);
    EXPECT_FALSE(a.convert);
    ASSERT_TRUE(!b.convert || b.click) << i;
    ASSERT_LT(convert_probability, p_b);
    ASSERT_GT(convert_probability, 0.0);
    // Both labels, in the layout's order.
    FormatLine(b, *layout, i, &line_b);
    model::Example parsed;
    ASSERT_OK(model::ParseLine(line_b, *layout, &parsed)) << line_b;
    ASSERT_EQ(parsed.labels[0], b.click ? 1.0f : 0.0f);
    ASSERT_EQ(parsed.labels[1], b.convert ? 1.0f : 0.0f);
    converts += b.convert;
    clicks += b.click;
    convert_truth += convert_probability;
  }
  // Conversions follow their probabilities: about one click in four.
  EXPECT_NEAR(converts / kLines, convert_truth / kLines, 0.01);
  EXPECT_GT(converts / clicks, 0.1);
  EXPECT_LT(converts / clicks, 0.5);
  EXPECT_EQ(HeaderLine(*layout).substr(0, 14), "click\tconvert\t");
}

TEST(ClickLogGeneratorTest, SequencesOfRecentItemsMoveTheClick) {
  GeneratorOptions plain, with_items;
  with_items.sequence_length = 5;
  ClickLogGenerator a(plain, 9), b(with_items, 9);
  auto layout = model::MakeInputLayout(
      "tsv", false, "label,dense*13,cat*26,seq", "|", "sum", "");
  ASSERT_OK(layout);
  GeneratedExample x, y;
  double p = 0, q = 0, clicks = 0, moved = 0;
  int lengths[6] = {0, 0, 0, 0, 0, 0};
  constexpr int kLines = 20000;
  std::string line;
  for (int i = 0; i < kLines; ++i) {
    a.Next(&x, &p);
    b.Next(&y, &q);
    // The items come from a stream of their own: the features are the same.
    for (int f = 0; f < kGeneratedCategorical; ++f)
      ASSERT_EQ(x.categorical[f], y.categorical[f]);
    ASSERT_TRUE(x.sequence.empty());
    ASSERT_LE(y.sequence.size(), 5u);
    ++lengths[y.sequence.size()];
    moved += std::fabs(p - q);
    clicks += y.click;
    FormatLine(y, *layout, i, &line);
    model::Example parsed;
    ASSERT_OK(model::ParseLine(line, *layout, &parsed)) << line;
    // The items are written oldest first in the seq column.
    if (!y.sequence.empty()) {
      ASSERT_EQ(parsed.keys.back(), model::FeatureKey(26, y.sequence.back()));
    }
  }
  for (int length : lengths) EXPECT_GT(length, kLines / 10);
  EXPECT_GT(moved / kLines, 0.03);  // the items matter
  EXPECT_GT(clicks / kLines, 0.1);
  EXPECT_LT(clicks / kLines, 0.45);
  EXPECT_EQ(HeaderLine(*layout).substr(HeaderLine(*layout).size() - 3), "\tS1");
}

}  // namespace
}  // namespace ps::worker
