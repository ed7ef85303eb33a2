#!/usr/bin/env bash
# ps_predict's lines/s beside the training examples/s of the same model, in
# one run: clicklog_gen writes --train_lines and --test_lines lines; 1 shard
# + 1 worker (--staleness=1, the worker's defaults: wide_deep, with the wide
# weight in the embedding row as training_bench.sh trains it) train on the
# first --rounds times (each on a fresh shard); ps_admin exports the last;
# ps_predict scores the second --rounds times (the tables read into memory
# before its clock starts), and with --baseline another build of ps_predict
# in turns with this one; ps_serve then serves the export and serve_load
# sends it the test lines for --serve_seconds per round from 4 client
# threads (Predict, 256 lines a call). Prints each round's rates, and the
# medians and ranges with each scorer's ratio to the median training rate
# (issue 47's goal: 3x).
#
#   tests/bench/scoring_bench.sh [--train_lines 300000] [--test_lines 1000000]
#                                [--rounds 5] [--baseline OLD_PS_PREDICT]
#                                [--serve_seconds 5]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=300000
test_lines=1000000
rounds=5
baseline=""
serve_seconds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --serve_seconds) serve_seconds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh >/dev/null
bazel build //server:ps_server //server:ps_serve //worker:ps_worker \
  //worker/predict:ps_predict //worker/datagen:clicklog_gen //ops:ps_admin \
  //tests/bench:serve_load 2>&1 | tail -1
bin=bazel-bin
work=$(mktemp -d /tmp/scoring_bench.XXXX)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "generating $train_lines training and $test_lines test lines"
$bin/worker/datagen/clicklog_gen --out="$work/train.tsv" \
  --lines="$train_lines" --sample_seed=1 2>/dev/null
$bin/worker/datagen/clicklog_gen --out="$work/test.tsv" \
  --lines="$test_lines" --sample_seed=2 2>/dev/null
# Training takes as many rounds (each on a fresh shard): its rate moves
# too. The last round's model is exported and scored.
: >"$work/training"
for round in $(seq "$rounds"); do
  rm -rf "$work/shard"
  $bin/server/ps_server --listen=127.0.0.1:0 --data_dir="$work/shard" \
    >"$work/shard.out" 2>"$work/shard.log" &
  server=$!
  address=$(ps_address "$work/shard.out")
  $bin/worker/ps_worker --servers="$address" --worker_index=0 \
    --num_workers=1 --train="$work/train.tsv" --staleness=1 \
    --wide_in_embedding_row --metrics_out="$work/train.json" \
    2>"$work/worker.log"
  rate=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_sec"])' "$work/train.json")
  echo "training round $round (1 shard + 1 worker): $rate examples/s"
  echo "$rate" >>"$work/training"
  if [ "$round" = "$rounds" ]; then
    $bin/ops/ps_admin --servers="$address" export --dir="$work/models/export-1" \
      >"$work/export.log" 2>&1
  fi
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
done

builds=("this:$bin/worker/predict/ps_predict")
[ -n "$baseline" ] && builds+=("baseline:$baseline")
: >"$work/rates"
for round in $(seq "$rounds"); do
  for build in "${builds[@]}"; do
    name=${build%%:*}
    binary=${build#*:}
    rate=$("$binary" --export="$work/models/export-1" --input="$work/test.tsv" \
      --out="$work/scores-$name.txt" 2>/dev/null |
      sed -n 's/.*(\([0-9.]*\) lines\/s).*/\1/p')
    echo "round $round $name: $rate lines/s"
    echo "$name $rate" >>"$work/rates"
  done
done
# ps_serve, one process for every round, as a server runs.
$bin/server/ps_serve --model_dir="$work/models" --listen=127.0.0.1:0 \
  >"$work/serve.out" 2>"$work/serve.log" &
server=$!
serve_address=$(ps_address "$work/serve.out")
for _ in $(seq 300); do
  grep -q "serving " "$work/serve.log" && break
  sleep 0.1
done
for round in $(seq "$rounds"); do
  rate=$(bazel-bin/tests/bench/serve_load --address="$serve_address" \
    --lines="$work/test.tsv" --clients=4 --seconds="$serve_seconds" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["items_per_sec"])')
  echo "round $round ps_serve Predict (4 clients): $rate lines/s"
  echo "ps_serve_predict_4_clients $rate" >>"$work/rates"
done
kill "$server"; wait "$server" 2>/dev/null || true; server=""

python3 - "$work/rates" "$work/training" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    name, rate = line.split()
    rates.setdefault(name, []).append(float(rate))
trained = [float(line) for line in open(sys.argv[2])]
training = statistics.median(trained)
print("| what | median per s | range | / training |")
print("| --- | --- | --- | --- |")
print(f"| training, examples | {training:.0f} | {min(trained):.0f}-{max(trained):.0f} | 1.00 |")
for name, values in rates.items():
    median = statistics.median(values)
    what = ("ps_serve Predict (4 clients), lines" if name.startswith("ps_serve")
            else f"ps_predict ({name}), lines")
    print(f"| {what} | {median:.0f} | {min(values):.0f}-{max(values):.0f} "
          f"| {median / training:.2f} |")
PY
