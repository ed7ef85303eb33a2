// File: net/etcd_security_flags.h
//
// How every binary that takes --etcd reaches a secured etcd: TLS with a
// client certificate (--etcd_tls_ca, --etcd_tls_cert, --etcd_tls_key, for
// etcd's --client-cert-auth) and etcd's own users (--etcd_user with
// --etcd_password_file). Defined once here, so that ps_server, ps_worker and
// ps_admin say the same; linking this library defines the flags.

#ifndef PS_NET_ETCD_SECURITY_FLAGS_H_
#define PS_NET_ETCD_SECURITY_FLAGS_H_

#include "absl/status/status.h"
#include "net/etcd_client.h"

namespace ps::net {

// Sets options->tls, user and password from the flags. INVALID_ARGUMENT for
// a certificate without its key (or the reverse), a user without a password
// file (or the reverse), an empty or unreadable password file.
absl::Status AddEtcdSecurityFromFlags(EtcdOptions* options);

}  // namespace ps::net

#endif  // PS_NET_ETCD_SECURITY_FLAGS_H_
