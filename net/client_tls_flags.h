// File: net/client_tls_flags.h
//
// The TLS flags of the binaries that call the shards (ps_worker, ps_admin):
// --tls_ca, --tls_cert, --tls_key, --tls_server_name and --tls_reload_s,
// defined once in
// client_tls_flags.cc so that both binaries say the same. Linking this
// library defines the flags.

#ifndef PS_NET_CLIENT_TLS_FLAGS_H_
#define PS_NET_CLIENT_TLS_FLAGS_H_

#include "net/tls_credentials.h"

namespace ps {

// The files the flags name (empty: plaintext). Checked when credentials are
// made from them (net/tls_credentials.h).
TlsFiles ClientTlsFilesFromFlags();

}  // namespace ps

#endif  // PS_NET_CLIENT_TLS_FLAGS_H_
