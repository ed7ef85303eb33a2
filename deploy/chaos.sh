#!/usr/bin/env bash
# Runs a local cluster (real ps_server shards and ps_worker processes on
# loopback) through the fault matrix, one fault at a time, and prints a
# table: the fault, what the workers saw, acknowledged updates lost and
# doubled (both must be 0), and how it ended. The faults and their checks
# are tests/fault_matrix_test.cc, then the replicas' (tests/
# replication_test.cc) and failover under etcd (tests/failover_test.cc);
# this script runs them outside the test runner and prints their table.
#
#   deploy/chaos.sh                          every fault
#   deploy/chaos.sh --gtest_filter='*Disk*'  some of them
set -uo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup.sh >/dev/null || exit 1
table=$(mktemp)
log=${CHAOS_LOG:-/tmp/ps_chaos.log}
echo "chaos: building and running the fault matrix (log: $log)" >&2
FAULT_MATRIX_TABLE="$table" bazel run //tests:fault_matrix_test -- "$@" \
  >"$log" 2>&1
status=$?
if [ "$#" -eq 0 ]; then
  for test in replication_test failover_test; do
    CHAOS_ROWS="$table" bazel run "//tests:$test" >>"$log" 2>&1 || status=$?
  done
fi
echo
cat "$table"
if [ "$status" -ne 0 ]; then
  echo
  echo "chaos: a fault broke a guarantee or training; see $log" >&2
  grep -E "Failure|FAILED" "$log" | head -20 >&2
fi
rm -f "$table"
exit "$status"
