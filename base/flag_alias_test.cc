#include "base/flag_alias.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, block_cache_mb, 256, "The new name.");
ABSL_FLAG(int, cache_mb, 256, "Deprecated: use --block_cache_mb.");
ABSL_FLAG(std::string, precision, "fp32", "The new name.");
ABSL_FLAG(std::string, format, "fp32", "Deprecated: use --precision.");
ABSL_FLAG(int, rocksdb_block_cache_mb, 256, "The newest name.");
ABSL_FLAG(int, rpc_timeout_s, 30, "The new name.");
ABSL_FLAG(int, timeout_s, 10, "Deprecated: use --rpc_timeout_s.");

namespace ps {
namespace {

// The command line this test binary is given: --cache_mb alone (the old
// name of --block_cache_mb), both --format and --precision, and neither
// --timeout_s nor --rpc_timeout_s.
class FlagAliasTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<char*> argv = {const_cast<char*>("flag_alias_test"),
                               const_cast<char*>("--cache_mb=64"),
                               const_cast<char*>("--format=fp16"),
                               const_cast<char*>("--precision=fp16")};
    absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  }
};

TEST_F(FlagAliasTest, TheOldNameGivenAloneIsTheValue) {
  testing::internal::CaptureStderr();
  absl::StatusOr<int> megabytes =
      FlagOrAlias(FLAGS_block_cache_mb, FLAGS_cache_mb);
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(megabytes.ok()) << megabytes.status();
  EXPECT_EQ(*megabytes, 64);
  EXPECT_NE(said.find("--cache_mb is deprecated: use --block_cache_mb"),
            std::string::npos)
      << said;
}

TEST_F(FlagAliasTest, BothNamesAreRefused) {
  absl::StatusOr<std::string> precision =
      FlagOrAlias(FLAGS_precision, FLAGS_format);
  EXPECT_EQ(precision.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(precision.status().message().find("--precision"),
            std::string::npos);
}

TEST_F(FlagAliasTest, WithoutTheOldNameTheNewOneIsRead) {
  EXPECT_EQ(FlagOrAlias(FLAGS_rpc_timeout_s, FLAGS_timeout_s).value_or(-1), 30);
  absl::SetFlag(&FLAGS_rpc_timeout_s, 5);
  EXPECT_EQ(FlagOrAlias(FLAGS_rpc_timeout_s, FLAGS_timeout_s).value_or(-1), 5);
  // The old name at its default counts as not given.
  absl::SetFlag(&FLAGS_timeout_s, 10);
  EXPECT_EQ(FlagOrAlias(FLAGS_rpc_timeout_s, FLAGS_timeout_s).value_or(-1), 5);
}

TEST_F(FlagAliasTest, AFlagRenamedTwiceReadsEitherOldName) {
  // --cache_mb=64 is given: the older of two old names.
  testing::internal::CaptureStderr();
  absl::StatusOr<int> megabytes = FlagOrAlias(
      FLAGS_rocksdb_block_cache_mb, FLAGS_block_cache_mb, FLAGS_cache_mb);
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(megabytes.ok()) << megabytes.status();
  EXPECT_EQ(*megabytes, 64);
  EXPECT_NE(said.find("--cache_mb is deprecated: use --rocksdb_block_cache_mb"),
            std::string::npos)
      << said;
  // Two of the three names given are refused, whichever two.
  absl::SetFlag(&FLAGS_block_cache_mb, 32);
  absl::StatusOr<int> both = FlagOrAlias(FLAGS_rocksdb_block_cache_mb,
                                         FLAGS_block_cache_mb, FLAGS_cache_mb);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_block_cache_mb, 256);
  absl::SetFlag(&FLAGS_rocksdb_block_cache_mb, 128);
  both = FlagOrAlias(FLAGS_rocksdb_block_cache_mb, FLAGS_block_cache_mb,
                     FLAGS_cache_mb);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("--rocksdb_block_cache_mb"),
            std::string::npos)
      << both.status();
  absl::SetFlag(&FLAGS_rocksdb_block_cache_mb, 256);
}

}  // namespace
}  // namespace ps
