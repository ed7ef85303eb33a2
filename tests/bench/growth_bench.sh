#!/usr/bin/env bash
# How cost grows, on this machine:
#   1. pull and push rows/s against shards (1, 2, 4) and client processes
#      (1, 2, 4, 8): each client a load_bench process with one puller or one
#      pusher (the workers' client: routing, exactly-once pushes), batches of
#      4096 keys drawn evenly from 1M, dim 16, Adagrad, --durability=wal;
#      pushes first, so that the pulls find the rows stored;
#   2. training examples/s against shards (1, 2, 4) and workers (1, 2, 4, 8)
#      (wide_deep on --train_lines generated lines, split between the
#      workers, --staleness=2, --durability=periodic as in scaling_bench.sh);
#   3. one shard's resident memory and pull/push rows/s against table size
#      (--sizes, millions of dim-16 rows, power-law keys) at a fixed
#      --cache_mb, and the rows/s it stored them at;
# then what each figure would be on N machines, from these points.
# Rewrites the "growth" section of BENCHMARKS.md.
#
#   tests/bench/growth_bench.sh [--seconds 5] [--train_lines 200000]
#       [--sizes "1 4 16 64"] [--cache_mb 512] [--parts rates,training,sizes]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
seconds=5
train_lines=200000
sizes="1 4 16 64"
cache_mb=512
parts=rates,training,sizes
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --train_lines) train_lines=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --cache_mb) cache_mb=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen \
  //tests/bench:serving_bench //tests/bench:load_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/growth_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
wants() { [[ ",$parts," == *",$1,"* ]]; }

# start_shards N DIR FLAGS...: N shards with data under DIR; sets `servers`
# (comma-separated) and adds their pids to `pids`.
start_shards() {
  local n=$1 dir=$2
  shift 2
  local addresses=()
  mkdir -p "$dir"
  for ((s = 0; s < n; s++)); do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards="$n" \
      --data_dir="$dir/shard$s" "$@" >"$dir/shard$s.out" 2>"$dir/shard$s.log" &
    pids+=($!)
  done
  for ((s = 0; s < n; s++)); do addresses+=("$(ps_address "$dir/shard$s.out")"); done
  servers=$(IFS=,; echo "${addresses[*]}")
}
# Stops every process started and deletes `dir`'s data, so that the next
# configuration does not share the CPUs with their shutdown.
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$1"
}

table="$work/table.md"
{
  echo "## How cost grows"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo),"
  echo "everything on this one machine (\`tests/bench/growth_bench.sh\`). Shards and clients share"
  echo "the same cores, so more processes here show what they cost, not what more machines"
  echo "would gain; the model at the end turns the points into figures per machine."
} >"$table"

cell_rows=()  # "op shards clients rows_per_s" lines, for the model
if wants rates; then
  {
    echo
    echo "### Pull and push rows/s: shards x client processes"
    echo
    echo "Each client process pulls (or pushes) 4096 keys a call, drawn evenly from 1M keys,"
    echo "dim 16, Adagrad, --durability=wal, ${seconds} s a cell; rows/s of all clients together."
    echo
    echo "| op | shards | 1 client | 2 clients | 4 clients | 8 clients |"
    echo "| --- | --- | --- | --- | --- | --- |"
  } >>"$table"
  cell=0
  for n in 1 2 4; do
    start_shards "$n" "$work/rates$n" --cache_mb=1024
    for op in push pull; do
      line="| $op | $n |"
      for clients in 1 2 4 8; do
        cell=$((cell + 1))
        outs=()
        client_pids=()
        for ((c = 0; c < clients; c++)); do
          out="$work/rates$n/$op-$clients-$c.md"
          outs+=("$out")
          if [ "$op" = pull ]; then roles=(--pullers=1 --pushers=0); else roles=(--pullers=0 --pushers=1); fi
          "$bin/tests/bench/load_bench" --servers="$servers" "${roles[@]}" --admins=0 \
            --keys=4096 --dim=16 --key_space=1000000 --seconds="$seconds" \
            --first_worker=$((100 + cell * 16 + c)) --seed=$((cell * 7919 + c)) \
            >"$out" 2>"$out.err" &
          client_pids+=($!)
        done
        for p in "${client_pids[@]}"; do
          if ! wait "$p"; then echo "load_bench failed:" >&2; cat "$work/rates$n/"*.err >&2; exit 1; fi
        done
        rows=$(awk -F'|' -v op="$op" '$2 ~ " "op" " {sum += $7} END {printf "%.0f", sum}' "${outs[@]}")
        cell_rows+=("$op $n $clients $rows")
        line="$line $(awk -v r="$rows" 'BEGIN {printf "%.2f M", r / 1e6}') |"
      done
      echo "$line" | tee -a "$table"
    done
    stop_all "$work/rates$n"
  done
fi

if wants training; then
  "$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" \
    --sample_seed=1 2>/dev/null
  {
    echo
    echo "### Training examples/s: shards x workers"
    echo
    echo "wide_deep on $train_lines generated lines split between the workers, --staleness=2,"
    echo "--durability=periodic; examples/s of all workers, start to end of the slowest."
    echo
    echo "| shards | 1 worker | 2 workers | 4 workers | 8 workers |"
    echo "| --- | --- | --- | --- | --- |"
  } >>"$table"
  for n in 1 2 4; do
    line="| $n |"
    for workers in 1 2 4 8; do
      run="$work/train$n-$workers"
      mkdir -p "$run"
      start_shards "$n" "$run" --durability=periodic
      worker_pids=()
      start=$(date +%s.%N)
      for ((w = 0; w < workers; w++)); do
        "$bin/worker/ps_worker" --servers="$servers" --worker_index=$w --num_workers="$workers" \
          --train="$work/train.tsv" --staleness=2 2>"$run/worker$w.log" &
        worker_pids+=($!)
      done
      for p in "${worker_pids[@]}"; do
        if ! wait "$p"; then echo "ps_worker failed:" >&2; tail -5 "$run"/worker*.log >&2; exit 1; fi
      done
      rate=$(awk -v l="$train_lines" -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.0f", l / (e - s)}')
      line="$line $rate |"
      stop_all "$run"
    done
    echo "$line" | tee -a "$table"
  done
fi

size_rows=()  # "millions rss_mib pull_rows push_rows"
if wants sizes; then
  {
    echo
    echo "### One shard against table size, --cache_mb=$cache_mb"
    echo
    echo "Dim-16 Adagrad rows stored by pushes of 4096 keys (1 client), then ${seconds} s of pulls"
    echo "and of pushes of 4096 power-law keys (1 client); the share of rows the hot tier"
    echo "answered; resident memory (VmRSS) after, and its peak; RocksDB's files on disk (the push"
    echo "log, which the write-back trims, not counted)."
    echo
    echo "| rows | stored at | pull rows/s | pull hot-tier hits | push rows/s | RSS MiB | peak RSS MiB | RocksDB MiB |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  } >>"$table"
  for millions in $sizes; do
    dir="$work/size$millions"
    mkdir -p "$dir"
    start_shards 1 "$dir" --cache_mb="$cache_mb"
    shard=${pids[-1]}
    rows=$((millions * 1000000))
    start=$(date +%s.%N)
    "$bin/tests/bench/serving_bench" --ps="$servers" --dim=16 --rows="$rows" --ops=push \
      --clients=1 --seconds=0.1 >/dev/null
    stored=$(awk -v r="$rows" -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f M/s", r / (e - s) / 1e6}')
    "$bin/tests/bench/serving_bench" --ps="$servers" --dim=16 --rows="$rows" --store_rows=false \
      --ops=pull,push --clients=1 --seconds="$seconds" --settle_s=10 >"$dir/bench.md"
    pull=$(awk -F'|' '$6 ~ /pull/ {print $7 * 1e6}' "$dir/bench.md")
    hits=$(awk -F'|' '$6 ~ /pull/ {gsub(/ /, "", $11); print $11}' "$dir/bench.md")
    push=$(awk -F'|' '$6 ~ /push/ {print $7 * 1e6}' "$dir/bench.md")
    rss=$(awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$shard/status")
    peak=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$shard/status")
    disk=$(du -sm --exclude=push_log "$dir/shard0" | awk '{print $1}')
    size_rows+=("$millions $rss $pull $push")
    printf "| %dM | %s | %.2f M | %s | %.2f M | %s | %s | %s |\n" "$millions" "$stored" \
      "$(awk -v v="$pull" 'BEGIN {print v / 1e6}')" "$hits" \
      "$(awk -v v="$push" 'BEGIN {print v / 1e6}')" "$rss" "$peak" "$disk" | tee -a "$table"
    stop_all "$dir"
  done
fi

# The model: what is per shard and what is shared, from the points above.
printf "%s\n" "${cell_rows[@]}" >"$work/cells.txt"
printf "%s\n" "${size_rows[@]}" >"$work/sizes.txt"
python3 - "$work/cells.txt" "$work/sizes.txt" "$cache_mb" >>"$table" <<'PY'
import sys
cells = {}
for line in open(sys.argv[1]):
    if line.strip():
        op, shards, clients, rows = line.split()
        cells[(op, int(shards), int(clients))] = float(rows)
sizes = [tuple(float(x) for x in line.split()) for line in open(sys.argv[2]) if line.strip()]
cache_mb = int(sys.argv[3])
print()
print("### What the points say about N machines")
print()
best = {op: max((v, k) for k, v in cells.items() if k[0] == op) for op in ("pull", "push")
        if any(k[0] == op for k in cells)}
for op, (rows, (_, shards, clients)) in best.items():
    one = max(v for k, v in cells.items() if k[0] == op and k[1] == 1)
    print(f"- **{op.capitalize()}**: one shard serves at most {one / 1e6:.2f} M rows/s here "
          f"(its best client count); the most on this machine was {rows / 1e6:.2f} M "
          f"({shards} shard{'s' if shards > 1 else ''}, {clients} client{'s' if clients > 1 else ''}). More shards on the same 2 cores split the "
          f"same CPU, so the per-shard figure is the one that multiplies: N shards on N "
          f"machines of this kind serve about N x {one / 1e6:.2f} M rows/s, as long as the "
          f"clients can send that much (each client here drove at most "
          f"{max(v for k, v in cells.items() if k[0] == op and k[2] == 1) / 1e6:.2f} M rows/s "
          f"alone) and the network carries it (dim 16 fp32: 64 bytes a row plus 8 of key).")
if sizes:
    first, last = sizes[0], sizes[-1]
    text = (f"- **Table size**: at --cache_mb={cache_mb} one shard held {first[0]:.0f}M rows in "
            f"{first[1]:.0f} MiB resident and {last[0]:.0f}M in {last[1]:.0f} MiB")
    if len(sizes) > 1:
        before = sizes[-2]
        per_row = (last[1] - before[1]) * 1048576 / ((last[0] - before[0]) * 1e6)
        text += (f": once the hot tier is full, about {per_row:.1f} bytes more a row (from "
                 f"{before[0]:.0f}M to {last[0]:.0f}M rows), RocksDB's bloom filters (10 bits a "
                 f"key) and indexes of the rows on disk, which it keeps outside its block cache")
    text += (f". Pulls slow as the table outgrows the hot tier: {first[2] / 1e6:.2f} M rows/s "
             f"at {first[0]:.0f}M rows, {last[2] / 1e6:.2f} M at {last[0]:.0f}M (a miss is a "
             f"RocksDB read); pushes {first[3] / 1e6:.2f} M and {last[3] / 1e6:.2f} M. Storing "
             f"rows never seen is the slow path (the \"stored at\" column): rows evicted to "
             f"RocksDB as they come, and its compactions. A table of T rows over N shards is "
             f"T/N rows a shard: the rate per shard is this table's row at T/N.")
    print(text)
print("- **Training**: a worker's compute is its own machine's, so examples/s grow with "
      "worker machines until the shards' push rows/s bind (examples/s x rows pushed an "
      "example); the scaling section turns the per-shard rates and a worker's compute rate "
      "into machine counts (tests/bench/capacity.py). Here, workers past the 2 cores only "
      "share them.")
print("- **Shared**: the slot map, the coordinator's clocks (one small call per worker step) "
      "and, under --etcd, etcd; none of them carries rows.")
PY
cat "$table"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md growth "$table"
echo "wrote the growth section of BENCHMARKS.md"
