#include "net/etcd_security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "net/tls_credentials.h"

ABSL_FLAG(std::string, etcd_tls_ca, "",
          "With --etcd: the CA (PEM) that signed etcd's certificates; etcd is "
          "then reached over TLS (its https client URLs).");
ABSL_FLAG(std::string, etcd_tls_cert, "",
          "With --etcd: this process's certificate (PEM) for etcd's "
          "--client-cert-auth; with --etcd_tls_key.");
ABSL_FLAG(std::string, etcd_tls_key, "",
          "With --etcd: the private key (PEM) of --etcd_tls_cert.");
ABSL_FLAG(std::string, etcd_user, "",
          "With --etcd: the etcd user to authenticate as (etcd's auth "
          "enabled; a role limited to /ps/<job>/ is enough); with "
          "--etcd_password_file. The token is asked for again whenever etcd "
          "ends it.");
ABSL_FLAG(std::string, etcd_password_file, "",
          "With --etcd_user: the file holding its password (surrounding "
          "whitespace ignored).");

namespace ps::net {

absl::Status AddEtcdSecurityFromFlags(EtcdOptions* options) {
  options->tls.ca = absl::GetFlag(FLAGS_etcd_tls_ca);
  options->tls.cert = absl::GetFlag(FLAGS_etcd_tls_cert);
  options->tls.key = absl::GetFlag(FLAGS_etcd_tls_key);
  if (options->tls.cert.empty() != options->tls.key.empty()) {
    return absl::InvalidArgumentError(
        "--etcd_tls_cert and --etcd_tls_key go together");
  }
  if (!options->tls.cert.empty() && options->tls.ca.empty()) {
    return absl::InvalidArgumentError(
        "--etcd_tls_cert needs --etcd_tls_ca (the CA that signed etcd's "
        "certificate)");
  }
  options->user = absl::GetFlag(FLAGS_etcd_user);
  const std::string password_file = absl::GetFlag(FLAGS_etcd_password_file);
  if (options->user.empty() != password_file.empty()) {
    return absl::InvalidArgumentError(
        "--etcd_user and --etcd_password_file go together");
  }
  if (!password_file.empty()) {
    absl::StatusOr<std::string> password = ReadTokenFile(password_file);
    if (!password.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd_password_file: ", password.status().message()));
    }
    options->password = *std::move(password);
  }
  return absl::OkStatus();
}

}  // namespace ps::net
