#!/usr/bin/env bash
# Serving rows: ps_server against Redis 7 (no persistence) holding the same
# rows, side by side on loopback in one run; dims 16 and 64; batches of 4096
# power-law keys; 1 and 4 clients (threads of one process, and for the table
# that fits, also 4 processes, as ps-lite's 4 workers are); a table that fits the hot tier and one 4x
# larger than --cache_mb; the loopback bandwidth as the ceiling, and the same
# gRPC service doing no work as the transport's; and the peer, ps-lite
# ($PEERS_DIR/pslite-bench/run.sh, PEERS_DIR defaulting to ../shared/peers
# beside the checkout: 1 server, 1 and 4 worker processes, the same rows,
# dims and seconds), measured in the same run, never copied; skipped, with a
# line that says so, where there is no peer checkout.
# Prints the table and rewrites the "serving" section of BENCHMARKS.md.
# With --peer_rounds N it measures only ps_server against ps-lite (the table
# that fits, dims 16 and 64, 1 and 4 client processes), in N rounds that
# each run both, and prints each cell's ratio per round with the median and
# range over the rounds: ps-lite's own figures move 30-60% from one run to
# the next here. BENCHMARKS.md is left as it is.
#
#   tests/bench/serving_bench.sh [--rows 500000] [--seconds 3]
#                                [--peer_rounds N]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rows=500000
seconds=3
# After storing the rows, the shard writes them back to RocksDB (a one-time
# cost of loading the table, which ps-lite and Redis do not have): measure
# once that is done.
settle=15
peer_rounds=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --peer_rounds) peer_rounds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //tests/bench:serving_bench //tests/bench:grpc_ceiling_server 2>&1 | tail -1
work=$(mktemp -d /tmp/serving_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

redis_port=$(free_port)
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
  --daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
pids+=($!)
sleep 0.5

# Starts a ps_server (cache_mb, name) and sets $address; stop_ps stops it, so
# that no idle server (and its background compactions) shares the CPUs with
# the next measurement.
start_ps() {
  "bazel-bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/$2" --cache_mb="$1" \
    >"$work/$2.out" 2>"$work/$2.log" &
  ps_pid=$!
  pids+=($ps_pid)
  address=$(ps_address "$work/$2.out")
}
stop_ps() { kill "$ps_pid"; wait "$ps_pid" 2>/dev/null || true; }
# Four clients as four processes, as ps-lite's four workers are (LABEL, DIM):
# one row per op, rows/s and MB/s summed, p50 the mean, p99 the worst.
four_processes() {
  for op in pull push; do
    local clients=()
    for i in 1 2 3 4; do
      bazel-bin/tests/bench/serving_bench --ps="$address" --label="$1" --dim="$2" \
        --rows="$rows" --seconds="$seconds" --store_rows=false --clients=1 --ops=$op \
        >"$work/process$i.md" &
      clients+=($!)
    done
    wait "${clients[@]}"
    cat "$work"/process[1-4].md | awk -F'|' -v label="$1" -v dim="$2" -v op=$op '
      {rate += $7; mb += $8; p50 += $9; if ($10 > p99) p99 = $10; hits = $11; n++}
      END {if (n == 4) printf "| ps_server | %s | %s | 4 processes | %s | %.2f | %.0f | %.2f | %.2f |%s|\n",
                                label, dim, op, rate, mb, p50 / n, p99, hits}' |
      tee -a "$table"
  done
}
# The same gRPC service doing no work (tests/bench/grpc_ceiling_server.cc):
# what gRPC itself allows on this machine.
start_ceiling() {
  "bazel-bin/tests/bench/grpc_ceiling_server" --listen=127.0.0.1:0 >"$work/ceiling.out" 2>&1 &
  ps_pid=$!
  pids+=($ps_pid)
  address=$(ps_address "$work/ceiling.out")
}

# The peer: ps-lite, one server and 1 or 4 worker processes (our "clients"),
# from a scratch copy: the peer ships without its tests' sources, so its
# CMakeLists' tests directory is left out (run.sh builds the library only).
peers=${PEERS_DIR:-../shared/peers}
have_peer=0
if [ -f "$peers/pslite-bench/run.sh" ] && [ -d "$peers/ps-lite" ]; then
  cp -r "$peers/ps-lite" "$peers/pslite-bench" "$work/"
  chmod -R u+w "$work/ps-lite" "$work/pslite-bench"
  sed -i '/add_subdirectory(tests)/d' "$work/ps-lite/CMakeLists.txt"
  have_peer=1
fi
# ps-lite's rows for dim $1 into $table.
run_peer() {
  # With the heap policy ps_worker and serving_bench set for themselves
  # (base/heap_policy.h), which speeds ps-lite's processes up as much.
  MALLOC_MMAP_THRESHOLD_=$((32 << 20)) MALLOC_TRIM_THRESHOLD_=$((256 << 20)) \
    MALLOC_TOP_PAD_=$((16 << 20)) \
    BENCH_DIM=$1 BENCH_ROWS="$rows" BENCH_SECONDS="$seconds" bash "$work/pslite-bench/run.sh" 1 4 \
    2>"$work/pslite_$1.log" |
    awk -v dim=$1 '/^ps-lite/ {gsub(",", "", $2); printf "| ps-lite | fits (no durability) | %s | %s | %s | %s | - | - | - | - |\n", dim, $3, $2, $5}' |
    tee -a "$table" || echo "ps-lite failed for dim $1: $(tail -3 "$work/pslite_$1.log")" >&2
}

if [ "$peer_rounds" -gt 0 ]; then
  [ "$have_peer" = 1 ] || { echo "no peer in $peers: nothing to compare" >&2; exit 1; }
  for round in $(seq "$peer_rounds"); do
    echo "round $round of $peer_rounds"
    table="$work/round$round.md"
    : >"$table"
    for dim in 16 64; do
      start_ps 1024 "round${round}_$dim"
      bazel-bin/tests/bench/serving_bench --ps="$address" --label="fits hot tier" --dim=$dim \
        --rows="$rows" --seconds="$seconds" --settle_s="$settle" | tee -a "$table"
      four_processes "fits hot tier" "$dim"
      stop_ps
      run_peer "$dim"
    done
  done
  python3 - "$work"/round*.md <<'PY'
import statistics, sys
per_cell = {}
for path in sys.argv[1:]:
    cells = {}
    for line in open(path):
        parts = [c.strip() for c in line.split("|")[1:-1]]
        if len(parts) < 6 or parts[0] not in ("ps_server", "ps-lite"):
            continue
        system, _, dim, clients, op, mrows = parts[:6]
        if system == "ps_server" and clients == "4":
            continue  # four threads of one process; ps-lite's are processes
        clients = "4" if clients == "4 processes" else clients
        cells[(system, dim, clients, op)] = float(mrows)
    for (system, dim, clients, op), ours in cells.items():
        peer = cells.get(("ps-lite", dim, clients, op))
        if system == "ps_server" and clients in ("1", "4") and peer:
            per_cell.setdefault((dim, clients, op), []).append((ours, peer))
print("\n| dim | clients (processes) | op | ps_server / ps-lite per round | median | range |")
print("| --- | --- | --- | --- | --- | --- |")
for (dim, clients, op), pairs in sorted(per_cell.items()):
    ratios = [ours / peer for ours, peer in pairs]
    each = ", ".join(f"{ours:.2f}/{peer:.2f}" for ours, peer in pairs)
    print(f"| {dim} | {clients} | {op} | {each} | {statistics.median(ratios):.2f} "
          f"| {min(ratios):.2f}-{max(ratios):.2f} |")
PY
  exit 0
fi

loopback=$(bazel-bin/tests/bench/serving_bench --loopback)
table="$work/table.md"
{
  echo "## Serving rows: ps_server vs Redis and ps-lite"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores; $rows rows per table; batches of 4096 distinct keys drawn"
  echo "with a power law (exponent 1.05), as a worker sends them; ${seconds} s per cell; ps_server with --durability=wal (the default),"
  echo "measured ${settle} s after its rows were stored (their write-back to RocksDB done)."
  echo "Redis 7 on loopback with no persistence, rows as binary values, hiredis client; Redis"
  echo "push = MGET, SGD on the client, MSET (read-modify-write, one pipelined command each)."
  echo "The clients keep freed heap for reuse (base/heap_policy.h, as ps_worker does), and"
  echo "ps-lite's processes run under the same policy (glibc's MALLOC_* variables)."
  echo "Loopback ceiling measured in the same run: $(awk -v b="$loopback" 'BEGIN {printf "%.2f GB/s", b / 1e9}')."
  echo
  echo "| system | table | dim | clients | op | M rows/s | MB/s | p50 ms | p99 ms | hot-tier hits |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$table"
cat "$table"
for dim in 16 64; do
  start_ceiling
  bazel-bin/tests/bench/serving_bench --ps="$address" --system="gRPC, no work" --label="-" \
    --dim=$dim --rows="$rows" --seconds="$seconds" | tee -a "$table"
  stop_ps
  start_ps 1024 "fits$dim"
  bazel-bin/tests/bench/serving_bench --ps="$address" --label="fits hot tier" --dim=$dim \
    --rows="$rows" --seconds="$seconds" --settle_s="$settle" --redis_port="$redis_port" |
    tee -a "$table"
  four_processes "fits hot tier" "$dim"
  stop_ps
  # Raw rows are rows * dim * 4 bytes; a hot tier a quarter of that.
  small=$(( rows * dim * 4 / 4 / 1048576 ))
  [ "$small" -ge 1 ] || small=1
  start_ps "$small" "big$dim"
  bazel-bin/tests/bench/serving_bench --ps="$address" --label="4x --cache_mb=$small" --dim=$dim \
    --rows="$rows" --seconds="$seconds" --settle_s="$settle" | tee -a "$table"
  stop_ps
done
if [ "$have_peer" = 1 ]; then
  for dim in 16 64; do run_peer "$dim"; done
else
  echo "no peer in $peers: the ps-lite columns are left out" >&2
fi
python3 - "$table" "$loopback" <<'PY' | tee -a "$table"
import re, sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ps_server") or l.startswith("| Redis") or l.startswith("| gRPC") or l.startswith("| ps-lite")]
loopback = float(sys.argv[2])
cells = {}
for r in rows:
    system, table, dim, clients, op, mrows = [c.strip() for c in r[:6]]
    cells[(system, table.startswith("fits") or table == "-", dim, clients, op)] = float(mrows)
print("\n| dim | clients (processes) | op | ps_server M rows/s | ps-lite M rows/s | ps_server / ps-lite |")
print("| --- | --- | --- | --- | --- | --- |")
for dim in ("16", "64"):
    for op in ("pull", "push"):
        for clients in ("1", "4"):
            # ps-lite's four clients are four worker processes: so are these.
            ps = cells.get(("ps_server", True, dim, "4 processes" if clients == "4" else "1", op), 0)
            peer = cells.get(("ps-lite", True, dim, clients, op), 0)
            ratio = f"{ps / peer:.2f}" if peer else "not measured"
            print(f"| {dim} | {clients} | {op} | {ps:.2f} | {peer:.2f} | {ratio} |")
print("\n| dim | clients | op | ps_server / Redis (best client count) | ps_server / loopback ceiling | ps_server / gRPC doing no work |")
print("| --- | --- | --- | --- | --- | --- |")
for dim in ("16", "64"):
    for op in ("pull", "push"):
        ps = max(cells.get(("ps_server", True, dim, c, op), 0) for c in ("1", "4"))
        redis = max(cells.get(("Redis 7", True, dim, c, op), 0) for c in ("1", "4"))
        grpc = max(cells.get(("gRPC, no work", True, dim, c, op), 0) for c in ("1", "4"))
        ceiling = loopback / (int(dim) * 4) / 1e6
        ratio = ps / redis if redis else float("nan")
        of_grpc = ps / grpc if grpc else float("nan")
        print(f"| {dim} | best | {op} | {ratio:.1f}x | {ps / ceiling:.2f} of {ceiling:.1f} M rows/s | {of_grpc:.2f} of {grpc:.2f} M rows/s |")
PY
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md serving "$table"
echo "wrote the serving section of BENCHMARKS.md"
