#!/usr/bin/env bash
# Scaling: training throughput with 1, 2 and 4 shards and workers on
# loopback; then a projection to hundreds of servers and workers from the
# measured per-shard service rate, worker compute rate and bytes per step, and
# the key-frequency curve of a click-log sample with what follows from it
# (tests/bench/capacity.py). Rewrites the "scaling" section of BENCHMARKS.md.
#
#   tests/bench/scaling_bench.sh [--train_lines 300000] [--bandwidth_gbit 25]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=300000
bandwidth=25
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --bandwidth_gbit) bandwidth=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen //tests/bench:serving_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/scaling_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }
"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 2>/dev/null

table="$work/table.md"
{
  echo "## Scaling and capacity"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, everything on one machine: $train_lines lines,"
  echo "wide_deep, --staleness=2, --durability=periodic. On 2 cores more processes share the"
  echo "same CPUs, so this shows overheads, not scaling; the projection below is the answer to"
  echo "\"how many machines\"."
  echo
  echo "| shards + workers | examples/s (all workers) | test-free run seconds |"
  echo "| --- | --- | --- |"
} >"$table"
for n in 1 2 4; do
  run="$work/run$n"
  mkdir -p "$run"
  servers=()
  for ((s = 0; s < n; s++)); do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards=$n \
      --data_dir="$run/shard$s" --durability=periodic >"$run/shard$s.out" 2>/dev/null &
    pids+=($!)
  done
  for ((s = 0; s < n; s++)); do
    servers+=("$(ps_address "$run/shard$s.out")")
  done
  list=$(IFS=,; echo "${servers[*]}")
  worker_pids=()
  start=$(date +%s.%N)
  for ((w = 0; w < n; w++)); do
    "$bin/worker/ps_worker" --servers="$list" --worker_index=$w --num_workers=$n \
      --train="$work/train.tsv" --staleness=2 --metrics_out="$run/worker$w.json" 2>/dev/null &
    worker_pids+=($!)
  done
  for p in "${worker_pids[@]}"; do wait "$p"; done
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {print e - s}')
  printf "| %d + %d | %.0f | %.1f |\n" "$n" "$n" \
    "$(awk -v l="$train_lines" -v s="$seconds" 'BEGIN {print l / s}')" "$seconds" | tee -a "$table"
  # Stopped and their data deleted before the next configuration, which
  # would otherwise share the CPUs with their shutdown and the kernel's
  # write-back of their files.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$run"/shard*/
done

# Per-shard service rates (1 client, hot tier, dim 16) and the worker's
# compute rate from the 1 + 1 run.
"$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/rate" --durability=periodic \
  >"$work/rate.out" 2>/dev/null &
pids+=($!)
"$bin/tests/bench/serving_bench" --ps="$(ps_address "$work/rate.out")" \
  --dim=16 --rows=200000 --seconds=1 >"$work/rates.md"
pull=$(awk -F'|' '$6 ~ /pull/ && $5+0 == 1 {print $7 * 1e6}' "$work/rates.md")
push=$(awk -F'|' '$6 ~ /push/ && $5+0 == 1 {print $7 * 1e6}' "$work/rates.md")
compute=$(awk -v e="$(metric "$work/run1/worker0.json" examples)" \
  -v c="$(metric "$work/run1/worker0.json" compute_seconds)" 'BEGIN {print e / c}')
cat >"$work/measured.json" <<JSON
{"pull_rows_per_sec": $pull, "push_rows_per_sec": $push,
 "worker_compute_examples_per_sec": $compute, "dense_params": 143119, "embedding_dim": 16}
JSON
echo >>"$table"
/usr/bin/python3 tests/bench/capacity.py --sample "$work/train.tsv" --lines "$train_lines" \
  --measured "$work/measured.json" --bandwidth_gbit "$bandwidth" | tee -a "$table"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md scaling "$table"
echo "wrote the scaling section of BENCHMARKS.md"
