#include "model/input/tf_example.h"

#include <string>

#include "base/status_matchers.h"
#include "gtest/gtest.h"
#include "model/input/line_parser.h"
#include "proto/tf_example.pb.h"

namespace ps::model {
namespace {

constexpr char kColumns[] =
    "label:clicked,dense:price,cat:user,multi:tags,seq:history:0,id:rid,"
    "weight:w";
// The same columns as lines say them.
constexpr char kTextColumns[] = "label:clicked,dense,cat,multi,seq:0,id,weight";

InputLayout Layout(const char* format, const char* columns,
                   const char* crosses = "0:1") {
  absl::StatusOr<InputLayout> layout =
      MakeInputLayout(format, false, columns, "|", "sum", crosses);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? *layout : InputLayout();
}

void AddBytes(tfexample::Example* example, const std::string& name,
              std::initializer_list<const char*> values) {
  auto& list = *(*example->mutable_features()->mutable_feature())[name]
                    .mutable_bytes_list();
  for (const char* value : values) list.add_value(value);
}
void AddInts(tfexample::Example* example, const std::string& name,
             std::initializer_list<int64_t> values) {
  auto& list = *(*example->mutable_features()->mutable_feature())[name]
                    .mutable_int64_list();
  for (int64_t value : values) list.add_value(value);
}
void AddFloats(tfexample::Example* example, const std::string& name,
               std::initializer_list<float> values) {
  auto& list = *(*example->mutable_features()->mutable_feature())[name]
                    .mutable_float_list();
  for (float value : values) list.add_value(value);
}

tfexample::Example Record() {
  tfexample::Example record;
  AddInts(&record, "clicked", {1});
  AddFloats(&record, "price", {2.5f});
  AddBytes(&record, "user", {"u7"});
  AddBytes(&record, "tags", {"a", "b"});
  AddInts(&record, "history", {3, 4, 5});
  AddBytes(&record, "rid", {"r1"});
  AddFloats(&record, "w", {2.0f});
  AddBytes(&record, "unused", {"x"});
  return record;
}

void ExpectSame(const Example& a, const Example& b) {
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.label_known, b.label_known);
  EXPECT_EQ(a.has_label, b.has_label);
  EXPECT_EQ(a.weight, b.weight);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.slot_end, b.slot_end);
  EXPECT_EQ(a.id, b.id);
}

TEST(TfExampleTest, ARecordParsesAsTheLineOfTheSameValues) {
  const InputLayout layout = Layout("tfrecord", kColumns);
  Example from_record, from_line;
  ASSERT_OK(ParseTfExample(Record().SerializeAsString(), layout, &from_record));
  ASSERT_OK(ParseLine("1\t2.5\tu7\ta|b\t3|4|5\tr1\t2",
                      Layout("tsv", kTextColumns), &from_line));
  ExpectSame(from_record, from_line);
  EXPECT_EQ(from_record.weight, 2.0f);
  EXPECT_EQ(from_record.id, "r1");
  // 3 fields and the cross: the history's keys are field 0's.
  ASSERT_EQ(from_record.slots(), 4);
  EXPECT_EQ(from_record.keys[from_record.slot_begin(2)], FeatureKey(0, "3"));
}

TEST(TfExampleTest, MissingFeaturesAreEmptyColumns) {
  const InputLayout layout = Layout("tfrecord", kColumns);
  tfexample::Example record;
  AddInts(&record, "clicked", {0});
  AddFloats(&record, "w", {1.0f});
  Example from_record, from_line;
  ASSERT_OK(ParseTfExample(record.SerializeAsString(), layout, &from_record));
  ASSERT_OK(
      ParseLine("0\t\t\t\t\t\t1", Layout("tsv", kTextColumns), &from_line));
  ExpectSame(from_record, from_line);

  // A named label missing: unknown. Scoring, with no label at all: none.
  tfexample::Example unlabeled = Record();
  unlabeled.mutable_features()->mutable_feature()->erase("clicked");
  Example example;
  ASSERT_OK(ParseTfExample(unlabeled.SerializeAsString(), layout, &example));
  EXPECT_EQ(example.label_known, (absl::InlinedVector<bool, 2>{false}));
  ASSERT_OK(ParseTfExample(unlabeled.SerializeAsString(), layout, &example,
                           LabelColumn::kOptional));
  EXPECT_FALSE(example.has_label);
  // A plain label is required for training.
  const InputLayout plain = Layout("tfrecord", "label,dense:price", "");
  tfexample::Example no_label;
  AddFloats(&no_label, "price", {1});
  EXPECT_THAT(ParseTfExample(no_label.SerializeAsString(), plain, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
  AddInts(&no_label, "label", {1});
  EXPECT_OK(ParseTfExample(no_label.SerializeAsString(), plain, &example));
}

TEST(TfExampleTest, BadRecordsSayWhy) {
  const InputLayout layout = Layout("tfrecord", kColumns);
  Example example;
  auto message = [&](const tfexample::Example& record) {
    return std::string(
        ParseTfExample(record.SerializeAsString(), layout, &example).message());
  };
  tfexample::Example two_prices = Record();
  AddFloats(&two_prices, "price", {3.0f});
  EXPECT_NE(message(two_prices).find("feature price has 2 values"),
            std::string::npos)
      << message(two_prices);
  tfexample::Example separator = Record();
  AddBytes(&separator, "tags", {"c|d"});
  EXPECT_NE(message(separator).find("multi separator"), std::string::npos);
  tfexample::Example label_two = Record();
  (*label_two.mutable_features()->mutable_feature())["clicked"]
      .mutable_int64_list()
      ->set_value(0, 2);
  EXPECT_NE(message(label_two).find("must be 0 or 1"), std::string::npos)
      << message(label_two);
  EXPECT_THAT(ParseTfExample("\xff\xff\xff", layout, &example),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TfExampleTest, LayoutsNameEveryFeature) {
  const InputLayout layout = Layout("tfrecord", kColumns);
  EXPECT_TRUE(layout.tfrecord);
  EXPECT_EQ(layout.feature_names,
            (std::vector<std::string>{"clicked", "price", "user", "tags",
                                      "history", "rid", "w"}));
  EXPECT_EQ(layout.label_names, (std::vector<std::string>{"clicked"}));
  EXPECT_EQ(ColumnsSpec(layout), kColumns);
  absl::StatusOr<InputLayout> back = ParseLayoutText(LayoutText(layout));
  ASSERT_TRUE(back.ok()) << back.status() << " " << LayoutText(layout);
  EXPECT_TRUE(back->tfrecord);
  EXPECT_EQ(back->feature_names, layout.feature_names);
  EXPECT_EQ(back->sequence_key_fields, layout.sequence_key_fields);
  EXPECT_EQ(back->crosses, layout.crosses);
  for (const char* bad :
       {"label,dense", "label,dense:a*2", "label,skip:x", "label,dense:a,cat:a",
        "label,cat:a b", "label,dens:a", "label,seq:a:b", "label,seq:a:-1"}) {
    EXPECT_THAT(MakeInputLayout("tfrecord", false, bad, "|", "sum", ""),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_THAT(
      MakeInputLayout("tfrecord", true, "label,dense:a", "|", "sum", ""),
      StatusIs(absl::StatusCode::kInvalidArgument));
  // The error quotes the item as written.
  const absl::Status named =
      MakeInputLayout("tfrecord", false, "label,seq:history:item", "|", "sum",
                      "")
          .status();
  EXPECT_NE(named.message().find("\"seq:history:item\""),
            absl::string_view::npos)
      << named;
}

}  // namespace
}  // namespace ps::model
