#!/usr/bin/env bash
# Load: 32 concurrent clients (16 pulling, 12 pushing through the workers'
# client with exactly-once pushes, 4 asking every shard for its stats) for
# 60 s against 2 shards under --durability=wal, keys drawn from a space
# larger than the hot tier. Must end with no errors; prints calls, calls/s,
# p50 and p99 per operation, and each shard's peak RSS against its budget
# (--cache_mb + RocksDB's block cache and memtables + --max_inflight_mb).
# Rewrites the "load" section of BENCHMARKS.md.
#
#   tests/bench/load_bench.sh [--seconds 60]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
cache_mb=128
inflight_mb=64
# RocksDB: 16 MiB block cache + 64 MiB of memtables (the shard's defaults).
budget_mb=$((cache_mb + 16 + 64 + inflight_mb))
bash deploy/setup.sh >/dev/null
bazel build //server:ps_server //tests/bench:load_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/load_bench.XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

addresses=()
for s in 0 1; do
  bazel-bin/server/ps_server --listen=127.0.0.1:0 --data_dir="$work/shard$s" \
    --shard_index=$s --num_shards=2 --cache_mb=$cache_mb \
    --max_inflight_mb=$inflight_mb >"$work/shard$s.out" 2>"$work/shard$s.log" &
  pids+=($!)
  addresses+=("$(ps_address "$work/shard$s.out")")
done
table="$work/table.md"
{
  echo "## Load: 32 concurrent clients, 2 shards"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores; ${seconds} s; 1024 keys of dim 16 per call from 1M keys"
  echo "(Adagrad rows: about 1.5x the hot tier); --durability=wal, --cache_mb=$cache_mb,"
  echo "--max_inflight_mb=$inflight_mb; shards and clients share the machine."
  echo
} >"$table"
status=0
bazel-bin/tests/bench/load_bench --servers="$(IFS=,; echo "${addresses[*]}")" \
  --pids="$(IFS=,; echo "${pids[*]}")" --seconds="$seconds" \
  --budget_mb=$budget_mb >>"$table" || status=$?
cat "$table"
if [ "$status" -ne 0 ]; then
  echo "load_bench: errors under load (see above)" >&2
  exit "$status"
fi
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md load "$table"
echo "wrote the load section of BENCHMARKS.md"
