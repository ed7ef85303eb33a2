#!/usr/bin/env bash
# Training: ps_worker (1 shard + 1 worker, and 2 + 2, on loopback) against the
# same model written in PyTorch on the CPU (Debian's python3-torch with the
# OpenMP OpenBLAS), same data, hashing, dims, batch size and optimizers, one
# epoch: examples/s, test AUC and logloss, peak RSS; with FP32 GEMMs and with
# bfloat16 GEMM inputs (ps_worker --bf16, PyTorch's bf16 autocast) where the
# CPU has AVX512_BF16. Prints the table and the ratios to PyTorch, and
# rewrites the "training" section of BENCHMARKS.md.
#
#   tests/bench/training_bench.sh [--train_lines 500000] [--test_lines 100000]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=500000
test_lines=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen 2>&1 | tail -1
work=$(mktemp -d /tmp/training_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
rss=tests/bench/peak_rss.py

"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines="$test_lines" --sample_seed=2 \
  --summary_out="$work/truth.json" 2>/dev/null
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }

# OpenBLAS 0.3.21 (PyTorch's GEMMs here) does not recognise some recent CPUs
# and falls back to slow generic kernels: give it the right core type.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

bf16=""
grep -q avx512_bf16 /proc/cpuinfo && bf16=yes

# ours SHARDS WORKERS MODEL [DURABILITY] [STALENESS] [--bf16] -> one table row
ours() {
  local shards=$1 workers=$2 model=$3 durability=${4:-wal} staleness=${5:-0} gemm=${6:-}
  local run="$work/run_$1_$2_$3_${durability}_${staleness}${gemm}"
  mkdir -p "$run"
  local servers=() server_pids=()
  for ((s = 0; s < shards; s++)); do
    /usr/bin/python3 "$rss" "$run/shard$s.rss" "$bin/server/ps_server" --listen=127.0.0.1:0 \
      --shard_index=$s --num_shards="$shards" --data_dir="$run/shard$s" --durability="$durability" \
      >"$run/shard$s.out" 2>"$run/shard$s.log" &
    server_pids+=($!); pids+=($!)
  done
  for ((s = 0; s < shards; s++)); do
    servers+=("$(ps_address "$run/shard$s.out")")
  done
  local list; list=$(IFS=,; echo "${servers[*]}")
  local worker_pids=()
  for ((w = 0; w < workers; w++)); do
    /usr/bin/python3 "$rss" "$run/worker$w.rss" "$bin/worker/ps_worker" --servers="$list" \
      --worker_index=$w --num_workers="$workers" --train="$work/train.tsv" \
      --test="$work/test.tsv" --model="$model" --wide_optimizer=adagrad --staleness="$staleness" \
      --metrics_out="$run/worker$w.json" $gemm 2>"$run/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  for p in "${worker_pids[@]}"; do wait "$p"; done
  for p in "${server_pids[@]}"; do kill "$p"; wait "$p" || true; done
  # The shards' data is not needed any more; left on disk, the kernel would
  # still be writing it back during the next configuration's run.
  rm -rf "$run"/shard*/
  local rate=0 rss_total=0
  for ((w = 0; w < workers; w++)); do
    rate=$(awk -v a="$rate" -v b="$(metric "$run/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
    rss_total=$(awk -v a="$rss_total" -v b="$(cat "$run/worker$w.rss")" 'BEGIN {print a + b}')
  done
  for ((s = 0; s < shards; s++)); do
    rss_total=$(awk -v a="$rss_total" -v b="$(cat "$run/shard$s.rss")" 'BEGIN {print a + b}')
  done
  local mode=""
  [ "$staleness" != 0 ] && mode=", staleness $staleness"
  [ -n "$gemm" ] && mode="$mode, --bf16"
  printf "| ps_worker, %d shard + %d worker, %s%s | %s | %.0f | - | %.4f | %.4f | %.0f |\n" "$shards" \
    "$workers" "$durability" "$mode" "$model" "$rate" "$(metric "$run/worker0.json" test_auc)" \
    "$(metric "$run/worker0.json" test_logloss)" "$rss_total"
}

# torch_row MODEL [--bf16] -> one table row
torch_row() {
  local model=$1 autocast=${2:-}
  local json="$work/torch_$model$autocast.json"
  /usr/bin/python3 tests/bench/torch_train.py --train "$work/train.tsv" --test "$work/test.tsv" \
    --model "$model" $autocast >"$json"
  printf "| PyTorch %s, 1 process%s | %s | %.0f | %.1f s | %.4f | %.4f | %.0f |\n" \
    "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" \
    "${autocast:+, bf16 autocast}" "$model" \
    "$(metric "$json" examples_per_sec)" "$(metric "$json" parse_seconds)" \
    "$(metric "$json" test_auc)" "$(metric "$json" test_logloss)" "$(metric "$json" peak_rss_mb)"
}

table="$work/table.md"
{
  echo "## Training: ps_worker vs PyTorch (CPU)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores; $train_lines training and $test_lines test lines from"
  echo "clicklog_gen (ground truth: AUC $(metric "$work/truth.json" truth_auc), logloss"
  echo "$(metric "$work/truth.json" truth_logloss)); one epoch, batch 4096, embeddings of 16, MLP"
  echo "256-128; Adagrad (lr 0.05) for embeddings and wide weights, Adam (lr 0.001) for the MLP."
  echo "ps_worker runs bulk-synchronous (--staleness=0) unless a row says otherwise, with the"
  echo "named --durability. At staleness 1 a lone worker pulls a step's rows while the step"
  echo "before computes and replays its own last push onto them (read-my-writes without waiting;"
  echo "--overlay_own_pushes=alone, the default): it trains the same model bit for bit as at 0."
  echo "Two workers at staleness 1 wait for their own pushes (the default). Examples/s include"
  echo "parsing (a reader thread overlaps it); PyTorch's exclude parsing, shown apart. Peak RSS"
  echo "sums every process. ps_worker's GEMMs are oneDNN's on one thread (--bf16: inputs"
  echo "rounded to bfloat16, FP32 accumulation); PyTorch's are OpenBLAS's on every core"
  echo "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; bf16 autocast: oneDNN's)."
  echo
  echo "| trainer | model | train examples/s | parsing | test AUC | test logloss | peak RSS MiB |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
} >"$table"
cat "$table"
for model in wide_deep deepfm; do
  torch_row "$model" | tee -a "$table"
  [ -n "$bf16" ] && [ "$model" = wide_deep ] && torch_row "$model" --bf16 | tee -a "$table"
  ours 1 1 "$model" | tee -a "$table"
  ours 1 1 "$model" wal 1 | tee -a "$table"
  [ -n "$bf16" ] && ours 1 1 "$model" wal 1 --bf16 | tee -a "$table"
done
ours 1 1 wide_deep periodic | tee -a "$table"
ours 2 2 wide_deep | tee -a "$table"
ours 2 2 wide_deep wal 1 | tee -a "$table"
ours 2 2 wide_deep periodic | tee -a "$table"
# The ratios, from the runs' JSON files.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }'; }
rate_of() { metric "$work/$1" examples_per_sec; }
{
  echo
  echo "1 shard + 1 worker, wide_deep, staleness 1 / PyTorch (FP32):" \
    "$(ratio "$(rate_of run_1_1_wide_deep_wal_1/worker0.json)" "$(rate_of torch_wide_deep.json)")x"
  if [ -n "$bf16" ]; then
    echo "with --bf16 / PyTorch (FP32):" \
      "$(ratio "$(rate_of run_1_1_wide_deep_wal_1--bf16/worker0.json)" "$(rate_of torch_wide_deep.json)")x;" \
      "/ PyTorch with bf16 autocast:" \
      "$(ratio "$(rate_of run_1_1_wide_deep_wal_1--bf16/worker0.json)" "$(rate_of torch_wide_deep--bf16.json)")x"
  fi
} | tee -a "$table"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md training "$table"
echo "wrote the training section of BENCHMARKS.md"
