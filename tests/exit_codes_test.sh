#!/usr/bin/env bash
# The exit codes every binary shares (base/exit_codes.h): 64 for a bad flag
# or layout, 69 for a shard that stays unreachable past --retry_for_s, 70
# for a run that failed otherwise (a port in use too), 0 for --version.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
expect() {  # expect CODE WHAT COMMAND...
  local want=$1 what=$2
  shift 2
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: $what: exit $got, expected $want: $(tail -2 "$work/out")" >&2
    failures=$((failures + 1))
  fi
}
for binary in server/ps_server server/ps_serve ops/ps_admin worker/ps_worker \
  worker/predict/ps_predict worker/datagen/clicklog_gen; do
  name=$(basename "$binary")
  expect 64 "$name --no_such_flag" "$runfiles/$binary" --no_such_flag
  expect 0 "$name --version" "$runfiles/$binary" --version
done
# --help lists a binary's flags wherever they are defined (beside its main:
# worker/trainer_flags.cc, worker/input/layout_flags.cc,
# net/client_tls_flags.cc, net/etcd_job_flags.cc).
help_lists() {  # help_lists BINARY FLAG...
  local binary=$1
  shift
  "$runfiles/$binary" --help >"$work/help" 2>&1
  for flag in "$@"; do
    grep -q -- "^    --$flag " "$work/help" || {
      echo "FAIL: $(basename "$binary") --help does not list --$flag" >&2
      failures=$((failures + 1))
    }
  done
}
help_lists worker/ps_worker servers staleness device columns tls_ca drain_seconds etcd job
help_lists ops/ps_admin servers tls_ca tls_server_name etcd job
help_lists worker/predict/ps_predict model columns
help_lists worker/datagen/clicklog_gen out columns
expect 64 "ps_server without --data_dir" "$runfiles/server/ps_server" --listen=127.0.0.1:0
# Sizes past what they are given to (gRPC's int, size_t) are refused, not
# wrapped.
expect 64 "ps_server with a message size past gRPC's" timeout 20 "$runfiles/server/ps_server" \
  --listen=127.0.0.1:0 --data_dir="$work/shard" --max_message_mb=4096
expect 64 "ps_server with a push-log bound that wraps" timeout 20 "$runfiles/server/ps_server" \
  --listen=127.0.0.1:0 --data_dir="$work/shard" --wal_max_log_mb=18446744073709551615
expect 64 "ps_server with 100000 stripes" timeout 20 "$runfiles/server/ps_server" \
  --listen=127.0.0.1:0 --data_dir="$work/shard" --hot_tier_stripes=100000
expect 64 "ps_worker with a bad layout" "$runfiles/worker/ps_worker" --train=x \
  --columns=label,color
if [ -w /dev/full ]; then
  # A write that fails only when the file is closed still fails the run.
  expect 70 "clicklog_gen to a full disk" "$runfiles/worker/datagen/clicklog_gen" \
    --out=/dev/full --lines=10
fi
expect 64 "clicklog_gen with a bad layout" "$runfiles/worker/datagen/clicklog_gen" --out="$work/x" \
  --columns=label,skip
# --write_back_ms' older names still work, and say so; disagreeing is bad.
expect 64 "ps_server with two write-back intervals" "$runfiles/server/ps_server" \
  --listen=127.0.0.1:0 --data_dir="$work/shard" --wal_write_back_ms=500 \
  --write_back_ms=700
grep -q "wal_write_back_ms is deprecated: use --write_back_ms" "$work/out" || {
  echo "FAIL: no deprecation line for --wal_write_back_ms" >&2
  failures=$((failures + 1))
}
# A port nothing listens on (bound, then released).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '0\t1\ta\n' >"$work/train.tsv"
expect 69 "ps_worker against no shard" "$runfiles/worker/ps_worker" --servers=127.0.0.1:$port \
  --train="$work/train.tsv" --columns=label,dense,cat --device=cpu --retry_for_s=1
expect 69 "ps_admin against no shard" "$runfiles/ops/ps_admin" --servers=127.0.0.1:$port \
  --timeout_s=1 tables
# A port another process listens on: 70 (not 69, which says a shard did
# not answer), for the data port and the metrics port alike; an address
# that is not one is a bad flag.
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$work/held" &
holder=$!
for _ in $(seq 100); do [ -s "$work/held" ] && break; sleep 0.1; done
held=$(cat "$work/held")
mkdir -p "$work/models"
expect 64 "ps_serve without --model_dir" "$runfiles/server/ps_serve"
expect 64 "ps_serve with a --model_dir that is not one" "$runfiles/server/ps_serve" \
  --model_dir="$work/none"
expect 70 "ps_serve on a port in use" timeout 20 "$runfiles/server/ps_serve" \
  --model_dir="$work/models" --listen=127.0.0.1:$held
expect 70 "ps_serve with its metrics on a port in use" timeout 20 \
  "$runfiles/server/ps_serve" --model_dir="$work/models" --listen=127.0.0.1:0 \
  --metrics_listen=127.0.0.1:$held
expect 64 "ps_serve with a metrics address that is not one" timeout 20 \
  "$runfiles/server/ps_serve" --model_dir="$work/models" --listen=127.0.0.1:0 \
  --metrics_listen=nowhere
expect 70 "ps_server on a port in use" timeout 20 "$runfiles/server/ps_server" \
  --listen=127.0.0.1:$held --data_dir="$work/held_shard"
expect 70 "ps_server with its metrics on a port in use" timeout 20 \
  "$runfiles/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/metrics_shard" \
  --metrics_listen=127.0.0.1:$held
kill "$holder"
expect 70 "ps_predict with no export" "$runfiles/worker/predict/ps_predict" --model="$work/none" \
  --input="$work/train.tsv"
[ "$failures" = 0 ] || exit 1
echo "exit codes as documented"
