#include "net/tls_credentials.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace ps {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  }
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

absl::Status CheckPair(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (files.reload_seconds < 0) {
    return absl::InvalidArgumentError("--tls_reload_s must be >= 0");
  }
  return absl::OkStatus();
}

// Watches `files` (those named) for changes every reload_seconds.
std::shared_ptr<grpc::experimental::CertificateProviderInterface> Watcher(
    const TlsFiles& files) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca,
      static_cast<unsigned int>(files.reload_seconds));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status pair = CheckPair(files); !pair.ok()) return pair;
  if (files.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca on a server needs --tls_cert and --tls_key as well");
  }
  grpc::SslServerCredentialsOptions options(
      files.ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = ReadFile(files.cert, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(files.key, "--tls_key");
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile(files.ca, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (files.reload_seconds == 0) return grpc::SslServerCredentials(options);
  // The files read above were there; from now on gRPC reads them.
  grpc::experimental::TlsServerCredentialsOptions watched(Watcher(files));
  watched.watch_identity_key_cert_pairs();
  if (files.ca.empty()) {
    watched.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    watched.watch_root_certs();
    watched.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(watched);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status pair = CheckPair(files); !pair.ok()) return pair;
  grpc::SslCredentialsOptions options;
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile(files.ca, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(files.cert, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(files.key, "--tls_key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  if (files.reload_seconds == 0 || (files.ca.empty() && files.cert.empty())) {
    return grpc::SslCredentials(options);
  }
  // Without --tls_ca, the system's roots (no root watched).
  grpc::experimental::TlsChannelCredentialsOptions watched;
  watched.set_certificate_provider(Watcher(files));
  if (!files.ca.empty()) watched.watch_root_certs();
  if (!files.cert.empty()) watched.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(watched);
}

void AddTlsChannelArguments(const TlsFiles& files,
                            grpc::ChannelArguments* arguments) {
  if (files.enabled() && !files.server_name.empty()) {
    arguments->SetSslTargetNameOverride(files.server_name);
  }
}

absl::Status CheckListenSecurity(absl::string_view listen, const TlsFiles& tls,
                                 bool allow_insecure_remote,
                                 bool allow_unauthenticated_clients,
                                 absl::string_view exposes) {
  if (IsLoopbackAddress(listen)) return absl::OkStatus();
  if (!tls.enabled() && !allow_insecure_remote) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to listen on ", listen,
        " without TLS: anyone who reaches it could ", exposes,
        ". Give --tls_cert and --tls_key (and --tls_ca for mutual TLS), or "
        "--allow_insecure_remote on a network you trust"));
  }
  if (tls.enabled() && tls.ca.empty() && !allow_unauthenticated_clients) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to listen on ", listen,
        " with TLS but without --tls_ca: it would authenticate nobody, and "
        "anyone who reaches it could ",
        exposes,
        ". Give --tls_ca (mutual TLS: clients present certificates it "
        "signed), or --allow_unauthenticated_clients on a network you "
        "trust"));
  }
  return absl::OkStatus();
}

bool IsLoopbackAddress(absl::string_view host_port) {
  absl::string_view host = host_port;
  if (absl::StartsWith(host, "[")) {  // [v6]:port
    const size_t close = host.find(']');
    host = close == absl::string_view::npos ? "" : host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as an address (not a name that starts "127.").
  const std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (absl::string_view part : parts) {
    int value = 0;
    if (part.empty() || part.size() > 3 ||
        !std::all_of(part.begin(), part.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(part, &value) || value > 255) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path, "the token file");
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token file ", path, " is empty"));
  }
  return token;
}

absl::Status CheckTokenStaysPrivate(const std::string& token,
                                    const TlsFiles& files,
                                    const std::vector<std::string>& addresses) {
  if (token.empty() || files.enabled()) return absl::OkStatus();
  for (const std::string& address : addresses) {
    if (!IsLoopbackAddress(address)) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to send the admin token in plaintext to ",
                       address, ": give --tls_ca (the shards need TLS)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
