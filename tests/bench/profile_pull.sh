#!/usr/bin/env bash
# Where a pull's (or a push's) time goes: one ps_server (a 500000-row table
# in the hot tier) and serving_bench pulling (pushing) batches of 4096
# power-law keys,
# sampled machine-wide with `perf record`; prints, per side (shard, client),
# the share of all CPU time in each stage: the store's lookups, memcpy,
# protobuf, gRPC, the kernel's socket copies, page faults, and the rest of
# the kernel (syscalls, TCP, scheduling). The shard's write-back of the
# stored rows is let finish first (--settle_s), so it does not show.
#
#   tests/bench/profile_pull.sh [--op pull|push] [--clients 1] [--dim 16] [--seconds 5]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
op=pull
clients=1
dim=16
seconds=5
settle=20
while [ $# -gt 0 ]; do
  case "$1" in
    --op) op=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //tests/bench:serving_bench 2>&1 | tail -1
work=$(mktemp -d /tmp/profile_pull.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

bazel-bin/server/ps_server --listen=127.0.0.1:0 --data_dir="$work/shard" --cache_mb=1024 \
  >"$work/shard.out" 2>"$work/shard.log" &
server=$!
pids+=($server)
address=$(ps_address "$work/shard.out")
# Measures for settle + preload + 2 x seconds; perf samples the middle.
bazel-bin/tests/bench/serving_bench --ps="$address" --dim="$dim" --rows=500000 \
  --seconds=$((2 * seconds + 8)) --clients="$clients" --ops="$op" --settle_s="$settle" \
  >"$work/bench.md" &
bench=$!
pids+=($bench)
sleep $((settle + 8))
perf record -a -F 999 -g -o "$work/perf.data" -- sleep "$seconds" >/dev/null 2>&1
wait "$bench"
echo "| side | stage | share of all CPU time |"
echo "| --- | --- | --- |"
for side in shard client; do
  pid=$server
  [ "$side" = client ] && pid=$bench
  perf report -i "$work/perf.data" --no-children --pid="$pid" --sort dso,sym --stdio -g none \
    2>/dev/null | grep -v "^#" | grep "%" | sed "s/^/$side /"
done | python3 -c '
import collections, re, sys
def stage(dso, sym):
    if re.search(r"RowCache|EmbeddingStore|GroupByStripe", sym): return "store: lookups and grouping"
    if "memmove" in sym or "memcpy" in sym: return "memcpy"
    if "memset" in sym: return "memset"
    if "protobuf" in dso: return "protobuf"
    if "grpc" in dso or "gpr" in dso: return "gRPC"
    if "kernel" in dso:
        if re.search(r"copy_(to|from)_iter|copy_user", sym): return "kernel: socket copies"
        if re.search(r"page_fault|clear_page|anonymous|handle_mm|zap|unmap|mmap", sym):
            return "kernel: page faults, mmap"
        return "kernel: syscalls, TCP, scheduling"
    if re.search(r"malloc|free|_int_", sym): return "malloc"
    return "other"
shares = collections.defaultdict(float)
for line in sys.stdin:
    m = re.match(r"(\S+)\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
    if m:
        shares[(m.group(1), stage(m.group(3), m.group(4)))] += float(m.group(2))
for (side, name), share in sorted(shares.items(), key=lambda kv: (kv[0][0] != "shard", -kv[1])):
    if share >= 0.3:
        print(f"| {side} | {name} | {share:.1f}% |")
'
echo
echo "serving_bench over the whole run (the profile is its middle $seconds s):"
cat "$work/bench.md"
