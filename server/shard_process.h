// File: server/shard_process.h
//
// The life of one ps_server process, from its parsed options to its exit
// code: under --etcd, its client of the job's etcd and the checks that
// etcd went on; its role (cluster/shard_role.h), the shard itself
// (ShardServer), its registration or, as a replica, its watch of the
// primary (cluster/primary_watch.h); then serving until a shutdown signal,
// an admin stop or the cluster asks it to stop, and the hand-over that
// loses no acknowledged push. ps_server's main parses flags and calls it.

#ifndef PS_SERVER_SHARD_PROCESS_H_
#define PS_SERVER_SHARD_PROCESS_H_

#include <signal.h>

#include "server/server_flags.h"

namespace ps::server {

// Runs the shard until one of `shutdown_signals` (blocked in every thread
// by the caller: SIGTERM, SIGINT) arrives, or the cluster asks it to stop.
// The process's exit code (base/exit_codes.h): 0 once it stopped cleanly,
// 64 for options that do not go together, 69 or 70 for a shard that could
// not start or stop cleanly. `process.server.stop` is set here (an admin
// stop takes the path SIGTERM takes).
int RunShardProcess(ServerProcessOptions process,
                    const sigset_t& shutdown_signals);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PROCESS_H_
