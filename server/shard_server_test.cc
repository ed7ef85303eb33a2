// ShardServer::Start failures leave nothing half-built behind: a second
// server on a data directory in use, or on a port in use, gets a clear
// status (and, before the fix, crashed in its destructor).

#include "server/shard_server.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

ServerOptions Options(const std::string& dir) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.store.data_dir = dir;
  return options;
}

TEST(ShardServerTest, ASecondServerOnTheSameDirectoryIsRefused) {
  const std::string dir = FreshDir("same_dir");
  auto first = ShardServer::Start(Options(dir));
  ASSERT_OK(first);
  auto second = ShardServer::Start(Options(dir));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status();
  EXPECT_OK((*first)->Shutdown(absl::ZeroDuration()));
}

TEST(ShardServerTest, APortInUseIsUnavailable) {
  auto first = ShardServer::Start(Options(FreshDir("port_first")));
  ASSERT_OK(first);
  ServerOptions options = Options(FreshDir("port_second"));
  options.listen_address = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = ShardServer::Start(options);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_OK((*first)->Shutdown(absl::ZeroDuration()));
}

}  // namespace
}  // namespace ps::server
