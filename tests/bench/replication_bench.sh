#!/usr/bin/env bash
# Replication (issue 28): what a replica costs its primary, side by side in
# one run. (1) Push rows/s (serving_bench --ops=push: batches of 4096
# power-law keys) against a primary with no replica, an async replica and a
# sync one, dims 16 and 64, 1 and 4 clients, in alternating rounds; each
# ratio is to no replica within its round. (2) A new replica of a primary
# holding --rows rows of dim 64: the copy's bytes/s and the time from its
# start until it is in sync, with one client pushing throughout. (3) 1 shard
# + 1 worker training (staleness 1) with no replica, async and sync. (4)
# Failover under etcd: tests/failover_test's kill -9 of a sync primary
# (2 s lease) while two clients push, five runs: how long after the kill
# the pushes went on, on the promoted replica.
# Every process on this one machine: the replica takes CPU from the primary,
# where deployed it has a machine of its own.
# Prints the tables and rewrites the "replication" section of BENCHMARKS.md.
#
#   tests/bench/replication_bench.sh [--rounds 3] [--rows 300000] [--seconds 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
rounds=3
rows=300000
seconds=2
train_lines=300000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bash deploy/setup.sh --bench >/dev/null
bazel build //server:ps_server //ops:ps_admin //worker:ps_worker //worker/datagen:clicklog_gen \
  //tests/bench:serving_bench 2>&1 | tail -1
bin=bazel-bin
work=$(mktemp -d /tmp/replication_bench.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
results="$work/results.tsv"

# start_cluster NAME MODE: a primary (and for async/sync a replica); sets
# $primary, $primary_pid, $replica_pid.
start_cluster() {
  local name=$1 mode=$2
  rm -rf "$work/$name"; mkdir -p "$work/$name"
  "$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/$name/primary" --cache_mb=512 \
    --replication="${mode/none/async}" >"$work/$name/primary.out" 2>"$work/$name/primary.log" &
  primary_pid=$!; pids+=($!)
  primary=$(ps_address "$work/$name/primary.out")
  replica_pid=""
  if [ "$mode" != none ]; then
    "$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/$name/replica" --cache_mb=512 \
      --replica_of="$primary" >"$work/$name/replica.out" 2>"$work/$name/replica.log" &
    replica_pid=$!; pids+=($!)
    ps_address "$work/$name/replica.out" >/dev/null
  fi
}
stop_cluster() {
  for p in $primary_pid $replica_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work/$1"
}
in_sync() {
  "$bin/ops/ps_admin" --servers="$primary" --json stats 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["shards"][0].get("replicas_in_sync", 0))'
}

# (1) push rows/s.
for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds" >&2
  for dim in 16 64; do
    for mode in none async sync; do
      start_cluster "push_${dim}_$mode" $mode
      "$bin/tests/bench/serving_bench" --ps="$primary" --dim=$dim --ops=push --clients=1,4 \
        --seconds="$seconds" --rows="$rows" --label=$mode 2>/dev/null |
        awk -v r=$round -v m=$mode -F'|' '/^\| ps_server/ {gsub(/ /, "", $0); print r "\tpush\t" $4 "\t" $5 "\t" m "\t" $7}' |
        tee -a "$results"
      stop_cluster "push_${dim}_$mode"
    done
  done
done

# (2) a new replica of a loaded primary, one client pushing throughout.
start_cluster catchup none
"$bin/tests/bench/serving_bench" --ps="$primary" --dim=64 --ops=push --clients=1 \
  --seconds=1 --rows="$rows" >/dev/null 2>&1
"$bin/tests/bench/serving_bench" --ps="$primary" --dim=64 --ops=push --clients=1 \
  --seconds=30 --rows="$rows" --store_rows=false >/dev/null 2>&1 &
load_pid=$!; pids+=($!)
sleep 2
began=$(date +%s.%N)
"$bin/server/ps_server" --listen=127.0.0.1:0 --data_dir="$work/catchup/replica" --cache_mb=512 \
  --replica_of="$primary" >"$work/catchup/replica.out" 2>"$work/catchup/replica.log" &
replica_pid=$!; pids+=($!)
until [ "$(in_sync)" = 1 ]; do sleep 0.05; done
synced=$(date +%s.%N)
copied=$(grep -o "from $primary: [0-9]* bytes in [^;]*" "$work/catchup/replica.log" | head -1)
kill $load_pid 2>/dev/null || true; wait $load_pid 2>/dev/null || true
printf "catchup\t%s\t%s\n" "$(awk -v a="$began" -v b="$synced" 'BEGIN {print b - a}')" "$copied" | tee -a "$results"
stop_cluster catchup

# (3) training.
"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines=$train_lines --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines=50000 --sample_seed=2 2>/dev/null
for ((round = 1; round <= rounds; round++)); do
  for mode in none async sync; do
    start_cluster "train_$mode" $mode
    "$bin/worker/ps_worker" --servers="$primary" --train="$work/train.tsv" --test="$work/test.tsv" \
      --model=wide_deep --wide_optimizer=adagrad --staleness=1 \
      --metrics_out="$work/train_$mode.json" 2>"$work/train_$mode.log"
    printf "%s\ttrain\t-\t-\t%s\t%s\n" $round $mode \
      "$(grep -o '"examples_per_sec": [0-9.]*' "$work/train_$mode.json" | awk '{print $2}')" | tee -a "$results"
    stop_cluster "train_$mode"
  done
done

# (4) failover.
bazel test //tests:failover_test --test_filter='*SyncLoses*' --runs_per_test=5 \
  --nocache_test_results --test_output=all 2>&1 |
  grep -o "failover: pushes went on [0-9.]*s" | awk '{print "failover\t" $5}' |
  sed 's/s$//' | tee -a "$results"

table="$work/table.md"
/usr/bin/python3 - "$results" "$rows" "$seconds" "$(date -u +%Y-%m-%d)" "$(nproc)" >"$table" <<'PY'
import statistics, sys
results, rows, seconds, day, cores = sys.argv[1:]
push, train, catchup, failover = {}, {}, None, []
for line in open(results):
    f = line.rstrip("\n").split("\t")
    if f[0] == "failover":
        failover.append(float(f[1]))
    elif f[0] == "catchup":
        catchup = f[1:]
    elif f[1] == "push":
        push.setdefault((int(f[2]), int(f[3]), f[4]), {})[int(f[0])] = float(f[5])
    else:
        train.setdefault(f[4], {})[int(f[0])] = float(f[5])

def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"

print("## Replication: what a replica costs its primary")
print()
print(f"{day}, {cores} cores, every process on this one machine (a deployed replica has its own).")
print("`tests/bench/replication_bench.sh`: a primary with no replica, an async replica")
print("(`--replication=async`, lag bound 100000 entries) and a sync one; push rows/s of")
print(f"serving_bench (batches of 4096 power-law keys over {rows} rows, {seconds} s per cell),")
print("in alternating rounds, median (range); each ratio is to no replica within its round.")
print()
print("| dim | clients | no replica M rows/s | async M rows/s | async / none | sync M rows/s | sync / none |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for dim in (16, 64):
    for clients in (1, 4):
        none = push.get((dim, clients, "none"), {})
        cells = [spread(list(none.values()), "{:.2f}")]
        for mode in ("async", "sync"):
            got = push.get((dim, clients, mode), {})
            ratios = [got[r] / none[r] for r in got if r in none and none[r] > 0]
            cells += [spread(list(got.values()), "{:.2f}"), spread(ratios, "{:.2f}") + "x"]
        print(f"| {dim} | {clients} | " + " | ".join(cells) + " |")
print()
if catchup:
    print(f"A new replica of a primary holding {rows} rows of dim 64, one client pushing")
    print(f"throughout: in sync {float(catchup[0]):.1f} s after it started (the copy: {catchup[1] or 'see its log'}).")
    print()
print("1 shard + 1 worker training wide_deep (staleness 1, 300000 lines), examples/s:")
print()
print("| replica | examples/s | / no replica |")
print("| --- | --- | --- |")
for mode in ("none", "async", "sync"):
    got = train.get(mode, {})
    ratios = [got[r] / train["none"][r] for r in got if r in train.get("none", {})]
    print(f"| {mode} | {spread(list(got.values()), '{:.0f}')} | {spread(ratios, '{:.2f}')}x |")
if failover:
    print()
    print("Failover under etcd (`tests/failover_test`, --etcd_lease_s=2, --replication=sync, two")
    print("clients pushing): after kill -9 of the primary (its data dir deleted), pushes went on")
    print(f"{spread(failover, '{:.1f}')} s later on the promoted replica ({len(failover)} runs: the lease")
    print("running out, the replica's 250 ms watch, the clients' 2 s patience), nothing lost or doubled.")
PY
cat "$table"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md replication "$table"
echo "wrote the replication section of BENCHMARKS.md"
