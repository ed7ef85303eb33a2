#!/usr/bin/env bash
# Training: ps_worker (1 shard + 1 worker, and 2 + 2, on loopback) against the
# same model written in PyTorch on the CPU (tests/bench/torch_train.py:
# Debian's python3-torch with the OpenMP OpenBLAS, on every core), same data,
# hashing, dims, batch size and optimizers, one epoch. FP32 is compared with
# FP32, and ps_worker --bf16 (GEMM inputs rounded to bfloat16) with PyTorch's
# bf16 autocast where the CPU has AVX512_BF16. PyTorch's rate moves by 10-15%
# from run to run here, so the configurations run in alternating rounds (each
# round runs every one once, one after another) and each ratio is taken
# within a round: the table gives the median and the range over the rounds.
# A one-thread PyTorch row, labelled so, shows what half the machine gives.
# dcn_v2 and dlrm are the built-in specs (ps_worker --print_model_spec),
# and their PyTorch peer is the same spec built by tests/bench/torch_model.py
# (torch_train.py --model_spec), on every core. Round r draws its initial
# parameters with seed r on both sides (ps_worker --init_seed, torch_train.py
# --seed), so the AUCs compared are medians over as many initialisations.
# ps_worker keeps wide_deep's and deepfm's wide weight in the embedding row
# (--wide_in_embedding_row: the same numbers, one lookup of each key on the
# shard instead of two).
# Prints the tables and rewrites the "training" section of BENCHMARKS.md
# (when wide_deep and deepfm both ran) and the "training_specs" section
# (dcn_v2, dlrm).
#
#   tests/bench/training_bench.sh [--rounds 5] [--train_lines 500000]
#       [--test_lines 100000] [--models wide_deep,deepfm,dcn_v2,dlrm]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rounds=5
train_lines=500000
test_lines=100000
models=wide_deep,deepfm,dcn_v2,dlrm
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$rounds" -ge 1 ] || { echo "--rounds must be >= 1" >&2; exit 2; }
for model in ${models//,/ }; do
  case "$model" in
    wide_deep | deepfm | dcn_v2 | dlrm) ;;
    *) echo "--models: unknown model $model (wide_deep, deepfm, dcn_v2, dlrm)" >&2; exit 2 ;;
  esac
done
runs() { [[ ",$models," == *",$1,"* ]]; }
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen 2>&1 | tail -1
work=$(mktemp -d /tmp/training_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
rss=tests/bench/peak_rss.py
cores=$(nproc)

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

# One line per run: round, configuration, examples/s, test AUC, peak RSS MiB.
results="$work/results.tsv"

# The built-in specs, for PyTorch's build of them.
if runs dcn_v2 || runs dlrm; then
  protoc --python_out="$work" proto/model_spec.proto proto/ps.proto
  for model in dcn_v2 dlrm; do
    "$bin/worker/ps_worker" --print_model_spec="$model" >"$work/$model.pbtxt"
  done
fi

# ours ROUND NAME SHARDS WORKERS MODEL STALENESS [--bf16]
ours() {
  local round=$1 name=$2 shards=$3 workers=$4 model=$5 staleness=$6 gemm=${7:-}
  local run="$work/run_${round}_$name"
  mkdir -p "$run"
  local servers=() server_pids=()
  for ((s = 0; s < shards; s++)); do
    /usr/bin/python3 "$rss" "$run/shard$s.rss" "$bin/server/ps_server" --listen=127.0.0.1:0 \
      --shard_index=$s --num_shards="$shards" --data_dir="$run/shard$s" --durability=wal \
      >"$run/shard$s.out" 2>"$run/shard$s.log" &
    server_pids+=($!); pids+=($!)
  done
  for ((s = 0; s < shards; s++)); do
    servers+=("$(ps_address "$run/shard$s.out")")
  done
  local list; list=$(IFS=,; echo "${servers[*]}")
  local worker_pids=() threads=()
  # Workers sharing this machine's cores take one GEMM thread each; a lone
  # worker keeps --cpu_threads=auto (every core for FP32 MLPs and for
  # dcn_v2's bfloat16 GEMMs).
  [ "$workers" -gt 1 ] && threads=(--cpu_threads=1)
  for ((w = 0; w < workers; w++)); do
    /usr/bin/python3 "$rss" "$run/worker$w.rss" "$bin/worker/ps_worker" --servers="$list" \
      --worker_index=$w --num_workers="$workers" --train="$work/train.tsv" \
      --test="$work/test.tsv" --model="$model" --wide_optimizer=adagrad --wide_in_embedding_row \
      --staleness="$staleness" \
      --init_seed="$round" "${threads[@]}" --metrics_out="$run/worker$w.json" $gemm \
      2>"$run/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  for p in "${worker_pids[@]}"; do wait "$p"; done
  for p in "${server_pids[@]}"; do kill "$p"; wait "$p" || true; done
  # The shards' data is not needed any more; left on disk, the kernel would
  # still be writing it back during the next run.
  rm -rf "$run"/shard*/
  local rate=0 rss_total=0
  for ((w = 0; w < workers; w++)); do
    rate=$(awk -v a="$rate" -v b="$(metric "$run/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
    rss_total=$(awk -v a="$rss_total" -v b="$(cat "$run/worker$w.rss")" 'BEGIN {print a + b}')
  done
  for ((s = 0; s < shards; s++)); do
    rss_total=$(awk -v a="$rss_total" -v b="$(cat "$run/shard$s.rss")" 'BEGIN {print a + b}')
  done
  printf "%s\t%s\t%s\t%s\t%s\n" "$round" "$name" "$rate" \
    "$(metric "$run/worker0.json" test_auc)" "$rss_total" | tee -a "$results"
}

# torch ROUND NAME MODEL THREADS [--bf16]
torch() {
  local round=$1 name=$2 model=$3 threads=$4 autocast=${5:-}
  local json="$work/torch_${round}_$name.json" model_flags=(--model "$model")
  case "$model" in
    dcn_v2 | dlrm) model_flags=(--model_spec "$work/$model.pbtxt" --proto_dir "$work") ;;
  esac
  /usr/bin/python3 tests/bench/torch_train.py --train "$work/train.tsv" --test "$work/test.tsv" \
    "${model_flags[@]}" --threads "$threads" --seed "$round" $autocast \
    >"$json" 2>"$work/torch_${round}_$name.log"
  [ "$(metric "$json" threads)" = "$threads" ] ||
    { echo "torch_train.py ran $(metric "$json" threads) threads, not $threads" >&2; exit 1; }
  printf "%s\t%s\t%s\t%s\t%s\n" "$round" "$name" "$(metric "$json" examples_per_sec)" \
    "$(metric "$json" test_auc)" "$(metric "$json" peak_rss_mb)" | tee -a "$results"
}

for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds" >&2
  if runs wide_deep; then
    torch "$round" torch_fp32 wide_deep "$cores"
    ours "$round" 1+1_fp32 1 1 wide_deep 1
    ours "$round" 2+2_fp32 2 2 wide_deep 0
    if [ -n "$bf16" ]; then
      torch "$round" torch_bf16 wide_deep "$cores" --bf16
      ours "$round" 1+1_bf16 1 1 wide_deep 1 --bf16
      ours "$round" 2+2_bf16 2 2 wide_deep 0 --bf16
    fi
  fi
  if runs deepfm; then
    torch "$round" torch_deepfm deepfm "$cores"
    ours "$round" 1+1_deepfm 1 1 deepfm 1
  fi
  for model in dcn_v2 dlrm; do
    runs "$model" || continue
    torch "$round" "torch_$model" "$model" "$cores"
    ours "$round" "1+1_$model" 1 1 "$model" 1
    ours "$round" "2+2_$model" 2 2 "$model" 0
  done
  if runs wide_deep; then torch "$round" torch_fp32_1thread wide_deep 1; fi
done

/usr/bin/python3 - "$results" "$work/truth.json" "$train_lines" "$test_lines" "$cores" \
  "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" \
  "${OPENBLAS_CORETYPE:-unset}" "$(date -u +%Y-%m-%d)" "$work" <<'PY'
import json, statistics, sys
results, truth, train_lines, test_lines, cores, torch_version, coretype, day, work = sys.argv[1:]
runs = {}
for line in open(results):
    round_, name, rate, auc, rss = line.rstrip("\n").split("\t")
    runs.setdefault(name, {})[int(round_)] = (float(rate), float(auc), float(rss))
truth = json.load(open(truth))
rounds = sorted({r for by_round in runs.values() for r in by_round})

def spread(values, digits):
    fmt = f"{{:.{digits}f}}"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"

def table(rows, out):
    """The rows that ran: summary and every round."""
    out.append("| trainer | model | examples/s | / PyTorch | test AUC | AUC - PyTorch's | peak RSS MiB |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for name, trainer, model, peer in rows:
        if name not in runs:
            continue
        by_round = runs[name]
        rates = [by_round[r][0] for r in rounds if r in by_round]
        aucs = [by_round[r][1] for r in rounds if r in by_round]
        rss = [by_round[r][2] for r in rounds if r in by_round]
        ratio = delta = "-"
        if peer is not None:
            ratios = [by_round[r][0] / runs[peer][r][0] for r in rounds if r in by_round and r in runs[peer]]
            peer_aucs = [runs[peer][r][1] for r in rounds if r in runs[peer]]
            ratio = spread(ratios, 2).replace(" (", "x (", 1)
            delta = f"{statistics.median(aucs) - statistics.median(peer_aucs):+.4f}"
        out.append(f"| {trainer} | {model} | {spread(rates, 0)} | {ratio} | {statistics.median(aucs):.4f} | {delta} | {statistics.median(rss):.0f} |")
    out.append("")
    out.append("Every round: examples/s (test AUC):")
    out.append("")
    names = [name for name, *_ in rows if name in runs]
    out.append("| round | " + " | ".join(names) + " |")
    out.append("| --- |" + " --- |" * len(names))
    for r in rounds:
        out.append(f"| {r} | " + " | ".join(
            f"{runs[n][r][0]:.0f} ({runs[n][r][1]:.4f})" if r in runs[n] else "-" for n in names) + " |")

def setting():
    return [
        f"{day}, {cores} cores; {train_lines} training and {test_lines} test lines from clicklog_gen",
        f"(ground truth: AUC {truth['truth_auc']}, logloss {truth['truth_logloss']}); one epoch, batch 4096.",
    ]

torch_name = f"PyTorch {torch_version}, {cores} threads"
rows = [  # (name, trainer, model, compared with)
    ("torch_fp32", torch_name, "wide_deep", None),
    ("1+1_fp32", "ps_worker, 1 shard + 1 worker, staleness 1", "wide_deep", "torch_fp32"),
    ("2+2_fp32", "ps_worker, 2 shards + 2 workers, staleness 0", "wide_deep", "torch_fp32"),
    ("torch_bf16", f"{torch_name}, bf16 autocast", "wide_deep", None),
    ("1+1_bf16", "ps_worker, 1 shard + 1 worker, staleness 1, --bf16", "wide_deep", "torch_bf16"),
    ("2+2_bf16", "ps_worker, 2 shards + 2 workers, staleness 0, --bf16", "wide_deep", "torch_bf16"),
    ("torch_deepfm", torch_name, "deepfm", None),
    ("1+1_deepfm", "ps_worker, 1 shard + 1 worker, staleness 1", "deepfm", "torch_deepfm"),
    ("torch_fp32_1thread", f"PyTorch {torch_version}, 1 thread (half the machine; for reference only)", "wide_deep", None),
]
# The section holds wide_deep's and deepfm's rows: rewritten when both ran.
if "torch_fp32" in runs and "torch_deepfm" in runs:
    out = ["## Training: ps_worker vs PyTorch (CPU)", ""] + setting() + [
        "Embeddings of 16, MLP 256-128; Adagrad (lr 0.05) for embeddings and wide weights,",
        "Adam (lr 0.001) for the MLP; the shards under --durability=wal. PyTorch runs on every core",
        f"(torch.set_num_threads({cores}); OpenBLAS GEMMs, OPENBLAS_CORETYPE={coretype}; bf16 autocast:",
        "oneDNN's), its parsing not timed; ps_worker's examples/s include parsing (a reader thread",
        "overlaps it), its GEMMs are oneDNN's (--bf16: inputs rounded to bfloat16, FP32",
        "accumulation) on --cpu_threads=auto's threads for a lone worker (FP32: both cores, which",
        "share its large gathers and scatters too; --bf16: one), one thread each for 2 workers.",
        "At staleness 1 a lone worker pulls a step's rows while the step before",
        "computes and replays its own last push onto them: the same model bit for bit as at 0.",
        "The shards keep each key's wide weight in its embedding row (--wide_in_embedding_row).",
        f"{len(rounds)} alternating rounds; each ratio is taken within a round, FP32 against FP32 and",
        "--bf16 against bf16 autocast. Median (range) over the rounds; peak RSS sums every process.",
        "Round r initialises both sides with seed r; AUC - PyTorch's compares the medians.",
        ""]
    table(rows, out)
    open(f"{work}/training.md", "w").write("\n".join(out) + "\n")

spec_rows = []
for model in ("dcn_v2", "dlrm"):
    spec_rows += [
        (f"torch_{model}", f"{torch_name}, the spec built by torch_model.py", model, None),
        (f"1+1_{model}", "ps_worker, 1 shard + 1 worker, staleness 1", model, f"torch_{model}"),
        (f"2+2_{model}", "ps_worker, 2 shards + 2 workers, staleness 0", model, f"torch_{model}"),
    ]
if any(name in runs for name, *_ in spec_rows):
    out = ["## Training the built-in specs: ps_worker vs PyTorch (CPU)", ""] + setting() + [
        "The models are `ps_worker --print_model_spec=dcn_v2` (a full-rank cross of 3 layers, then an",
        "MLP 256-128-1) and `--print_model_spec=dlrm` (a bottom MLP 64-16 over the dense columns, the",
        "pairwise dot products with the 26 embeddings, a top MLP 256-128-1); embeddings of 16 with",
        "Adagrad (lr 0.05), Adam (lr 0.001) for the dense tensors. PyTorch's model is the same spec file",
        "built layer by layer by tests/bench/torch_model.py (torch_train.py --model_spec), its tables",
        f"hashed, on every core (torch.set_num_threads({cores}); OPENBLAS_CORETYPE={coretype}), its",
        "parsing not timed; ps_worker's examples/s include parsing. FP32 on both sides. A lone",
        "worker's GEMMs take --cpu_threads=auto (both cores, FP32); 2+2's",
        "workers, sharing the cores, one each.",
        f"{len(rounds)} alternating rounds, each ratio taken within a round; median (range). Round r",
        "initialises both sides with seed r; AUC - PyTorch's compares the medians.",
        ""]
    table(spec_rows, out)
    open(f"{work}/training_specs.md", "w").write("\n".join(out) + "\n")
PY
for section in training training_specs; do
  [ -f "$work/$section.md" ] || continue
  cat "$work/$section.md"
  /usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md "$section" "$work/$section.md"
  echo "wrote the $section section of BENCHMARKS.md"
done
