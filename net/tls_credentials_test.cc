#include "net/tls_credentials.h"

#include <fstream>
#include <string>

#include "base/status_matchers.h"
#include "base/test_dirs.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using absl::StatusCode;

TEST(TlsCredentialsTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.2:0"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:9000"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50051"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackAddress(":50051"));
  EXPECT_FALSE(IsLoopbackAddress("10.1.2.3:50051"));
  EXPECT_FALSE(IsLoopbackAddress("shard-0.ps.default.svc:50051"));
  EXPECT_FALSE(IsLoopbackAddress("127example.com:1"));
  EXPECT_FALSE(IsLoopbackAddress("127.evil.example:1"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.example.com:1"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.256:1"));
}

TEST(TlsCredentialsTest, BeyondLoopbackAServerNeedsTlsAndAClientCa) {
  TlsFiles none;
  TlsFiles server_only;
  server_only.cert = "cert.pem";
  server_only.key = "key.pem";
  TlsFiles mutual = server_only;
  mutual.ca = "ca.pem";
  // Loopback: anything goes.
  EXPECT_OK(CheckListenSecurity("127.0.0.1:0", none, false, false, "x"));
  absl::Status plaintext =
      CheckListenSecurity("0.0.0.0:1", none, false, false, "read every weight");
  EXPECT_THAT(plaintext, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(plaintext.message().find("without TLS: anyone who reaches it "
                                     "could read every weight"),
            std::string::npos)
      << plaintext;
  EXPECT_OK(CheckListenSecurity("0.0.0.0:1", none, true, false, "x"));
  EXPECT_THAT(CheckListenSecurity("0.0.0.0:1", server_only, false, false, "x"),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_OK(CheckListenSecurity("0.0.0.0:1", server_only, false, true, "x"));
  EXPECT_OK(CheckListenSecurity("0.0.0.0:1", mutual, false, false, "x"));
}

TEST(TlsCredentialsTest, HalfAPairIsRefused) {
  TlsFiles files;
  files.cert = "/nonexistent/cert.pem";
  EXPECT_THAT(ServerCredentials(files), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ChannelCredentials(files),
              StatusIs(StatusCode::kInvalidArgument));
  TlsFiles ca_only;
  ca_only.ca = "/nonexistent/ca.pem";
  EXPECT_THAT(ServerCredentials(ca_only),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ChannelCredentials(ca_only), StatusIs(StatusCode::kNotFound));
}

TEST(TlsCredentialsTest, NoFilesIsPlaintext) {
  EXPECT_OK(ServerCredentials(TlsFiles()));
  EXPECT_OK(ChannelCredentials(TlsFiles()));
}

TEST(TlsCredentialsTest, TokenFiles) {
  const std::string dir = FreshTestDir("token_files");
  std::ofstream(dir + "/token") << "  s3cret-token\n";
  std::ofstream(dir + "/empty") << " \n";
  auto token = ReadTokenFile(dir + "/token");
  ASSERT_OK(token);
  EXPECT_EQ(*token, "s3cret-token");
  EXPECT_THAT(ReadTokenFile(dir + "/empty"),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadTokenFile(dir + "/missing"), StatusIs(StatusCode::kNotFound));
}

TEST(TlsCredentialsTest, ATokenTravelsInPlaintextOnlyOnLoopback) {
  const std::vector<std::string> loopback = {"127.0.0.1:1", "[::1]:2",
                                             "localhost:3"};
  std::vector<std::string> remote = loopback;
  remote.push_back("10.0.0.7:50051");
  EXPECT_OK(CheckTokenStaysPrivate("t", TlsFiles(), loopback));
  EXPECT_THAT(CheckTokenStaysPrivate("t", TlsFiles(), remote),
              StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_OK(CheckTokenStaysPrivate("", TlsFiles(), remote));  // no token
  TlsFiles tls;
  tls.ca = "ca.pem";
  EXPECT_OK(CheckTokenStaysPrivate("t", tls, remote));
}

}  // namespace
}  // namespace ps
