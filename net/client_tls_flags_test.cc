#include "net/client_tls_flags.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);

namespace ps {
namespace {

TEST(ClientTlsFlagsTest, EachFlagLandsInItsOwnField) {
  EXPECT_FALSE(ClientTlsFilesFromFlags().enabled());
  absl::SetFlag(&FLAGS_tls_ca, "ca.pem");
  absl::SetFlag(&FLAGS_tls_cert, "cert.pem");
  absl::SetFlag(&FLAGS_tls_key, "key.pem");
  absl::SetFlag(&FLAGS_tls_server_name, "shard.example");
  const TlsFiles files = ClientTlsFilesFromFlags();
  EXPECT_TRUE(files.enabled());
  EXPECT_EQ(files.ca, "ca.pem");
  EXPECT_EQ(files.cert, "cert.pem");
  EXPECT_EQ(files.key, "key.pem");
  EXPECT_EQ(files.server_name, "shard.example");
}

}  // namespace
}  // namespace ps
