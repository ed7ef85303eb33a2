#include "model/input/input_layout.h"

#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::model {
namespace {

TEST(InputLayoutTest, TheDefaultFlagsAreCriteo) {
  auto layout =
      MakeInputLayout("tsv", false, "label,dense*13,cat*26", "|", "sum", "");
  ASSERT_OK(layout);
  EXPECT_EQ(layout->columns, InputLayout::Criteo().columns);
  EXPECT_EQ(layout->fields(), 26);
  EXPECT_EQ(layout->dense_features(), 13);
  EXPECT_TRUE(layout->one_key_per_slot());
  EXPECT_EQ(LayoutText(*layout), "criteo");
  EXPECT_EQ(ColumnsSpec(*layout), "label,dense*13,cat*26");
}

TEST(InputLayoutTest, EachPoolingRoundTrips) {
  for (const char* pooling : {"sum", "mean", "max"}) {
    auto layout =
        MakeInputLayout("tsv", false, "label,multi", "|", pooling, "");
    ASSERT_OK(layout);
    EXPECT_EQ(PoolingName(layout->multi_pooling), pooling);
    auto back = ParseLayoutText(LayoutText(*layout));
    ASSERT_OK(back);
    EXPECT_EQ(back->multi_pooling, layout->multi_pooling) << pooling;
  }
}

TEST(InputLayoutTest, TextRoundTrips) {
  auto layout = MakeInputLayout("csv", true, "skip, cat*3 ,multi,label,dense",
                                " ", "mean", "0:3, 1:2");
  ASSERT_OK(layout);
  EXPECT_EQ(layout->fields(), 4);
  EXPECT_EQ(layout->slots(), 6);
  EXPECT_FALSE(layout->one_key_per_slot());
  const std::string text = LayoutText(*layout);
  EXPECT_EQ(text,
            "format=csv header=1 columns=skip,cat*3,multi,label,dense "
            "multi_separator=space multi_pooling=mean crosses=0:3,1:2");
  auto back = ParseLayoutText(text);
  ASSERT_OK(back);
  EXPECT_EQ(LayoutText(*back), text);
  EXPECT_EQ(back->multi_separator, ' ');
  EXPECT_EQ(back->crosses, layout->crosses);
  // Cards written before layouts were recorded.
  auto old = ParseLayoutText("");
  ASSERT_OK(old);
  EXPECT_EQ(old->columns, InputLayout::Criteo().columns);
  EXPECT_THAT(ParseLayoutText("format=tsv columns=cat,label shape=round"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(InputLayoutTest, EveryKindOfFeatureColumnMakesALayoutOnItsOwn) {
  for (const char* columns :
       {"label,dense*13", "label,cat", "label,multi*2", "cat,label,dense",
        "skip,label,cat*3,skip", "id,label,dense*2,cat*2"}) {
    auto layout = MakeInputLayout("tsv", false, columns, "|", "sum", "");
    ASSERT_TRUE(layout.ok()) << columns << ": " << layout.status();
    EXPECT_EQ(ColumnsSpec(*layout), columns);
    auto text = ParseLayoutText(LayoutText(*layout));
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->columns, layout->columns) << columns;
  }
  auto with_id = MakeInputLayout("tsv", false, "id,label,cat", "|", "sum", "");
  ASSERT_TRUE(with_id.ok());
  EXPECT_TRUE(with_id->has_id());
  EXPECT_EQ(with_id->fields(), 1);
  EXPECT_EQ(with_id->dense_features(), 0);
}

TEST(InputLayoutTest, AWeightColumnIsOneAtMostAndRoundTrips) {
  auto layout =
      MakeInputLayout("tsv", false, "label,weight,dense,cat", "|", "sum", "");
  ASSERT_OK(layout);
  EXPECT_TRUE(layout->has_weight());
  EXPECT_EQ(layout->fields(), 1);
  EXPECT_EQ(layout->dense_features(), 1);
  EXPECT_EQ(ColumnsSpec(*layout), "label,weight,dense,cat");
  auto back = ParseLayoutText(LayoutText(*layout));
  ASSERT_OK(back);
  EXPECT_EQ(back->columns, layout->columns);
  EXPECT_FALSE(InputLayout::Criteo().has_weight());
  auto two =
      MakeInputLayout("tsv", false, "label,weight*2,cat", "|", "sum", "");
  EXPECT_THAT(two, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(two.status().message().find("one weight column"), std::string::npos)
      << two.status();
  // A weight is not a feature.
  EXPECT_FALSE(
      MakeInputLayout("tsv", false, "label,weight", "|", "sum", "").ok());
}

TEST(InputLayoutTest, NamedLabelsRoundTripInFileOrder) {
  auto layout = MakeInputLayout("tsv", false,
                                "id,label:click,dense*2,label:convert,cat*2",
                                "|", "sum", "");
  ASSERT_OK(layout);
  EXPECT_EQ(layout->labels(), 2);
  EXPECT_EQ(layout->label_names,
            (std::vector<std::string>{"click", "convert"}));
  EXPECT_EQ(layout->LabelIndex("convert"), 1);
  EXPECT_EQ(layout->LabelIndex("label"), -1);
  EXPECT_TRUE(layout->label_may_be_unknown(0));
  EXPECT_EQ(ColumnsSpec(*layout), "id,label:click,dense*2,label:convert,cat*2");
  auto back = ParseLayoutText(LayoutText(*layout));
  ASSERT_OK(back);
  EXPECT_EQ(back->label_names, layout->label_names);
  EXPECT_EQ(back->columns, layout->columns);
  // One named label is not Criteo's layout, even with Criteo's kinds.
  auto named = MakeInputLayout("tsv", false, "label:click,dense*13,cat*26", "|",
                               "sum", "");
  ASSERT_OK(named);
  EXPECT_NE(LayoutText(*named), "criteo");
  EXPECT_EQ(ParseLayoutText(LayoutText(*named))->label_names,
            std::vector<std::string>{"click"});
  // A plain label is named "label" and is never unknown.
  const InputLayout criteo = InputLayout::Criteo();
  EXPECT_EQ(criteo.LabelIndex("label"), 0);
  EXPECT_FALSE(criteo.label_may_be_unknown(0));
}

TEST(InputLayoutTest, ASeqColumnMayListAnotherFieldsValues) {
  auto layout = MakeInputLayout("tsv", false, "label,cat,seq:0,multi,seq*2",
                                "|", "sum", "");
  ASSERT_OK(layout);
  EXPECT_EQ(layout->fields(), 5);
  EXPECT_EQ(layout->KeyField(1), 0u);  // seq:0
  EXPECT_EQ(layout->KeyField(3), 3u);  // a seq column of its own
  EXPECT_EQ(layout->KeyField(2), 2u);
  EXPECT_EQ(ColumnsSpec(*layout), "label,cat,seq:0,multi,seq*2");
  auto back = ParseLayoutText(LayoutText(*layout));
  ASSERT_OK(back);
  EXPECT_EQ(back->sequence_key_fields, layout->sequence_key_fields);
  for (const char* bad : {"label,cat,seq:1", "label,cat,seq:x",
                          "label,seq,seq:0", "label,cat,seq:-1"}) {
    EXPECT_THAT(MakeInputLayout("tsv", false, bad, "|", "sum", ""),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

TEST(InputLayoutTest, BadFlagsNameTheFlag) {
  struct Case {
    const char* format;
    const char* columns;
    const char* separator;
    const char* pooling;
    const char* crosses;
    const char* flag;
  };
  const Case cases[] = {
      {"json", "label,cat", "|", "sum", "", "--format"},
      {"tsv", "label,cat,color", "|", "sum", "", "--columns"},
      {"tsv", "label,cat*0", "|", "sum", "", "--columns"},
      {"tsv", "label,cat*x", "|", "sum", "", "--columns"},
      {"tsv", "cat,dense", "|", "sum", "", "label"},
      {"tsv", "label,label,cat", "|", "sum", "", "label"},
      {"tsv", "label:click,label:click,cat", "|", "sum", "", "\"click\""},
      {"tsv", "label:a-b,cat", "|", "sum", "", "letters"},
      {"tsv", "label:,cat", "|", "sum", "", "letters"},
      {"tsv", "label:label,cat", "|", "sum", "", "plain"},
      {"tsv", "label:x*2,cat", "|", "sum", "", "no *N"},
      {"tsv", "label,skip,id", "|", "sum", "", "feature column"},
      {"tsv", "id,label,cat,id", "|", "sum", "", "one id column"},
      {"tsv", "label,cat", "||", "sum", "", "--multi_separator"},
      {"csv", "label,multi", ",", "sum", "", "--multi_separator"},
      {"tsv", "label,cat", "|", "median", "", "--multi_pooling"},
      {"tsv", "label,cat*2", "|", "sum", "0:2", "--crosses"},
      {"tsv", "label,cat*2", "|", "sum", "1:1", "--crosses"},
      {"tsv", "label,cat*2", "|", "sum", "0-1", "--crosses"},
  };
  for (const Case& c : cases) {
    auto layout = MakeInputLayout(c.format, false, c.columns, c.separator,
                                  c.pooling, c.crosses);
    EXPECT_THAT(layout, StatusIs(absl::StatusCode::kInvalidArgument))
        << c.columns;
    EXPECT_NE(layout.status().message().find(c.flag), std::string::npos)
        << layout.status();
  }
}

}  // namespace
}  // namespace ps::model
