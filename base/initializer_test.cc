#include "base/initializer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

InitializerSpec Spec(InitializerSpec::Kind kind, float scale, uint64_t seed) {
  InitializerSpec spec;
  spec.set_kind(kind);
  spec.set_scale(scale);
  spec.set_seed(seed);
  return spec;
}

TEST(InitializerTest, SameKeyAndSeedGiveSameRowAcrossInstances) {
  std::vector<float> a(16), b(16);
  Initializer(Spec(InitializerSpec::NORMAL, 0.1f, 7))
      .Fill(42, absl::MakeSpan(a));
  Initializer(Spec(InitializerSpec::NORMAL, 0.1f, 7))
      .Fill(42, absl::MakeSpan(b));
  EXPECT_EQ(a, b);
}

TEST(InitializerTest, ValuesArePinnedAcrossBuilds) {
  // XXH3 is stable across processes and machines; pin one value so that a
  // change of hash or generator (which would change every untouched row of a
  // live table) fails loudly.
  std::vector<float> row(2);
  Initializer(Spec(InitializerSpec::UNIFORM, 1.0f, 1))
      .Fill(1, absl::MakeSpan(row));
  EXPECT_FLOAT_EQ(row[0], 0.41512465f);
  EXPECT_FLOAT_EQ(row[1], -0.10025758f);
}

TEST(InitializerTest, DifferentKeysOrSeedsDiffer) {
  std::vector<float> a(8), b(8), c(8);
  Initializer init(Spec(InitializerSpec::UNIFORM, 1.0f, 3));
  init.Fill(1, absl::MakeSpan(a));
  init.Fill(2, absl::MakeSpan(b));
  Initializer(Spec(InitializerSpec::UNIFORM, 1.0f, 4))
      .Fill(1, absl::MakeSpan(c));
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST(InitializerTest, UniformStaysInRangeWithMeanNearZero) {
  Initializer init(Spec(InitializerSpec::UNIFORM, 0.5f, 11));
  std::vector<float> row(64);
  double sum = 0;
  int count = 0;
  for (uint64_t key = 0; key < 1000; ++key) {
    init.Fill(key, absl::MakeSpan(row));
    for (float v : row) {
      ASSERT_GE(v, -0.5f);
      ASSERT_LE(v, 0.5f);
      sum += v;
      ++count;
    }
  }
  EXPECT_NEAR(sum / count, 0.0, 0.01);
}

TEST(InitializerTest, NormalHasRequestedStandardDeviation) {
  Initializer init(Spec(InitializerSpec::NORMAL, 0.2f, 5));
  std::vector<float> row(33);  // odd length exercises the last column
  double sum = 0, sum_squares = 0;
  int count = 0;
  for (uint64_t key = 0; key < 2000; ++key) {
    init.Fill(key, absl::MakeSpan(row));
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sum_squares += v * v;
      ++count;
    }
  }
  const double mean = sum / count;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_squares / count - mean * mean), 0.2, 0.01);
}

TEST(InitializerTest, ZerosAndConstant) {
  std::vector<float> row(4, 9.0f);
  Initializer(Spec(InitializerSpec::ZEROS, 3.0f, 0))
      .Fill(5, absl::MakeSpan(row));
  EXPECT_EQ(row, std::vector<float>(4, 0.0f));
  Initializer(Spec(InitializerSpec::CONSTANT, 3.0f, 0))
      .Fill(5, absl::MakeSpan(row));
  EXPECT_EQ(row, std::vector<float>(4, 3.0f));
}

TEST(InitializerTest, LaterColumnsStartAsTheirOwnRows) {
  InitializerSpec spec = Spec(InitializerSpec::UNIFORM, 0.05f, 11);
  LaterColumnsInitializer* constant = spec.add_later_columns();
  constant->set_first_column(5);
  *constant->mutable_initializer() = Spec(InitializerSpec::CONSTANT, 2.0f, 0);
  LaterColumnsInitializer* normal = spec.add_later_columns();
  normal->set_first_column(6);
  *normal->mutable_initializer() = Spec(InitializerSpec::NORMAL, 0.5f, 12);
  std::vector<float> row(9), first(5), last(3);
  Initializer(spec).Fill(77, absl::MakeSpan(row));
  Initializer(Spec(InitializerSpec::UNIFORM, 0.05f, 11))
      .Fill(77, absl::MakeSpan(first));
  Initializer(Spec(InitializerSpec::NORMAL, 0.5f, 12))
      .Fill(77, absl::MakeSpan(last));
  const std::vector<float> apart = {first[0], first[1], first[2],
                                    first[3], first[4], 2.0f,
                                    last[0],  last[1],  last[2]};
  EXPECT_EQ(row, apart);
  // A row shorter than its groups fills what it has.
  std::vector<float> short_row(3);
  Initializer(spec).Fill(77, absl::MakeSpan(short_row));
  EXPECT_EQ(short_row, std::vector<float>(first.begin(), first.begin() + 3));
}

TEST(InitializerTest, CheckRefusesGroupsThatDoNotFit) {
  InitializerSpec spec = Spec(InitializerSpec::UNIFORM, 0.05f, 1);
  EXPECT_TRUE(Initializer::Check(spec, 4).ok());
  LaterColumnsInitializer* later = spec.add_later_columns();
  later->set_first_column(3);
  EXPECT_TRUE(Initializer::Check(spec, 4).ok());
  EXPECT_FALSE(Initializer::Check(spec, 3).ok());
  later->set_first_column(0);
  EXPECT_FALSE(Initializer::Check(spec, 4).ok());
  later->set_first_column(2);
  later->mutable_initializer()->set_scale(-1.0f);
  EXPECT_FALSE(Initializer::Check(spec, 4).ok());
  later->mutable_initializer()->set_scale(1.0f);
  *later->mutable_initializer()->add_later_columns() = *later;
  EXPECT_FALSE(Initializer::Check(spec, 4).ok());
  spec.clear_later_columns();
  spec.set_scale(std::nanf(""));
  EXPECT_FALSE(Initializer::Check(spec, 4).ok());
}

}  // namespace
}  // namespace ps
