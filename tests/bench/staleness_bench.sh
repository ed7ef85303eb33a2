#!/usr/bin/env bash
# Staleness: what bounded staleness and asynchrony cost in accuracy, and what
# each damping technique buys back. 2 shards + 2 workers on loopback train
# wide_deep for one pass (batch 4096) under --staleness 0, 1, 2, 8 and async,
# each with: nothing (--read_my_writes=false), staleness-aware learning
# rates, DC-ASGD, read-my-writes, and read-my-writes with each of the others.
# Then Adam's learning rate with two workers. Prints the tables and rewrites
# the "staleness" section of BENCHMARKS.md.
#
#   tests/bench/staleness_bench.sh [--train_lines 400000] [--test_lines 100000]
#                                  [--dc_lambda 0.5]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=400000
test_lines=100000
dc_lambda=0.5
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --dc_lambda) dc_lambda=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen 2>&1 | tail -1
work=$(mktemp -d /tmp/staleness_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }
"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines="$test_lines" --sample_seed=2 \
  --summary_out="$work/truth.json" 2>/dev/null

# run NAME WORKER_FLAGS... -> "auc logloss examples/s max_staleness"
run() {
  local name=$1; shift
  local dir="$work/$name" servers=() server_pids=() worker_pids=()
  mkdir -p "$dir"
  for s in 0 1; do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards=2 \
      --data_dir="$dir/shard$s" --durability=periodic >"$dir/shard$s.out" 2>/dev/null &
    server_pids+=($!); pids+=($!)
  done
  for s in 0 1; do servers+=("$(ps_address "$dir/shard$s.out")"); done
  local list; list=$(IFS=,; echo "${servers[*]}")
  for w in 0 1; do
    "$bin/worker/ps_worker" --servers="$list" --worker_index=$w --num_workers=2 \
      --train="$work/train.tsv" --test="$work/test.tsv" --batch_size=4096 \
      --metrics_out="$dir/worker$w.json" "$@" 2>"$dir/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  for p in "${worker_pids[@]}"; do wait "$p"; done
  for p in "${server_pids[@]}"; do kill "$p"; wait "$p" || true; done
  rm -rf "$dir"/shard*/
  local rate=0 staleness=0
  for w in 0 1; do
    rate=$(awk -v a="$rate" -v b="$(metric "$dir/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
    staleness=$(awk -v a="$staleness" -v b="$(metric "$dir/worker$w.json" max_staleness_seen)" \
      'BEGIN {print (b > a ? b : a)}')
  done
  echo "$(metric "$dir/worker0.json" test_auc) $(metric "$dir/worker0.json" test_logloss) $rate $staleness"
}

table="$work/table.md"
{
  echo "## Staleness: what it costs, and what buys it back"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores; 2 shards + 2 workers on one machine, $train_lines"
  echo "training and $test_lines test lines from clicklog_gen (ground truth AUC"
  echo "$(metric "$work/truth.json" truth_auc)), wide_deep, batch 4096, one pass. Each cell: test AUC /"
  echo "logloss (difference in AUC from --staleness=0), and the examples/s of both workers."
  echo "\"read-my-writes\" is --read_my_writes (the default): a worker's step trains on rows that"
  echo "hold its own earlier pushes, pulled once its push of the step before is in. \"replayed\""
  echo "(--overlay_own_pushes=always; the default replays only for a lone worker) pulls them while"
  echo "the step before computes and replays that step's push onto them (not with DC, which"
  echo "waits); \"none\" turns read-my-writes off. SALR is"
  echo "--staleness_aware_lr, DC is --delay_compensation=$dc_lambda. At --staleness=0 every"
  echo "technique is moot, so it is run once."
  echo
  echo "| staleness | technique | test AUC | vs staleness 0 | test logloss | examples/s | max staleness seen |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
} >"$table"
cat "$table"
read -r base_auc base_logloss base_rate base_seen < <(run s0 --staleness=0)
printf "| 0 | (any) | %.4f | - | %.4f | %.0f | %s |\n" "$base_auc" "$base_logloss" "$base_rate" \
  "$base_seen" | tee -a "$table"
techniques=("none:--read_my_writes=false"
  "SALR:--read_my_writes=false --staleness_aware_lr"
  "DC:--read_my_writes=false --delay_compensation=$dc_lambda"
  "read-my-writes:--read_my_writes"
  "read-my-writes, replayed:--read_my_writes --overlay_own_pushes=always"
  "read-my-writes + SALR:--read_my_writes --staleness_aware_lr"
  "read-my-writes + DC:--read_my_writes --delay_compensation=$dc_lambda")
for staleness in 1 2 8 async; do
  for technique in "${techniques[@]}"; do
    name=${technique%%:*}
    read -r -a flags <<<"${technique#*:}"
    read -r auc logloss rate seen < <(run "s${staleness}_${name//[^a-zA-Z]/}" \
      --staleness="$staleness" "${flags[@]}")
    printf "| %s | %s | %.4f | %+.4f | %.4f | %.0f | %s |\n" "$staleness" "$name" "$auc" \
      "$(awk -v a="$auc" -v b="$base_auc" 'BEGIN {print a - b}')" "$logloss" "$rate" "$seen" |
      tee -a "$table"
  done
done
{
  echo
  echo "Adam with several workers: each push is one bias-corrected Adam step on the shard, so"
  echo "W workers take W steps per global step, each about the learning rate long. The same 2 + 2"
  echo "run at --staleness=0 with the MLP's learning rate halved (one step's worth per global"
  echo "step), as is, and doubled:"
  echo
  echo "| --dense_learning_rate | test AUC | test logloss |"
  echo "| --- | --- | --- |"
} | tee -a "$table"
for rate in 0.0005 0.001 0.002; do
  read -r auc logloss _ _ < <(run "adam_$rate" --staleness=0 --dense_learning_rate="$rate")
  printf "| %s | %.4f | %.4f |\n" "$rate" "$auc" "$logloss" | tee -a "$table"
done
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md staleness "$table"
echo "wrote the staleness section of BENCHMARKS.md"
