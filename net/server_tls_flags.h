// File: net/server_tls_flags.h
//
// The TLS flags of the binaries that serve (ps_server, ps_serve):
// --tls_cert, --tls_key, --tls_ca, --tls_reload_s,
// --allow_unauthenticated_clients and --allow_insecure_remote, defined once in
// server_tls_flags.cc so that both binaries say the same. Linking this library
// defines the flags.

#ifndef PS_NET_SERVER_TLS_FLAGS_H_
#define PS_NET_SERVER_TLS_FLAGS_H_

#include "net/tls_credentials.h"

namespace ps {

struct ServerTlsFlags {
  // The files the flags name (empty: plaintext). Checked when credentials
  // are made from them (net/tls_credentials.h).
  TlsFiles files;
  // Listen beyond loopback with TLS but no --tls_ca, or without TLS.
  bool allow_unauthenticated_clients = false;
  bool allow_insecure_remote = false;
};

ServerTlsFlags ServerTlsFromFlags();

}  // namespace ps

#endif  // PS_NET_SERVER_TLS_FLAGS_H_
