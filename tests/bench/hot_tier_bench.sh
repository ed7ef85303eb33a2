#!/usr/bin/env bash
# The hot tier of two ps_server builds side by side in one run: this tree's
# and a baseline binary (another revision's, built beforehand), each serving
# a table 4x larger than its --cache_mb (dims 16 and 64, 500000 rows,
# batches of 4096 power-law keys, serving_bench): rows/s and the hot tier's
# hit rate per cell, and the ratios. With --rounds N the builds take turns
# N times per dim, the one measured first alternating (the second server
# started measures slower on this machine whichever it is), and the ratios
# are the median and range of each round's. Prints the table and rewrites
# the "hot tier" section of BENCHMARKS.md.
#
#   tests/bench/hot_tier_bench.sh --baseline /path/to/old/ps_server \
#     [--baseline_label "slab-less"] [--rows 500000] [--seconds 3] [--rounds 1]
#
# A baseline from an older revision: `git stash` (or check it out), `bazel
# build -c opt //server:ps_server`, copy bazel-bin/server/ps_server away,
# come back.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rows=500000
seconds=3
rounds=1
baseline=""
baseline_label="baseline"
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) baseline=$2; shift 2 ;;
    --baseline_label) baseline_label=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ ! -x "$baseline" ]; then
  echo "--baseline must name a ps_server binary to compare with" >&2
  exit 2
fi
bash deploy/setup.sh --bench >/dev/null
bazel build -c opt //server:ps_server //tests/bench:serving_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/hot_tier_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cp bazel-bin/server/ps_server "$work/ps_server_current"

table="$work/table.md"
{
  echo "## Hot tier: rows per --cache_mb and hit rate"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, $rounds round(s); $rows rows per table, --cache_mb a quarter of"
  echo "the rows' floats; batches of 4096 power-law keys (exponent 1.05); ${seconds} s per cell;"
  echo "--durability=wal. Hit rate: the share of the cell's pulled rows the hot tier answered"
  echo "(the shard counts pulls only). The budget is the same for both builds; the rows it"
  echo "holds are --cache_mb divided by each build's bytes per row."
  echo "Baseline: $baseline_label."
  echo
  echo "| round | build | dim | --cache_mb | clients | op | M rows/s | hot-tier hits |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$table"
cat "$table"
cells="$work/cells.md"
: >"$cells"
for round in $(seq "$rounds"); do
for dim in 16 64; do
  cache_mb=$(( rows * dim * 4 / 4 / 1048576 ))
  [ "$cache_mb" -ge 1 ] || cache_mb=1
  order="baseline current"
  [ $((round % 2)) -eq 0 ] && order="current baseline"
  for build in $order; do
    binary=$baseline
    [ "$build" = current ] && binary="$work/ps_server_current"
    rm -rf "$work/${build}_$dim"
    "$binary" --listen=127.0.0.1:0 --data_dir="$work/${build}_$dim" --cache_mb="$cache_mb" \
      >"$work/$build.out" 2>"$work/$build.log" &
    ps_pid=$!
    pids+=($ps_pid)
    address=$(ps_address "$work/$build.out")
    # Pulls first: the table's rows start cold, and each cell warms the next.
    bazel-bin/tests/bench/serving_bench --ps="$address" --system="$build" \
      --label="$cache_mb" --dim=$dim --rows="$rows" --seconds="$seconds" \
      --clients=1,4 --ops=pull,push |
      awk -F'|' -v round="$round" \
        '{printf "| %s |%s|%s|%s|%s|%s|%s|%s|\n", round, $2, $4, $3, $5, $6, $7, $11}' |
      tee -a "$cells"
    kill "$ps_pid"; wait "$ps_pid" 2>/dev/null || true
  done
done
done
cat "$cells" >>"$table"
python3 - "$cells" <<'PY' | tee -a "$table"
import statistics, sys
cells = {}  # (round, build, dim, clients, op) -> (M rows/s, hit rate)
for line in open(sys.argv[1]):
    f = [c.strip() for c in line.split("|")[1:-1]]
    hits = float(f[7].rstrip("%")) if f[7].endswith("%") else float("nan")
    cells[(f[0], f[1], f[2], f[4], f[5])] = (float(f[6]), hits)
ratios, hit_rates = {}, {}
for (rnd, build, dim, clients, op), (rate, hits) in cells.items():
    base = cells.get((rnd, "baseline", dim, clients, op))
    if build != "current" or base is None:
        continue
    ratios.setdefault((dim, clients, op), []).append(rate / base[0])
    hit_rates.setdefault((dim, clients, op), []).append((base[1], hits))
print("\n| dim | clients | op | current / baseline rows/s (median, range) | hit rate baseline -> current |")
print("| --- | --- | --- | --- | --- |")
for key in sorted(ratios):
    dim, clients, op = key
    r = ratios[key]
    base_hits = statistics.median(h[0] for h in hit_rates[key])
    hits = statistics.median(h[1] for h in hit_rates[key])
    change = "-" if hits != hits else f"{base_hits:.1f}% -> {hits:.1f}%"  # push: not counted
    print(f"| {dim} | {clients} | {op} | {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) | {change} |")
PY
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md hot_tier "$table"
echo "wrote the hot tier section of BENCHMARKS.md"
