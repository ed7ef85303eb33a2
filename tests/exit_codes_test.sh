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
  worker/predict/ps_predict worker/predict/ps_export_dump worker/datagen/clicklog_gen; do
  name=$(basename "$binary")
  expect 64 "$name --no_such_flag" "$runfiles/$binary" --no_such_flag
  expect 0 "$name --version" "$runfiles/$binary" --version
done
# --help lists a binary's flags wherever they are defined (beside its main:
# worker/trainer_flags.cc, worker/input/layout_flags.cc,
# net/client_tls_flags.cc, cluster/etcd_job_flags.cc).
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
expect 70 "ps_predict with no export" "$runfiles/worker/predict/ps_predict" --export="$work/none" \
  --input="$work/train.tsv"
expect 64 "ps_predict with --cpu_threads=0" "$runfiles/worker/predict/ps_predict" \
  --export="$work/none" --input="$work/train.tsv" --cpu_threads=0
expect 64 "ps_export_dump without --out" "$runfiles/worker/predict/ps_export_dump" \
  --export="$work/none"
expect 70 "ps_export_dump with no export" "$runfiles/worker/predict/ps_export_dump" \
  --export="$work/none" --out="$work/dump"
# A renamed flag's old name still works, says what replaces it, and may not
# be given beside it.
renamed() {  # renamed WHAT NEW_NAME OLD_NAME CODE COMMAND...
  local what=$1 new=$2 old=$3 code=$4
  shift 4
  expect "$code" "$what by its old name --$old" "$@"
  grep -q -- "--$old is deprecated: use --$new" "$work/out" ||
    { echo "FAIL: --$old says nothing of --$new: $(tail -2 "$work/out")" >&2; failures=$((failures + 1)); }
}
renamed "ps_predict with no export" export model 70 \
  "$runfiles/worker/predict/ps_predict" --model="$work/none" --input="$work/train.tsv"
expect 64 "ps_predict given --export and --model" "$runfiles/worker/predict/ps_predict" \
  --export="$work/none" --model="$work/none" --input="$work/train.tsv"
renamed "ps_admin set-lr with no learning rate" learning_rate lr 64 \
  "$runfiles/ops/ps_admin" --lr=-1 --table=t set-lr
renamed "ps_admin export with a bad format" export_format format 64 \
  "$runfiles/ops/ps_admin" --format=fp8 --dir="$work/x" export
renamed "ps_admin checkpoint without --dir" rpc_timeout_s timeout_s 64 \
  "$runfiles/ops/ps_admin" --timeout_s=5 checkpoint
renamed "ps_serve with a negative cache" rocksdb_block_cache_mb cache_mb 64 \
  "$runfiles/server/ps_serve" --model_dir="$work" --listen=127.0.0.1:0 --cache_mb=-1
renamed "ps_serve with a negative block cache" rocksdb_block_cache_mb block_cache_mb 64 \
  "$runfiles/server/ps_serve" --model_dir="$work" --listen=127.0.0.1:0 --block_cache_mb=-1
expect 64 "ps_serve given two names of its block cache" "$runfiles/server/ps_serve" \
  --model_dir="$work" --listen=127.0.0.1:0 --block_cache_mb=8 --rocksdb_block_cache_mb=8
renamed "ps_serve with no room for a message" max_message_mb max_message_bytes 64 \
  "$runfiles/server/ps_serve" --model_dir="$work" --listen=127.0.0.1:0 --max_message_bytes=-1
[ "$failures" = 0 ] || exit 1
echo "exit codes as documented"
