#include "net/grpc_status.h"

#include <string>

#include "gtest/gtest.h"

namespace ps::net {
namespace {

TEST(GrpcStatusTest, CodesAndMessagesCrossBothWays) {
  const absl::Status unavailable = absl::UnavailableError("shard 3 is down");
  const grpc::Status answered = ToGrpcStatus(unavailable);
  EXPECT_EQ(answered.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(answered.error_message(), "shard 3 is down");
  const absl::Status seen = FromGrpcStatus(answered, "pulling rows");
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(seen.message(), "pulling rows: shard 3 is down");

  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kAborted,
        absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kUnauthenticated}) {
    const absl::Status status(code, "x");
    EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(status), "call").code(), code);
  }
}

TEST(GrpcStatusTest, OkStaysOkWithoutAMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const absl::Status ok = FromGrpcStatus(grpc::Status::OK, "call");
  EXPECT_TRUE(ok.ok());
  EXPECT_TRUE(ok.message().empty());
}

TEST(GrpcStatusTest, ALongMessageIsTruncatedToTheLimit) {
  const std::string long_message(5 * kMaxStatusMessageBytes, 'k');
  const grpc::Status answered =
      ToGrpcStatus(absl::InvalidArgumentError(long_message));
  EXPECT_EQ(answered.error_message().size(), kMaxStatusMessageBytes);
  EXPECT_EQ(answered.error_message().substr(kMaxStatusMessageBytes - 3), "...");
  EXPECT_EQ(answered.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace ps::net
