#!/usr/bin/env bash
# Runs a local cluster (real ps_server shards and ps_worker processes on
# loopback) through faults and prints a table: the fault, what the workers
# saw, acknowledged updates lost and doubled (both must be 0), and how it
# ended.
#
#   deploy/chaos.sh                          the fault matrix, one fault at
#                                            a time (tests/fault_matrix_test,
#                                            replication_test,
#                                            replication_recovery_test,
#                                            failover_test,
#                                            failover_roles_test)
#   deploy/chaos.sh --gtest_filter='*Disk*'  some of them
#   deploy/chaos.sh --random --seed=S --minutes=M
#                                            faults drawn at random from seed
#                                            S for M minutes against etcd and
#                                            three shards with replicas
#                                            (tests/random_faults_test.cc)
#   deploy/chaos.sh --random --faults=kill-mover,slow-link ...
#                                            only these kinds (the names the
#                                            schedule's table gives)
set -uo pipefail
cd "$(dirname "$0")/.."

random=0
seed=1
minutes=10
faults=
matrix_args=()
for arg in "$@"; do
  case "$arg" in
    --random) random=1 ;;
    --seed=*) seed=${arg#--seed=} ;;
    --minutes=*) minutes=${arg#--minutes=} ;;
    --faults=*) faults=${arg#--faults=} ;;
    *) matrix_args+=("$arg") ;;
  esac
done

bash deploy/setup.sh >/dev/null || exit 1
log=${CHAOS_LOG:-/tmp/ps_chaos.log}

if [ "$random" -eq 1 ]; then
  case "$seed$minutes" in
    *[!0-9]*) echo "chaos: --seed and --minutes take whole numbers" >&2
              exit 64 ;;
  esac
  echo "chaos: seed $seed for $minutes min (log: $log)" >&2
  PS_CHAOS_SEED="$seed" PS_CHAOS_SECONDS=$((minutes * 60)) \
    PS_CHAOS_FAULTS="$faults" \
    bazel run //tests:random_faults_test -- --gtest_color=no >"$log" 2>&1
  status=$?
  grep -E "^t=|^\||^seed|^\[  (FAILED|     OK|  PASSED)" "$log"
  if [ "$status" -ne 0 ]; then
    echo "chaos: seed $seed lost or doubled an update, or training; see $log" >&2
  fi
  exit "$status"
fi

table=$(mktemp)
echo "chaos: building and running the fault matrix (log: $log)" >&2
FAULT_MATRIX_TABLE="$table" bazel run //tests:fault_matrix_test -- \
  "${matrix_args[@]+"${matrix_args[@]}"}" >"$log" 2>&1
status=$?
if [ "${#matrix_args[@]}" -eq 0 ]; then
  for test in replication_test replication_recovery_test failover_test \
    failover_roles_test; do
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
