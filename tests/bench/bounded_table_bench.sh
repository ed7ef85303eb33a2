#!/usr/bin/env bash
# A table that stays bounded on an endless stream: 1 shard + 1 worker train
# wide_deep for one pass over a long click stream whose values drift
# (clicklog_gen --drift: new values keep entering, old ones fade out), once
# each with nothing, admission (--admit_after), expiry (--row_ttl_s) and
# both. Every 2 s it samples the shard's stored rows (RocksDB's estimate,
# summed over tables), the live bytes of the tables' RocksDB files, its data
# dir's bytes (with files compaction has not yet deleted) and its RSS; at
# the end the
# worker scores a test file of the stream's most recent lines. Writes
# tests/bench/bounded_table.png (rows, disk and RSS over time) and rewrites
# the "bounded" section of BENCHMARKS.md.
#
#   tests/bench/bounded_table_bench.sh [--train_lines 2000000]
#       [--test_lines 100000] [--drift 2] [--ttl_s 20] [--admit_after 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=2000000
test_lines=100000
drift=2
ttl_s=20
admit_after=2
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --drift) drift=$2; shift 2 ;;
    --ttl_s) ttl_s=$2; shift 2 ;;
    --admit_after) admit_after=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //ops:ps_admin //worker:ps_worker \
  //worker/datagen:clicklog_gen 2>&1 | tail -1
work=$(mktemp -d /tmp/bounded_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }

echo "generating $train_lines training lines (drift $drift) and $test_lines test lines after them"
"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 \
  --drift="$drift" 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines="$test_lines" --sample_seed=2 \
  --drift="$drift" --first_line="$train_lines" 2>/dev/null

# run NAME WORKER_FLAGS... : trains, sampling into $work/NAME.csv
# (seconds,rows,live_bytes,dir_bytes,rss_bytes); prints "auc logloss
# examples/s".
run() {
  local name=$1; shift
  local dir="$work/$name"
  mkdir -p "$dir"
  "$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$dir/shard" \
    --durability=periodic --cache_mb=128 >"$dir/shard.out" 2>"$dir/shard.log" &
  local shard=$!; pids+=($shard)
  local address; address=$(ps_address "$dir/shard.out")
  "$bin/worker/ps_worker" --servers="$address" --train="$work/train.tsv" \
    --test="$work/test.tsv" --batch_size=1024 --metrics_out="$dir/worker.json" \
    "$@" 2>"$dir/worker.log" &
  local worker=$!; pids+=($worker)
  local start; start=$(date +%s.%N)
  echo "seconds,rows,live_bytes,dir_bytes,rss_bytes" >"$work/$name.csv"
  while kill -0 "$worker" 2>/dev/null; do
    local tables disk rss now
    tables=$("$bin/ops/ps_admin" --servers="$address" --json tables 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; t=json.load(sys.stdin)["tables"]; print(sum(x["rows"] for x in t), sum(x["disk_bytes"] for x in t), sep=",")' \
      2>/dev/null || echo "")
    disk=$(du -sb "$dir/shard" 2>/dev/null | cut -f1)
    rss=$(awk '/VmRSS/ {print $2 * 1024}' "/proc/$shard/status" 2>/dev/null || echo "")
    now=$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}')
    [ -n "$tables" ] && echo "$now,$tables,$disk,$rss" >>"$work/$name.csv"
    sleep 2
  done
  wait "$worker"
  kill "$shard"; wait "$shard" 2>/dev/null || true
  echo "$(metric "$dir/worker.json" test_auc) $(metric "$dir/worker.json" test_logloss) $(metric "$dir/worker.json" examples_per_sec)"
}

table="$work/table.md"
results="$work/results.txt"
: >"$results"
configs=("none" "admission" "expiry" "both")
flags=("" "--admit_after=$admit_after" "--row_ttl_s=$ttl_s" "--admit_after=$admit_after --row_ttl_s=$ttl_s")
for i in "${!configs[@]}"; do
  echo "training: ${configs[$i]} ${flags[$i]}"
  # shellcheck disable=SC2086
  echo "${configs[$i]} $(run "${configs[$i]}" ${flags[$i]})" | tee -a "$results"
done

/usr/bin/python3 - "$work" "$results" "$table" tests/bench/bounded_table.png \
  "$train_lines" "$test_lines" "$drift" "$ttl_s" "$admit_after" <<'PY'
import csv, datetime, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
work, results, table, png = sys.argv[1:5]
train_lines, test_lines, drift, ttl_s, admit_after = sys.argv[5:]
names = ["none", "admission", "expiry", "both"]
series = {}
for name in names:
    with open(os.path.join(work, name + ".csv")) as f:
        series[name] = [tuple(float(x) for x in row) for row in list(csv.reader(f))[1:] if all(row)]
outcome = {}
for line in open(results):
    name, auc, logloss, rate = line.split()
    outcome[name] = (float(auc), float(logloss), float(rate))
labels = {"none": "keep everything", "admission": f"admit_after={admit_after}",
          "expiry": f"row_ttl_s={ttl_s}", "both": f"admit_after={admit_after} + row_ttl_s={ttl_s}"}
figure, axes = plt.subplots(1, 4, figsize=(18, 4.2))
for name in names:
    t = [p[0] for p in series[name]]
    axes[0].plot(t, [p[1] / 1e6 for p in series[name]], label=labels[name])
    axes[1].plot(t, [p[2] / 2**20 for p in series[name]], label=labels[name])
    axes[2].plot(t, [p[3] / 2**20 for p in series[name]], label=labels[name])
    axes[3].plot(t, [p[4] / 2**20 for p in series[name]], label=labels[name])
for axis, title in zip(axes, ["stored rows (M, RocksDB's estimate)", "tables' live RocksDB files (MiB)",
                              "data dir (MiB)", "shard RSS (MiB)"]):
    axis.set_title(title)
    axis.set_xlabel("seconds of training")
    axis.grid(alpha=0.3)
axes[0].legend(fontsize=8)
figure.suptitle(f"1 shard + 1 worker, {int(train_lines):,} drifting lines (drift {drift})")
figure.tight_layout()
figure.savefig(png, dpi=80)

def last(name, i):
    return series[name][-1][i] if series[name] else float("nan")
def peak(name, i):
    return max((p[i] for p in series[name]), default=float("nan"))
base_auc = outcome["none"][0]
with open(table, "w") as out:
    out.write("## A table that stays bounded on an endless stream\n\n")
    out.write(f"{datetime.date.today()}, {os.cpu_count()} cores, one run: 1 shard (--durability=periodic,\n"
              f"--cache_mb=128) + 1 worker train wide_deep (batch 1024) for one pass over {int(train_lines):,}\n"
              f"lines of clicklog_gen --drift={drift} (new values enter every field and old ones fade), then\n"
              f"score {int(test_lines):,} lines drawn right after the stream's end (--first_line). Sampled every\n"
              "2 s; rows are RocksDB's estimate over the tables, live files the bytes of the SST files\n"
              "RocksDB reads (what compaction leaves), the data dir also counts its WAL and the files\n"
              "compaction has not yet deleted.\n"
              "Plot: `tests/bench/bounded_table.png`.\n\n")
    out.write("| config | rows at half time (M) | rows at the end (M) | live files at half time (MiB) | at the end (MiB) | data dir at the end (MiB) | peak RSS (MiB) | test AUC | AUC - keep everything | logloss | examples/s |\n")
    out.write("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    for name in names:
        s = series[name]
        mid = s[len(s) // 2] if s else (float("nan"),) * 5
        auc, logloss, rate = outcome[name]
        out.write(f"| {labels[name]} | {mid[1] / 1e6:.2f} | {last(name, 1) / 1e6:.2f} | {mid[2] / 2**20:.0f} | "
                  f"{last(name, 2) / 2**20:.0f} | {last(name, 3) / 2**20:.0f} | "
                  f"{peak(name, 4) / 2**20:.0f} | {auc:.4f} | {auc - base_auc:+.4f} | {logloss:.4f} | {rate:.0f} |\n")
print(open(table).read())
PY
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md bounded "$table"
echo "wrote the bounded section of BENCHMARKS.md and tests/bench/bounded_table.png"
