#include "net/server_tls_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate: every client must present a certificate it "
          "signed (mutual TLS). Needs --tls_cert and --tls_key.");
ABSL_FLAG(int32_t, tls_reload_s, 60,
          "Re-read --tls_cert, --tls_key and --tls_ca every this many "
          "seconds: certificates rotated on disk (cert-manager's) serve every "
          "connection made after, with no restart (write a key and its "
          "certificate together: a mismatched pair fails new handshakes "
          "until a reload finds them matching). 0: read them once at "
          "start.");
ABSL_FLAG(bool, allow_unauthenticated_clients, false,
          "With --tls_cert but no --tls_ca, listen beyond loopback anyway "
          "(the server then authenticates nobody: for networks you trust).");
ABSL_FLAG(bool, allow_insecure_remote, false,
          "Without TLS a server listens only on loopback; this lets it listen "
          "on other addresses in plaintext (a network you trust).");

namespace ps {

ServerTlsFlags ServerTlsFromFlags() {
  ServerTlsFlags flags;
  flags.files.cert = absl::GetFlag(FLAGS_tls_cert);
  flags.files.key = absl::GetFlag(FLAGS_tls_key);
  flags.files.ca = absl::GetFlag(FLAGS_tls_ca);
  flags.files.reload_seconds = absl::GetFlag(FLAGS_tls_reload_s);
  flags.allow_unauthenticated_clients =
      absl::GetFlag(FLAGS_allow_unauthenticated_clients);
  flags.allow_insecure_remote = absl::GetFlag(FLAGS_allow_insecure_remote);
  return flags;
}

}  // namespace ps
