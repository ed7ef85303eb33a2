#include "worker/clicklog_generator.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/criteo_parser.h"

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
  std::vector<std::set<std::string>> distinct(kCategoricalFields);
  for (int i = 0; i < kLines; ++i) {
    generator.Next(&line, &probability);
    Example example;
    ASSERT_OK(ParseCriteoLine(line, &example)) << line;
    ASSERT_GT(probability, 0.0);
    ASSERT_LT(probability, 1.0);
    clicks += example.label;
    probability_sum += probability;
    std::vector<std::string> columns = absl::StrSplit(line, '\t');
    for (int f = 0; f < kCategoricalFields; ++f) {
      const std::string& value = columns[1 + kDenseFeatures + f];
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

}  // namespace
}  // namespace ps::worker
