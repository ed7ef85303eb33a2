// File: net/tls_credentials.h
//
// TLS for the project's gRPC servers and channels, from PEM files: the one
// place both sides turn their --tls_* flags into gRPC credentials, so that
// ps_server, ps_worker and ps_admin agree on what the flags mean.
//
//   server: --tls_cert/--tls_key serve TLS; adding --tls_ca requires every
//           client to present a certificate signed by that CA (mutual TLS).
//   client: --tls_ca trusts servers signed by it (default: the system's
//           roots); --tls_cert/--tls_key present a client certificate.
//
// The files are read when the credentials are made (a missing one is an
// error then) and again every `reload_seconds` by gRPC's file-watching
// certificate provider, so that certificates rotated on disk (cert-manager's,
// a mounted Secret's) are used by every connection made after, with no
// restart; a file that cannot be read keeps the ones read before, but a key
// and certificate that do not match (written one at a time) fail new
// handshakes until a reload finds a matching pair.
//
// Also: whether a listen address is loopback (a shard serves anything else
// only over TLS, unless told otherwise), and reading a bearer token file.
// Pure functions of their arguments and the files; thread-safe.

#ifndef PS_NET_TLS_CREDENTIALS_H_
#define PS_NET_TLS_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps {

struct TlsFiles {
  // PEM file of the certificate authority (see above). Default: none.
  std::string ca;
  // PEM files of this side's certificate chain and private key; both or
  // neither. Default: none.
  std::string cert;
  std::string key;
  // Client only: the name the server's certificate must carry, when it is
  // not the host dialled (an IP address, say). Default: the host dialled.
  std::string server_name;
  // Re-read the files every this many seconds; 0: read them once. Default:
  // 0; the --tls_* flags' files take --tls_reload_s (60).
  int reload_seconds = 0;

  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// Plaintext when `files` is empty. INVALID_ARGUMENT for a cert without a
// key (or the reverse), or a CA without a server certificate; NOT_FOUND for
// a file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& files);

// Plaintext when `files` is empty. INVALID_ARGUMENT for a cert without a
// key (or the reverse); NOT_FOUND for a file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files);

// Adds what `files` needs to a channel's arguments (the server name).
void AddTlsChannelArguments(const TlsFiles& files,
                            grpc::ChannelArguments* arguments);

// Whether the host of `host_port` ("127.0.0.1:50051", "[::1]:0",
// "localhost:9000") is a loopback address. An empty host or 0.0.0.0 (every
// interface) is not.
bool IsLoopbackAddress(absl::string_view host_port);

// Whom a server on `listen` would let in, checked before it binds:
// INVALID_ARGUMENT beyond loopback without TLS (unless
// `allow_insecure_remote`), or with TLS but no CA to check clients against
// (unless `allow_unauthenticated_clients`). `exposes` says what anyone who
// reached it could then do ("read every weight").
absl::Status CheckListenSecurity(absl::string_view listen, const TlsFiles& tls,
                                 bool allow_insecure_remote,
                                 bool allow_unauthenticated_clients,
                                 absl::string_view exposes);

// The token in `path` (surrounding white space removed). NOT_FOUND for a
// file that cannot be read, INVALID_ARGUMENT for an empty token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// FAILED_PRECONDITION, naming the address, if an admin token would travel
// in plaintext (`files` empty) beyond loopback to one of `addresses`; OK
// without a token.
absl::Status CheckTokenStaysPrivate(const std::string& token,
                                    const TlsFiles& files,
                                    const std::vector<std::string>& addresses);

}  // namespace ps

#endif  // PS_NET_TLS_CREDENTIALS_H_
