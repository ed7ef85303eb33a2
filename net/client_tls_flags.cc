#include "net/client_tls_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate that signed the shards' certificates: talk TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for shards that require one (with "
          "--tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name the shards' certificates carry, when it is not the host "
          "in --servers.");

ABSL_FLAG(int32_t, tls_reload_s, 60,
          "Re-read --tls_ca, --tls_cert and --tls_key every this many "
          "seconds: certificates rotated on disk are used by every connection "
          "made after, with no restart (write a key and its certificate "
          "together: a mismatched pair fails new handshakes until a reload "
          "finds them matching). 0: read them once at start.");

namespace ps {

TlsFiles ClientTlsFilesFromFlags() {
  TlsFiles files;
  files.ca = absl::GetFlag(FLAGS_tls_ca);
  files.cert = absl::GetFlag(FLAGS_tls_cert);
  files.key = absl::GetFlag(FLAGS_tls_key);
  files.server_name = absl::GetFlag(FLAGS_tls_server_name);
  files.reload_seconds = absl::GetFlag(FLAGS_tls_reload_s);
  return files;
}

}  // namespace ps
