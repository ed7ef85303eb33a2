#!/usr/bin/env bash
# Wire formats: what fp16 and bf16 rows and gradients (ps_worker
# --wire_format) buy and cost against fp32, side by side in one run.
# Serving: serving_bench against one ps_server holding the table in its hot
# tier, dims 16 and 64, 1 and 4 clients, pull and push. Training: 1 shard +
# 1 worker and 2 shards + 2 workers train wide_deep for one pass over
# generated click logs, each format on fresh shards; the bytes every
# loopback packet carried during the run (from /proc/net/dev), examples/s
# and test AUC. Prints the tables and rewrites the "wire" section of
# BENCHMARKS.md.
#
#   tests/bench/wire_bench.sh [--rows 500000] [--seconds 3]
#                             [--train_lines 400000] [--test_lines 100000]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rows=500000
seconds=3
train_lines=400000
test_lines=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen \
  //tests/bench:serving_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/wire_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
formats="fp32 fp16 bf16"
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }
loopback_bytes() { awk '/^ *lo:/ {print $2}' /proc/net/dev; }

table="$work/table.md"
{
  echo "## Wire formats: fp32, fp16 and bf16 rows and gradients"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, one run. The shards store float32 whatever travels;"
  echo "fp16 pushes are scaled per request by a power of two (PushRequest.gradient_scale)."
  echo "Serving: serving_bench, $rows rows in the hot tier, batches of 4096 power-law keys,"
  echo "${seconds} s per cell, --durability=wal; MB/s counts the values' bytes as they travel."
  echo
  echo "| format | dim | clients | op | M rows/s | MB/s | p50 ms | p99 ms | hot-tier hits |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$table"
cat "$table"
serving="$work/serving.md"
: >"$serving"
for dim in 16 64; do
  for format in $formats; do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/serve_${format}_$dim" \
      --cache_mb=1024 >"$work/serve.out" 2>"$work/serve.log" &
    ps_pid=$!; pids+=($ps_pid)
    address=$(ps_address "$work/serve.out")
    "$bin/tests/bench/serving_bench" --ps="$address" --system="$format" --label=- \
      --dim=$dim --rows="$rows" --seconds="$seconds" --clients=1,4 --wire_format=$format \
      | sed 's/| - | /| /' | tee -a "$serving"
    kill "$ps_pid"; wait "$ps_pid" 2>/dev/null || true
  done
done
cat "$serving" >>"$table"
python3 - "$serving" <<'PY' | tee -a "$table"
import sys
cells = {}
for line in open(sys.argv[1]):
    f = [c.strip() for c in line.split("|")[1:-1]]
    cells[(f[0], f[1], f[2], f[3])] = float(f[4])
print("\n| dim | clients | op | fp16 / fp32 rows/s | bf16 / fp32 rows/s |")
print("| --- | --- | --- | --- | --- |")
for dim in ("16", "64"):
    for clients in ("1", "4"):
        for op in ("pull", "push"):
            base = cells[("fp32", dim, clients, op)]
            print(f"| {dim} | {clients} | {op} | {cells[('fp16', dim, clients, op)] / base:.2f}x"
                  f" | {cells[('bf16', dim, clients, op)] / base:.2f}x |")
PY

"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines="$test_lines" --sample_seed=2 2>/dev/null

# train SHARDS WORKERS FORMAT -> "auc logloss examples/s loopback_bytes"
train() {
  local shards=$1 workers=$2 format=$3
  local dir="$work/train_${shards}_${workers}_$format" servers=() server_pids=() worker_pids=()
  mkdir -p "$dir"
  for ((s = 0; s < shards; s++)); do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards="$shards" \
      --data_dir="$dir/shard$s" --durability=periodic >"$dir/shard$s.out" 2>/dev/null &
    server_pids+=($!); pids+=($!)
  done
  for ((s = 0; s < shards; s++)); do servers+=("$(ps_address "$dir/shard$s.out")"); done
  local list; list=$(IFS=,; echo "${servers[*]}")
  local before; before=$(loopback_bytes)
  for ((w = 0; w < workers; w++)); do
    "$bin/worker/ps_worker" --servers="$list" --worker_index=$w --num_workers="$workers" \
      --train="$work/train.tsv" --test="$work/test.tsv" --batch_size=1024 \
      --wire_format="$format" --metrics_out="$dir/worker$w.json" 2>"$dir/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  for p in "${worker_pids[@]}"; do wait "$p"; done
  local after; after=$(loopback_bytes)
  for p in "${server_pids[@]}"; do kill "$p"; wait "$p" || true; done
  rm -rf "$dir"/shard*/
  local rate=0
  for ((w = 0; w < workers; w++)); do
    rate=$(awk -v a="$rate" -v b="$(metric "$dir/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
  done
  echo "$(metric "$dir/worker0.json" test_auc) $(metric "$dir/worker0.json" test_logloss) $rate $((after - before))"
}

{
  echo
  echo "Training: wide_deep, $train_lines training and $test_lines test lines from clicklog_gen,"
  echo "batch 1024, one pass; loopback bytes are every byte the loopback interface carried while"
  echo "the workers ran (training and the test pass)."
  echo
  echo "| shards + workers | format | test AUC | logloss | AUC - fp32 | examples/s | vs fp32 | loopback MB | vs fp32 |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} | tee -a "$table"
for cluster in "1 1" "2 2"; do
  set -- $cluster
  base=""
  for format in $formats; do
    read -r auc logloss rate bytes < <(train "$1" "$2" "$format")
    [ -n "$base" ] || base="$auc $rate $bytes"
    python3 - "$1+$2" "$format" "$auc" "$logloss" "$rate" "$bytes" $base <<'PY' | tee -a "$table"
import sys
cluster, fmt, auc, logloss, rate, nbytes, base_auc, base_rate, base_bytes = sys.argv[1:]
auc, rate, nbytes = float(auc), float(rate), float(nbytes)
print(f"| {cluster} | {fmt} | {auc:.4f} | {float(logloss):.4f} | {auc - float(base_auc):+.4f} | "
      f"{rate:.0f} | {rate / float(base_rate):.2f}x | {nbytes / 1e6:.0f} | {nbytes / float(base_bytes):.2f}x |")
PY
  done
done
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md wire "$table"
echo "wrote the wire section of BENCHMARKS.md"
