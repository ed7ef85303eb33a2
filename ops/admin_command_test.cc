#include "ops/admin_command.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/exit_codes.h"
#include "gtest/gtest.h"

namespace ps::ops {
namespace {

TEST(AdminCommandTest, DumpWritesValidJsonForAnyValue) {
  const Json value = {{"nan", std::numeric_limits<double>::quiet_NaN()},
                      {"inf", std::numeric_limits<double>::infinity()},
                      {"path", std::string("bad\xff"
                                           "byte")},
                      {"n", 3}};
  const std::string dumped = Dump(value);
  EXPECT_EQ(dumped,
            "{\"nan\":null,\"inf\":null,\"path\":\"bad\xef\xbf\xbd"
            "byte\",\"n\":3}");
  EXPECT_NO_THROW(Json::parse(dumped));
}

TEST(AdminCommandTest, DecimalKeepsAFloatsShortestForm) {
  EXPECT_EQ(Decimal(0.01f), 0.01);
  EXPECT_EQ(Decimal(-2.5f), -2.5);
  EXPECT_TRUE(std::isnan(Decimal(std::nanf(""))));
  EXPECT_NE(static_cast<double>(0.01f), 0.01);  // what Decimal is for
}

TEST(AdminCommandTest, ShardAnswersCarryTheReplyOrTheError) {
  std::vector<ShardAnswer> answers = {ShardAnswer("a:1"), ShardAnswer("b:2")};
  answers[0].fields = {{"rows", 7}};
  answers[1].status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no table");
  const Json shards = ShardAnswersJson(answers);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0], Json({{"server", "a:1"}, {"rows", 7}}));
  EXPECT_EQ(
      shards[1],
      Json({{"server", "b:2"},
            {"error", {{"code", "NOT_FOUND"}, {"message", "no table"}}}}));
}

TEST(AdminCommandTest, FailuresBecomeTheDocumentedExitCodes) {
  std::vector<ShardAnswer> answers = {ShardAnswer("a:1"), ShardAnswer("b:2")};
  EXPECT_EQ(ReportFailures("stats", answers), kExitDone);
  answers[1].status = grpc::Status(grpc::StatusCode::INTERNAL, "broken");
  EXPECT_EQ(ReportFailures("stats", answers), kExitFailed);
  answers[0].status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
  EXPECT_EQ(ReportFailures("stats", answers), kExitUnavailable);
  EXPECT_EQ(Fail("bad flag"), kExitUsage);
  EXPECT_EQ(Fail(absl::UnavailableError("down")), kExitUnavailable);
}

}  // namespace
}  // namespace ps::ops
