#include "base/table_spec.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TableSpec Carded(uint32_t max_values_per_field) {
  TableSpec spec;
  spec.set_name("m.embedding");
  spec.set_dim(8);
  spec.mutable_model()->set_input_layout(
      "format=tsv header=0 columns=label,cat,seq:0 multi_separator=| "
      "multi_pooling=sum crosses=");
  spec.mutable_model()->set_max_values_per_field(max_values_per_field);
  return spec;
}

TEST(TableSpecTest, AnUnrecordedLimitMatchesAnyButOtherFieldsCount) {
  EXPECT_TRUE(SameTableSpec(Carded(4), Carded(4)));
  EXPECT_FALSE(SameTableSpec(Carded(4), Carded(10)));
  // A card from before cards recorded the limit, either way round.
  EXPECT_TRUE(SameTableSpec(Carded(0), Carded(4)));
  EXPECT_TRUE(SameTableSpec(Carded(4), Carded(0)));
  // ... but only the limit is let go.
  TableSpec other_dim = Carded(4);
  other_dim.set_dim(16);
  EXPECT_FALSE(SameTableSpec(Carded(0), other_dim));
  EXPECT_FALSE(SameTableSpec(other_dim, Carded(0)));
  TableSpec other_layout = Carded(0);
  other_layout.mutable_model()->set_input_layout("criteo");
  EXPECT_FALSE(SameTableSpec(other_layout, Carded(4)));
  // A spec without a card is not one with.
  TableSpec bare = Carded(0);
  bare.clear_model();
  EXPECT_FALSE(SameTableSpec(bare, Carded(0)));
}

}  // namespace
}  // namespace ps
