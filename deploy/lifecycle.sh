#!/usr/bin/env bash
# A model's whole lifecycle on a local cluster, each step with the command an
# operator would type: train on 2 shards with 2 workers and take a checkpoint
# while they train; kill every process; restore the checkpoint into 3 shards
# and resume both workers from it; export the model (fp32 and fp16) and score
# the test file with ps_predict, without a shard. Prints each step's time and
# the AUCs side by side.
#
#   deploy/lifecycle.sh [--train_lines 1000000] [--model wide_deep]
#                       [--dir /tmp/ps-lifecycle]
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/cluster_lib.sh

train_lines=1000000
test_lines=100000
model=wide_deep
dir=/tmp/ps-lifecycle
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "lifecycle: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

started=()
cleanup() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${started[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

bash deploy/setup.sh >/dev/null
bazel build //server:ps_server //ops:ps_admin //worker:ps_worker \
  //worker/datagen:clicklog_gen //worker/predict:ps_predict 2>&1 | tail -1
bin=bazel-bin
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | awk '{print $2}'; }

rm -rf "$dir"
mkdir -p "$dir"
"$bin/worker/datagen/clicklog_gen" --out="$dir/train.tsv.gz" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$dir/test.tsv" --lines="$test_lines" --sample_seed=2 2>/dev/null

# start_shards N NAME [FLAGS...]: starts N shards in $dir/NAME-<i>; sets $servers.
start_shards() {
  local n=$1 name=$2
  shift 2
  local addresses=()
  for ((s = 0; s < n; s++)); do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards="$n" \
      --data_dir="$dir/$name-$s" "$@" >"$dir/$name-$s.out" 2>"$dir/$name-$s.log" &
    started+=($!)
  done
  for ((s = 0; s < n; s++)); do
    addresses+=("$(ps_address "$dir/$name-$s.out")")
  done
  servers=$(IFS=,; echo "${addresses[*]}")
}

# train NAME [FLAGS...]: two workers against $servers; waits for both.
train() {
  local name=$1
  shift
  local pids=()
  for w in 0 1; do
    "$bin/worker/ps_worker" --servers="$servers" --worker_index=$w --num_workers=2 \
      --train="$dir/train.tsv.gz" --test="$dir/test.tsv" --model="$model" --staleness=2 \
      --metrics_out="$dir/$name-worker$w.json" "$@" 2>"$dir/$name-worker$w.log" &
    pids+=($!)
    started+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "a worker failed; logs in $dir" >&2; exit 1; }; done
}

echo "== 1. train on 2 shards; checkpoint while the workers train"
start_shards 2 first
train first &
trainer=$!
sleep 4
start=$(now)
echo "\$ ps_admin --servers=$servers checkpoint --dir=$dir/ckpt"
"$bin/ops/ps_admin" --servers="$servers" checkpoint --dir="$dir/ckpt" | sed 's/^/   /'
echo "   (took $(since "$start") s)"
wait $trainer
echo "   trained straight through: test AUC $(metric "$dir/first-worker0.json" test_auc)"
echo "\$ ps_admin checkpoints --dir=$dir"
"$bin/ops/ps_admin" checkpoints --dir="$dir" | sed 's/^/   /'
cleanup
started=()

echo "== 2. every process stopped; restore into 3 shards and resume"
start=$(now)
start_shards 3 restored --restore_from="$dir/ckpt"
echo "\$ ps_server --restore_from=$dir/ckpt --num_shards=3 --shard_index=0..2 ..."
echo "   3 shards serving in $(since "$start") s"
echo "\$ ps_worker --resume_from=$dir/ckpt ..."
train resumed --resume_from="$dir/ckpt"
echo "   resumed: test AUC $(metric "$dir/resumed-worker0.json" test_auc)"

echo "== 3. export and predict (no shard needed)"
for format in fp32 fp16; do
  start=$(now)
  echo "\$ ps_admin --servers=... export --dir=$dir/export-$format --export_format=$format"
  "$bin/ops/ps_admin" --servers="$servers" export --dir="$dir/export-$format" \
    --export_format=$format | sed 's/^/   /'
  echo "   (took $(since "$start") s; $(du -sh "$dir/export-$format" | cut -f1) on disk)"
done
cleanup
started=()
for format in fp32 fp16; do
  echo "\$ ps_predict --export=$dir/export-$format --input=$dir/test.tsv --out=$dir/scores-$format.txt"
  "$bin/worker/predict/ps_predict" --export="$dir/export-$format" --input="$dir/test.tsv" \
    --out="$dir/scores-$format.txt" | sed 's/^/   /'
done
