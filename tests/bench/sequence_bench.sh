#!/usr/bin/env bash
# Behaviour sequences and tasks, on generated lines with a known truth:
#
# - Attention against sum pooling: clicklog_gen --sequence_length=L lines
#   (0 to L recent items; the click depends on how related the candidate is
#   to them). din (ps_worker --print_model_spec=din, the sequence cut to L)
#   against wide_deep, which pools the same seq column by sum as a field, on
#   1 shard + 1 worker; and din built in PyTorch (tests/bench/torch_train.py
#   --model_spec, every core) from the same spec. The tables use Adagrad on
#   both sides (--wide_optimizer=adagrad: torch_train.py has no FTRL).
# - Two tasks: clicklog_gen --tasks=2 lines; mmoe (a task per label) against
#   two single-task wide_deep models, one per label (the other label's
#   column skipped): AUC per task and examples/s.
#
# The configurations run in alternating rounds (each round runs every one
# once), round r with initial parameters of seed r on both sides; the table
# gives medians and ranges over the rounds, and the AUC margins within a
# round. Prints the tables and rewrites the "sequences" section of
# BENCHMARKS.md.
#
#   tests/bench/sequence_bench.sh [--rounds 5] [--train_lines 200000]
#       [--test_lines 50000] [--sequence_length 20]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rounds=5
train_lines=200000
test_lines=50000
sequence_length=20
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --sequence_length) sequence_length=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$rounds" -ge 1 ] || { echo "--rounds must be >= 1" >&2; exit 2; }
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen 2>&1 | tail -1
work=$(mktemp -d /tmp/sequence_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
cores=$(nproc)
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

gen() {  # gen PREFIX FLAGS...: train and test files, the test's truth
  local prefix=$1
  shift
  "$bin/worker/datagen/clicklog_gen" --out="$work/${prefix}train.tsv" --lines="$train_lines" \
    --sample_seed=1 "$@" 2>/dev/null
  "$bin/worker/datagen/clicklog_gen" --out="$work/${prefix}test.tsv" --lines="$test_lines" \
    --sample_seed=2 --summary_out="$work/${prefix}truth.json" "$@" 2>/dev/null
}
gen seq_ --sequence_length="$sequence_length"
gen tasks_ --tasks=2
# The items are the first cat field's values (seq:0): one key, one row, for
# an item and a candidate of the same id.
sequence_columns="label,dense*13,cat*26,seq:0"
task_columns="label:click,label:convert,dense*13,cat*26"
protoc --python_out="$work" proto/model_spec.proto proto/ps.proto
"$bin/worker/ps_worker" --print_model_spec=din --columns="$sequence_columns" \
  --wide_optimizer=adagrad | sed "s/max_length: 50/max_length: $sequence_length/" \
  >"$work/din.pbtxt"
"$bin/worker/ps_worker" --print_model_spec=wide_deep --columns="$sequence_columns" \
  --wide_optimizer=adagrad >"$work/sum.pbtxt"

# One line per run: round, configuration, examples/s, then per task its
# name and test AUC.
results="$work/results.tsv"
task_aucs() {  # task_aucs JSON: "task auc" pairs, tab-separated
  /usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
tasks = m.get("tasks") or [{"task": "label", "test_auc": m["test_auc"]}]
print("\t".join("%s\t%s" % (t["task"], t["test_auc"]) for t in tasks))' "$1"
}

# ours ROUND NAME DATA_PREFIX WORKER_FLAGS...: 1 shard + 1 worker
ours() {
  local round=$1 name=$2 data=$3
  shift 3
  local run="$work/run_${round}_$name"
  mkdir -p "$run"
  "$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$run/shard" --durability=wal \
    >"$run/shard.out" 2>"$run/shard.log" &
  local shard=$!
  pids+=("$shard")
  "$bin/worker/ps_worker" --servers="$(ps_address "$run/shard.out")" \
    --train="$work/${data}train.tsv" --test="$work/${data}test.tsv" --init_seed="$round" \
    --metrics_out="$run/worker.json" "$@" 2>"$run/worker.log"
  kill "$shard"; wait "$shard" || true
  rm -rf "$run/shard"
  printf "%s\t%s\t%s\t%s\n" "$round" "$name" \
    "$(grep -o '"examples_per_sec": [0-9.]*' "$run/worker.json" | awk '{print $2}')" \
    "$(task_aucs "$run/worker.json")" | tee -a "$results"
}

# torch ROUND NAME SPEC DATA_PREFIX
torch() {
  local round=$1 name=$2 spec=$3 data=$4
  local json="$work/torch_${round}_$name.json"
  /usr/bin/python3 tests/bench/torch_train.py --train "$work/${data}train.tsv" \
    --test "$work/${data}test.tsv" --model_spec "$spec" --proto_dir "$work" \
    --multi_columns 40 --shared_keys 40=14 \
    --threads "$cores" --seed "$round" >"$json" 2>"$work/torch_${round}_$name.log"
  printf "%s\t%s\t%s\t%s\n" "$round" "$name" \
    "$(grep -o '"examples_per_sec": [0-9.]*' "$json" | awk '{print $2}')" \
    "$(task_aucs "$json")" | tee -a "$results"
}

for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds" >&2
  torch "$round" torch_din "$work/din.pbtxt" seq_
  ours "$round" din seq_ --model_spec="$work/din.pbtxt" --columns="$sequence_columns"
  ours "$round" sum_pooling seq_ --model_spec="$work/sum.pbtxt" --columns="$sequence_columns"
  ours "$round" mmoe tasks_ --model=mmoe --columns="$task_columns"
  ours "$round" click_only tasks_ --model=wide_deep --columns="label,skip,dense*13,cat*26"
  ours "$round" convert_only tasks_ --model=wide_deep --columns="skip,label,dense*13,cat*26"
done

section="$work/section.md"
/usr/bin/python3 - "$results" "$work" "$sequence_length" "$rounds" "$cores" \
  "$train_lines" "$test_lines" <<'EOF' | tee "$section"
import datetime, json, statistics, sys
path, work, length, rounds, cores, train_lines, test_lines = sys.argv[1:]
runs = {}
for line in open(path):
    cells = line.rstrip("\n").split("\t")
    round_, name, rate = int(cells[0]), cells[1], float(cells[2] or 0)
    aucs = {cells[i]: float(cells[i + 1]) for i in range(3, len(cells) - 1, 2)}
    runs.setdefault(name, {})[round_] = (rate, aucs)
def spread(values):
    return "%.4f (%.4f-%.4f)" % (statistics.median(values), min(values), max(values))
def rates(name):
    values = [r for r, _ in runs[name].values()]
    return "%.0f (%.0f-%.0f)" % (statistics.median(values), min(values), max(values))
def auc(name, task):
    return [a[task] for _, a in runs[name].values()]
truth = json.load(open(work + "/seq_truth.json"))
print("## Behaviour sequences and tasks (tests/bench/sequence_bench.sh)")
print()
print("%s, %s cores; %s training and %s test lines from clicklog_gen; one epoch, batch "
      "4096, embeddings of 16, MLP 256-128, Adagrad (lr 0.05) for every table (PyTorch "
      "has no FTRL), Adam for the dense tensors; ps_worker on 1 shard + 1 worker, "
      "PyTorch (tests/bench/torch_train.py --model_spec, the same spec) on every core. "
      "%s alternating rounds, round r with initial parameters of seed r on both sides; "
      "median (range) over the rounds."
      % (datetime.date.today(), cores, train_lines, test_lines, rounds))
print()
print("Sequences: --sequence_length=%s (0 to %s recent items a line; the click "
      "depends on how related the candidate, the first cat value, is to them); "
      "truth AUC %.4f. din is ps_worker --print_model_spec=din with the sequence cut "
      "to %s; wide_deep pools the same seq column by sum as a field."
      % (length, length, truth["truth_auc"], length))
print()
print("| model | examples/s | test AUC |")
print("|---|---|---|")
for name, label in (("din", "din (attention pooling)"), ("sum_pooling", "wide_deep (sum pooling)"),
                    ("torch_din", "din in PyTorch")):
    print("| %s | %s | %s |" % (label, rates(name), spread(auc(name, "label"))))
rounds_seen = sorted(runs["din"])
margin = [runs["din"][r][1]["label"] - runs["sum_pooling"][r][1]["label"] for r in rounds_seen]
torch_gap = [runs["din"][r][1]["label"] - runs["torch_din"][r][1]["label"] for r in rounds_seen]
print()
print("attention - sum pooling AUC, per round: median %+.4f (%+.4f to %+.4f)"
      % (statistics.median(margin), min(margin), max(margin)))
print("ours - PyTorch din AUC, per round: median %+.4f (%+.4f to %+.4f); |median| <= 0.003: %s"
      % (statistics.median(torch_gap), min(torch_gap), max(torch_gap),
         "yes" if abs(statistics.median(torch_gap)) <= 0.003 else "NO"))
tasks = json.load(open(work + "/tasks_truth.json"))["tasks"]
print()
print("Two tasks: clicklog_gen --tasks=2 (truth AUC click %.4f, convert %.4f)"
      % (tasks[0]["truth_auc"], tasks[1]["truth_auc"]))
print()
print("| model | examples/s | click AUC | convert AUC |")
print("|---|---|---|---|")
print("| mmoe (2 tasks, 4 experts) | %s | %s | %s |"
      % (rates("mmoe"), spread(auc("mmoe", "click")), spread(auc("mmoe", "convert"))))
print("| wide_deep on click | %s | %s | |" % (rates("click_only"), spread(auc("click_only", "label"))))
print("| wide_deep on convert | %s | | %s |"
      % (rates("convert_only"), spread(auc("convert_only", "label"))))
EOF
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md sequences "$section"
