// File: server/server_flags.h
//
// ps_server's command line, parsed once by ServerProcessOptionsFromFlags()
// into what its main runs on: the shard's ServerOptions, how the process
// takes part in its job under --etcd, and how long a stop may take. Every
// flag of ps_server is defined and read in server_flags.cc alone; a bad one
// is INVALID_ARGUMENT whose message names it (ps_server exits 64).

#ifndef PS_SERVER_SERVER_FLAGS_H_
#define PS_SERVER_SERVER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/etcd_client.h"
#include "server/shard_server.h"

namespace ps::server {

// Under --etcd: where the job is, and the process's part in it.
struct EtcdMembershipOptions {
  // How to reach the job's etcd: --etcd's endpoints, with the TLS and user
  // of the --etcd_tls_* and --etcd_user flags. No endpoints: not under etcd,
  // and the rest unused.
  net::EtcdOptions connection;
  // The job (--job).
  std::string job;
  // The lease of the shard's registration and coordinator role
  // (--etcd_lease_s). Default: 10 s.
  absl::Duration lease = absl::Seconds(10);
  // The address workers dial (--advertise_address); empty: the listen
  // address with the port bound.
  std::string advertise_address;
  // Replicas per shard (--replicas): the processes of a shard find their
  // roles in etcd. Default: 0 (roles given by --replica_of).
  int replicas = 0;
  // How long to wait for a job's shards, a primary or a role
  // (--join_wait_s). Default: 300 s.
  absl::Duration join_wait = absl::Seconds(300);
  // Start even when etcd went backwards since the data dir saw it.
  bool accept_etcd_rollback = false;
  // A replica takes its shard over even when the in-sync set does not name
  // it.
  bool allow_unclean_promotion = false;
  // Replicate shard N of the job (--replica_of_shard), its address looked
  // up and followed through failovers; -1: none (or --replicas chooses).
  int replica_of_shard = -1;

  bool enabled() const { return !connection.endpoints.empty(); }
};

struct ServerProcessOptions {
  ServerOptions server;
  EtcdMembershipOptions etcd;
  // How long a stop (SIGTERM, SIGINT, ps_admin stop) lets replicas catch up
  // and calls finish (--drain_seconds). Default: 10 s.
  absl::Duration drain = absl::Seconds(10);
};

// The options ps_server's flags give, checked; INVALID_ARGUMENT naming the
// first bad flag. `server.stop` is left unset for main to fill in.
absl::StatusOr<ServerProcessOptions> ServerProcessOptionsFromFlags();

}  // namespace ps::server

#endif  // PS_SERVER_SERVER_FLAGS_H_
