#include "net/grpc_server_metrics.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "proto/ps.pb.h"

namespace ps {
namespace {

std::string Exposition(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(GrpcServiceAndMethodTest, SplitsAPathAtItsLastSlash) {
  EXPECT_EQ(GrpcServiceAndMethod("/ps.Admin/GetRow"),
            std::make_pair(std::string("ps.Admin"), std::string("GetRow")));
  EXPECT_EQ(GrpcServiceAndMethod("/grpc.health.v1.Health/Check"),
            std::make_pair(std::string("grpc.health.v1.Health"),
                           std::string("Check")));
  for (const char* odd : {"unknown", "/", "//", "/ps.Admin/", "ps.Admin/x"}) {
    EXPECT_EQ(GrpcServiceAndMethod(odd).first, "unknown") << odd;
    EXPECT_EQ(GrpcServiceAndMethod(odd).second, odd) << odd;
  }
}

TEST(GrpcMethodTypeTest, FromTheMethodsDescriptor) {
  // Linked, so that its descriptors are in the generated pool.
  EXPECT_EQ(ps::PullRequest::descriptor()->full_name(), "ps.PullRequest");
  EXPECT_EQ(GrpcMethodType("/ps.ParameterServer/Pull"), "unary");
  EXPECT_EQ(GrpcMethodType("/grpc.health.v1.Health/Watch"), "server_stream");
  EXPECT_EQ(GrpcMethodType("/grpc.health.v1.Health/Check"), "unary");
  EXPECT_EQ(GrpcMethodType("unknown"), "unary");
}

TEST(GrpcServerMetricsTest, CountsByServiceMethodAndCode) {
  prometheus::Registry registry;
  GrpcServerMetrics metrics(
      &registry, {{"shard", "3"}},
      {"/ps.ParameterServer/Pull", "/ps.Admin/GetRow", "unknown"});
  metrics.Observe(0, grpc::StatusCode::OK, absl::Milliseconds(3));
  metrics.Observe(0, grpc::StatusCode::OK, absl::Milliseconds(1));
  metrics.Observe(1, grpc::StatusCode::NOT_FOUND, absl::Seconds(1));
  metrics.Observe(2, static_cast<grpc::StatusCode>(40), absl::Seconds(1));
  const std::string text = Exposition(registry);
  for (const char* line : {
           "grpc_server_handled_total{shard=\"3\",grpc_code=\"OK\","
           "grpc_method=\"Pull\",grpc_service=\"ps.ParameterServer\",grpc_type="
           "\"unary\"} 2",
           "grpc_server_handled_total{shard=\"3\",grpc_code=\"NOT_FOUND\","
           "grpc_method=\"GetRow\",grpc_service=\"ps.Admin\",grpc_type="
           "\"unary\"} "
           "1",
           "grpc_server_handled_total{shard=\"3\",grpc_code=\"OTHER\","
           "grpc_method=\"unknown\",grpc_service=\"unknown\",grpc_type="
           "\"unary\"} "
           "1",
           "grpc_server_handling_seconds_count{shard=\"3\","
           "grpc_method=\"Pull\",grpc_service=\"ps.ParameterServer\",grpc_type="
           "\"unary\"} 2",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  // Pull's buckets: the 1 ms call in the first bound of at least 1 ms, the
  // 3 ms call in the first of at least 3 ms.
  const std::string pull_bucket =
      "grpc_server_handling_seconds_bucket{shard=\"3\",grpc_method=\"Pull\","
      "grpc_service=\"ps.ParameterServer\",grpc_type=\"unary\",le=\"";
  double first_with_one = 0, first_with_two = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, pull_bucket)) continue;
    const std::vector<absl::string_view> bound_and_count =
        absl::StrSplit(line, "\"} ");
    ASSERT_EQ(bound_and_count.size(), 2u) << line;
    double bound = 0, count = 0;
    if (bound_and_count[0] == "+Inf") continue;
    ASSERT_TRUE(absl::SimpleAtod(bound_and_count[0], &bound)) << line;
    ASSERT_TRUE(absl::SimpleAtod(bound_and_count[1], &count)) << line;
    if (count >= 1 && first_with_one == 0) first_with_one = bound;
    if (count >= 2 && first_with_two == 0) first_with_two = bound;
  }
  EXPECT_GE(first_with_one, 0.001);
  EXPECT_LT(first_with_one, 0.002);
  EXPECT_GE(first_with_two, 0.003);
  EXPECT_LT(first_with_two, 0.006);
  // A code never answered has no series: nothing reads as a zero rate of it.
  EXPECT_EQ(text.find("grpc_code=\"UNAVAILABLE\""), std::string::npos);
}

}  // namespace
}  // namespace ps
