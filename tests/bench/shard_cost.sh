#!/usr/bin/env bash
# The shard's CPU per row: ps_server's process CPU time over the rows it
# served, end to end over gRPC (its own process_cpu_seconds_total and
# ps_rows_pulled_total / ps_rows_pushed_total, scraped before and after
# each measurement), per op, dim (16, 64) and clients (1, 4 threads of
# serving_bench; batches of 4096 power-law keys over --rows rows, stored
# and written back first), beside ps-lite's server in the same run
# (tests/bench/pslite_cost.py over $PEERS_DIR/pslite-bench/run.sh: its
# server process's CPU over its rows; skipped, with a line that says so,
# where there is no peer checkout). Lower is better; the ratio is
# ps_server's nanoseconds over ps-lite's. With --rounds N the two systems
# take turns N times per dim (ps_server's cells, then ps-lite's) and the
# table shows each cell's median and range over the rounds: one run of each
# moves 10-40% from one minute to the next on a shared machine. --server
# measures another build of ps_server. --baseline BIN measures that build
# too, in turns with ps_server (each going first in every other round and
# dim), and adds its column and ps_server's ratio to it: a change against
# its base, where the machine's speed moves both alike. Copy the base's
# bazel-bin/server/ps_server out of the tree first: this script builds
# //server:ps_server, which would overwrite it.
#
#   tests/bench/shard_cost.sh [--rows 500000] [--seconds 3] [--rounds 1]
#                             [--server bazel-bin/server/ps_server]
#                             [--baseline OTHER_PS_SERVER]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rows=500000
seconds=3
rounds=1
server_bin=bazel-bin/server/ps_server
baseline_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --server) server_bin=$2; shift 2 ;;
    --baseline) baseline_bin=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -n "$baseline_bin" ] && [ ! -x "$baseline_bin" ]; then
  echo "--baseline $baseline_bin is not an executable (a path from $(pwd))" >&2
  exit 2
fi
peers=${PEERS_DIR:-$(cd .. && pwd)/shared/peers}
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //tests/bench:serving_bench 2>&1 | tail -1
if [ -n "$baseline_bin" ] && cmp -s "$baseline_bin" "$server_bin"; then
  echo "--baseline $baseline_bin is the same binary as $server_bin" >&2
  exit 2
fi
work=$(mktemp -d /tmp/shard_cost.XXXX)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# "CPU_SECONDS ROWS_PULLED ROWS_PUSHED" from the shard's metrics.
scrape() {
  python3 - "$1" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
values = {}
for line in text.splitlines():
    if line and not line.startswith("#"):
        name, value = line.rsplit(" ", 1)
        name = name.split("{")[0]  # summed over its labels (the shard's)
        values[name] = values.get(name, 0.0) + float(value)
print(values["process_cpu_seconds_total"], values["ps_rows_pulled_total"],
      values["ps_rows_pushed_total"])
PY
}

results="$work/results.txt"
: >"$results"
# measure_server LABEL BINARY DIM: that build's cells of one dim.
measure_server() {
  local label=$1 binary=$2 dim=$3
  metrics_port=$(free_port)
  local shard="$work/$label-$dim"
  rm -rf "$shard"
  "$binary" --listen=127.0.0.1:0 --data_dir="$shard" \
    --cache_mb=2048 --metrics_listen=127.0.0.1:$metrics_port \
    >"$shard.out" 2>"$shard.log" &
  server=$!
  address=$(ps_address "$shard.out")
  # Store the rows and let the shard write them back: a one-time cost of
  # loading the table, not a pull's or a push's.
  bazel-bin/tests/bench/serving_bench --ps="$address" --dim=$dim --rows=$rows \
    --ops=pull --clients=1 --seconds=0.2 --settle_s=15 >/dev/null
  for op in pull push; do
    for clients in 1 4; do
      read -r cpu0 pulled0 pushed0 < <(scrape "$metrics_port")
      bazel-bin/tests/bench/serving_bench --ps="$address" --dim=$dim --rows=$rows \
        --store_rows=false --ops=$op --clients=$clients --seconds="$seconds" >/dev/null
      read -r cpu1 pulled1 pushed1 < <(scrape "$metrics_port")
      awk -v label=$label -v op=$op -v dim=$dim -v c=$clients -v cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {print b - a}') \
        -v rows=$(awk -v op=$op -v a="$pulled0" -v b="$pulled1" -v c="$pushed0" -v d="$pushed1" \
          'BEGIN {print (op == "pull" ? b - a : d - c)}') \
        'BEGIN {printf "%s %s dim=%d clients=%d: %.0f ns/row (%.1f M rows, %.2f s CPU)\n",
                label, op, dim, c, cpu / rows * 1e9, rows / 1e6, cpu}' | tee -a "$results"
    done
  done
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
}

for round in $(seq "$rounds"); do
for dim in 16 64; do
  echo "round $round of $rounds, dim $dim" >&2
  # With a baseline, the builds take turns going first, so that neither
  # always runs on the machine the other leaves behind.
  if [ -n "$baseline_bin" ] && [ $(((round + dim / 16) % 2)) = 1 ]; then
    measure_server baseline "$baseline_bin" $dim
    measure_server ps_server "$server_bin" $dim
  else
    measure_server ps_server "$server_bin" $dim
    if [ -n "$baseline_bin" ]; then measure_server baseline "$baseline_bin" $dim; fi
  fi
  if [ -x "$peers/pslite-bench/run.sh" ] || [ -f "$peers/pslite-bench/run.sh" ]; then
    python3 tests/bench/pslite_cost.py --peers="$peers" --dim=$dim --rows=$rows \
      --seconds="$seconds" --workers 1 4 | tee -a "$results"
  else
    echo "ps-lite: no peer checkout at $peers (PEERS_DIR): skipped" | tee -a "$results"
  fi
done
done

echo
# Per cell: the median over the rounds (the range where there are several);
# the ratio is of the medians.
python3 - "$results" <<'PY'
import re, statistics, sys
cells = {}
for line in open(sys.argv[1]):
    m = re.match(r"(ps_server|baseline|ps-lite) (pull|push) dim=(\d+) clients=(\d+): (\d+) ns", line)
    if m:
        cells.setdefault((m[2], int(m[3]), int(m[4]), m[1]), []).append(int(m[5]))
with_baseline = any(key[3] == "baseline" for key in cells)
def show(values):
    if not values: return "-", None
    median = statistics.median(values)
    spread = f" ({min(values)}-{max(values)})" if len(values) > 1 else ""
    return f"{median:.0f}{spread}", median
def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"
header = f"{'op':5} {'dim':4} {'clients':7} {'ps_server ns':>20} {'ps-lite ns':>20} {'ratio':>6}"
if with_baseline:
    header += f" {'baseline ns':>20} {'/ baseline':>10}"
print(header)
for dim in (16, 64):
    for op in ("pull", "push"):
        for clients in (1, 4):
            ours, a = show(cells.get((op, dim, clients, "ps_server"), []))
            theirs, b = show(cells.get((op, dim, clients, "ps-lite"), []))
            row = f"{op:5} {dim:<4} {clients:<7} {ours:>20} {theirs:>20} {ratio(a, b):>6}"
            if with_baseline:
                base, c = show(cells.get((op, dim, clients, "baseline"), []))
                row += f" {base:>20} {ratio(a, c):>10}"
            print(row)
PY
