#!/usr/bin/env bash
# One command from a fresh clone to a trained CTR model: installs what is
# missing, builds, generates click logs with a known ground truth, starts a
# local cluster (N shards + M workers on loopback), trains, prints test AUC and
# logloss beside the best any model can reach on the data, and stops every
# process it started.
#
#   deploy/quickstart.sh [--shards 2] [--workers 2] [--train_lines 1000000]
#                        [--test_lines 100000] [--model wide_deep]
#                        [--staleness 2] [--dir /tmp/ps-quickstart]
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/cluster_lib.sh

shards=2
workers=2
train_lines=1000000
test_lines=100000
model=wide_deep
staleness=2
dir=/tmp/ps-quickstart
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --staleness) staleness=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

started=()
cleanup() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${started[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "== setup"
bash deploy/setup.sh
echo "== build (the first build compiles everything: several minutes)"
bazel build --show_progress_rate_limit=5 //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen
bin=bazel-bin

rm -rf "$dir"
mkdir -p "$dir"
echo "== data: $train_lines training and $test_lines test lines in $dir"
"$bin/worker/datagen/clicklog_gen" --out="$dir/train.tsv.gz" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$dir/test.tsv" --lines="$test_lines" --sample_seed=2 \
  --summary_out="$dir/truth.json" 2>/dev/null

echo "== $shards shards"
servers=()
for ((s = 0; s < shards; s++)); do
  "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards="$shards" \
    --data_dir="$dir/shard$s" >"$dir/shard$s.out" 2>"$dir/shard$s.log" &
  started+=($!)
done
for ((s = 0; s < shards; s++)); do
  address=$(ps_address "$dir/shard$s.out") || { echo "shard $s did not start; see $dir/shard$s.log" >&2; exit 1; }
  echo "   shard $s on $address"
  servers+=("$address")
done
server_list=$(IFS=,; echo "${servers[*]}")

echo "== $workers workers training $model (staleness $staleness)"
worker_pids=()
for ((w = 0; w < workers; w++)); do
  "$bin/worker/ps_worker" --servers="$server_list" --worker_index=$w --num_workers="$workers" \
    --train="$dir/train.tsv.gz" --test="$dir/test.tsv" --model="$model" \
    --eval_every=$((train_lines / workers / 4)) --eval_lines=20000 \
    --staleness="$staleness" --metrics_out="$dir/worker$w.json" \
    --interval_metrics_out="$dir/worker$w.intervals.jsonl" 2>"$dir/worker$w.log" &
  worker_pids+=($!)
  started+=($!)
done
# Show worker 0's progress while the workers run.
tail -n 0 -f "$dir/worker0.log" --pid="${worker_pids[0]}" 2>/dev/null | grep --line-buffered "examples |" &
for pid in "${worker_pids[@]}"; do
  wait "$pid" || { echo "a worker failed; logs in $dir" >&2; exit 1; }
done

metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | awk '{print $2}'; }
echo
echo "== result (test set: $test_lines lines)"
printf "   %-28s %10s %10s\n" "" "AUC" "logloss"
printf "   %-28s %10.4f %10.4f\n" "$model, $workers workers" \
  "$(metric "$dir/worker0.json" test_auc)" "$(metric "$dir/worker0.json" test_logloss)"
printf "   %-28s %10.4f %10.4f\n" "ground truth (best possible)" \
  "$(metric "$dir/truth.json" truth_auc)" "$(metric "$dir/truth.json" truth_logloss)"
total=0
for ((w = 0; w < workers; w++)); do
  rate=$(metric "$dir/worker$w.json" examples_per_sec)
  total=$(awk -v a="$total" -v b="$rate" 'BEGIN {print a + b}')
done
echo "   training: $(awk -v t="$total" 'BEGIN {printf "%.0f", t}') examples/s over all workers;" \
  "max staleness seen $(metric "$dir/worker0.json" max_staleness_seen)"
echo "   metrics: $dir/worker*.json, per interval: $dir/worker*.intervals.jsonl"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 deploy/plot_metrics.py "$dir/training.png" --truth="$dir/truth.json" "$dir"/worker*.intervals.jsonl \
    | sed 's/^/   plot: /'
fi
