#!/usr/bin/env bash
# Resharding while training, under --etcd (Debian's etcd on loopback): two
# workers train wide_deep asynchronously on a job of 2 shards. Mid-training
# a third shard joins the running job (ps_server --shard_index=2), `ps_admin
# rebalance` gives it a third of the slots, then `ps_admin drain-shard
# --shard=2` empties it, it leaves the job (2 shards again) and stops. A
# last run kills the coordinator's shard with -9. Reported: each move's time
# and rows/s, the rows pushed during it and copied again (and in how many
# rounds), the backlog copied with its pushes paused and how long that pause
# lasted, the shards' p50/p99 Pull and Push latency over the 3 s before the
# rebalance and during it (`ps_admin stats`), the pushes refused while
# paused (retried by the workers), and the final test AUC (six passes over
# the training lines, so that the moves land mid-training) against the same
# run without resharding, each over --rounds runs (asynchronous training
# differs from run to run: the spread of the runs without resharding is the
# noise the difference is measured against). Prints the tables and rewrites
# the "reshard" section of BENCHMARKS.md.
#
# --pause_workers: the workers are stopped (SIGSTOP, under a lease long
# enough) from the join to the leave, so that the moves copy rows no push
# changes: an AUC gap that remains is the moves', not the staleness of
# training during them.
#
# --workers N --staleness S: N workers (2) at --staleness=S (async). One
# worker at --staleness=0 trains the same way in every run, bit for bit:
# then a move that lost, doubled or misplaced any update shows as a
# different AUC and log loss. --no_takeover leaves out the coordinator's
# kill. Other than the defaults, the table goes to a section of its own.
#
#   tests/bench/reshard_bench.sh [--train_lines 400000] [--test_lines 100000]
#                                [--rounds 3] [--pause_workers] [--workers 2]
#                                [--staleness async] [--no_takeover]
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
. deploy/cluster_lib.sh
train_lines=400000
test_lines=100000
rounds=3
pause_workers=0
workers=2
staleness=async
takeover=1
while [ $# -gt 0 ]; do
  case "$1" in
    --train_lines) train_lines=$2; shift 2 ;;
    --test_lines) test_lines=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --pause_workers) pause_workers=1; shift ;;
    --workers) workers=$2; shift 2 ;;
    --staleness) staleness=$2; shift 2 ;;
    --no_takeover) takeover=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bazel build //server:ps_server //worker:ps_worker //worker/datagen:clicklog_gen \
  //ops:ps_admin 2>&1 | tail -1
work=$(mktemp -d /tmp/reshard_bench.XXXX)
pids=()
KEEP=${KEEP:-}
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [ -n "$KEEP" ] || rm -rf "$work"; }
trap cleanup EXIT
bin=bazel-bin
metric() { grep -o "\"$2\": [-0-9.e]*" "$1" | head -1 | awk '{print $2}'; }
"$bin/worker/datagen/clicklog_gen" --out="$work/train.tsv" --lines="$train_lines" --sample_seed=1 2>/dev/null
"$bin/worker/datagen/clicklog_gen" --out="$work/test.tsv" --lines="$test_lines" --sample_seed=2 2>/dev/null

# The Push and Pull p50/p99 (ms) and Push errors of `ps_admin stats --json`.
latencies() {
  python3 - "$1" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
out = {}
for m in stats["methods"]:
    name = m["method"].rsplit("/", 1)[-1]
    if name in ("Pull", "Push"):
        out[name] = (1000 * m["p50_seconds"], 1000 * m["p99_seconds"], m["errors"])
pull, push = out.get("Pull", (0, 0, 0)), out.get("Push", (0, 0, 0))
print(f"{pull[0]:.2f} {pull[1]:.2f} {push[0]:.2f} {push[1]:.2f} {push[2]}")
PY
}

# One etcd for every run (each run is a job of its own).
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
client_port=${ports% *} peer_port=${ports#* }
etcd --name=bench --data-dir="$work/etcd" \
  --listen-client-urls=http://127.0.0.1:$client_port \
  --advertise-client-urls=http://127.0.0.1:$client_port \
  --listen-peer-urls=http://127.0.0.1:$peer_port \
  --initial-advertise-peer-urls=http://127.0.0.1:$peer_port \
  --initial-cluster=bench=http://127.0.0.1:$peer_port >"$work/etcd.log" 2>&1 &
pids+=($!)
until (exec 3<>/dev/tcp/127.0.0.1/$client_port) 2>/dev/null; do sleep 0.1; done

# run NAME MOVES(0|1): trains on a 2-shard job NAME; prints "auc
# examples/s", and with MOVES (a shard joins, rebalance, drain-shard, it
# leaves) the moves' lines into $work/NAME/moves.
run() {
  local name=$1 moves=$2 dir="$work/$1" server_pids=() worker_pids=()
  mkdir -p "$dir"
  local etcd_flags=(--etcd=127.0.0.1:$client_port --job="$name")
  for s in 0 1; do
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=$s --num_shards=2 \
      "${etcd_flags[@]}" --etcd_lease_s=2 --data_dir="$dir/shard$s" \
      >"$dir/shard$s.out" 2>"$dir/shard$s.log" &
    server_pids+=($!); pids+=($!)
  done
  for s in 0 1; do ps_address "$dir/shard$s.out" >/dev/null; done
  local admin=("$bin/ops/ps_admin" "${etcd_flags[@]}")
  local lease=()
  [ "$pause_workers" = 0 ] || lease=(--lease_ms=600000)
  for w in $(seq 0 $((workers - 1))); do
    "$bin/worker/ps_worker" "${etcd_flags[@]}" --worker_index=$w --num_workers="$workers" \
      --train="$work/train.tsv" --test="$work/test.tsv" --batch_size=4096 \
      --staleness="$staleness" --epochs=6 "${lease[@]}" --metrics_out="$dir/worker$w.json" \
      2>"$dir/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  if [ "$moves" = 1 ]; then
    # Once the workers train (six passes: the moves land mid-training).
    while ! grep -q "examples |" "$dir/worker0.log" 2>/dev/null; do sleep 0.5; done
    "${admin[@]}" stats --json --interval_s=3 >"$dir/before.json"
    if [ "$pause_workers" = 1 ]; then
      for p in "${worker_pids[@]}"; do kill -STOP "$p" 2>/dev/null || true; done
    fi
    # The third shard joins the running job, owning no slot.
    "$bin/server/ps_server" --listen=127.0.0.1:0 --shard_index=2 --num_shards=2 \
      "${etcd_flags[@]}" --etcd_lease_s=2 --data_dir="$dir/shard2" \
      >"$dir/shard2.out" 2>"$dir/shard2.log" &
    local joining=$!; pids+=($!)
    until grep -q "joined the job as shard 2" "$dir/shard2.log" 2>/dev/null; do sleep 0.1; done
    "${admin[@]}" stats --json --interval_s=3 >"$dir/during.json" &
    local sampler=$!
    "${admin[@]}" rebalance --json >"$dir/rebalance.json"
    wait "$sampler"
    sleep 3
    "${admin[@]}" drain-shard --shard=2 --json >"$dir/drain.json"
    # It left the job (2 shards again): it stops, and training goes on.
    kill "$joining"; wait "$joining" || true
    if [ "$pause_workers" = 1 ]; then
      for p in "${worker_pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    fi
    echo "before $(latencies "$dir/before.json")" >"$dir/moves"
    echo "during $(latencies "$dir/during.json")" >>"$dir/moves"
    python3 - "$dir/rebalance.json" "$dir/drain.json" >>"$dir/moves" <<'PY'
import json, sys
for path in sys.argv[1:]:
    summary = json.load(open(path))
    for m in summary["moves"]:
        rate = m["rows"] / m["seconds"] if m["seconds"] else 0
        sources = m.get("sources", [])
        changed = sum(x["changed_rows"] for x in sources)
        rounds = sum(x["rounds"] for x in sources)
        backlog = sum(x["backlog_rows"] for x in sources)
        paused = max([x["paused_seconds"] for x in sources] or [0])
        print(f"move {m['first_slot']}-{m['last_slot']} {m['from_shard']}->{m['to_shard']}"
              f" {m['rows']} {m['seconds']:.2f} {rate:.0f} {changed} {rounds} {backlog}"
              f" {paused:.3f}")
    if "num_shards" in summary:
        print(f"left {summary['num_shards']} {summary['epoch']}")
PY
  fi
  for p in "${worker_pids[@]}"; do wait "$p"; done
  for p in "${server_pids[@]}"; do kill "$p"; wait "$p" || true; done
  local rate=0
  for w in $(seq 0 $((workers - 1))); do
    rate=$(awk -v a="$rate" -v b="$(metric "$dir/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
  done
  echo "$(metric "$dir/worker0.json" test_auc) $rate $(metric "$dir/worker0.json" test_logloss)"
}

# takeover: the same training on 3 shards (a 2 s shard lease); once the workers train, the coordinator's shard is
# killed with -9 and restarted on its port and data dir. Prints "auc
# examples/s takeover_seconds".
takeover() {
  local dir="$work/takeover" servers=() server_pids=() worker_pids=()
  mkdir -p "$dir"
  local etcd_flags=(--etcd=127.0.0.1:$client_port --job=takeover)
  shard() {  # shard INDEX LISTEN
    "$bin/server/ps_server" --listen="$2" --shard_index=$1 --num_shards=3 \
      "${etcd_flags[@]}" --etcd_lease_s=2 --data_dir="$dir/shard$1" \
      >"$dir/shard$1.out" 2>>"$dir/shard$1.log" &
    server_pids[$1]=$!; pids+=($!)
  }
  for s in 0 1 2; do shard $s 127.0.0.1:0; done
  for s in 0 1 2; do servers[$s]=$(ps_address "$dir/shard$s.out"); done
  local admin=("$bin/ops/ps_admin" "${etcd_flags[@]}")
  for w in 0 1; do
    "$bin/worker/ps_worker" "${etcd_flags[@]}" --worker_index=$w --num_workers=2 \
      --train="$work/train.tsv" --test="$work/test.tsv" --batch_size=4096 \
      --staleness=async --epochs=6 --metrics_out="$dir/worker$w.json" 2>"$dir/worker$w.log" &
    worker_pids+=($!); pids+=($!)
  done
  while ! grep -q "examples |" "$dir/worker0.log" 2>/dev/null; do sleep 0.5; done
  sleep 3
  local coordinator
  coordinator=$("${admin[@]}" clocks --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["coordinator"])')
  local killed=-1
  for s in 0 1 2; do [ "${servers[$s]}" = "$coordinator" ] && killed=$s; done
  [ "$killed" -ge 0 ]
  local start; start=$(date +%s.%N)
  kill -9 "${server_pids[$killed]}"; wait "${server_pids[$killed]}" 2>/dev/null || true
  # Until another shard says it was elected (ps_admin would wait for the
  # killed shard to be registered again).
  elected_lines() { cat "$dir"/shard*.log | grep -c "the job's clock coordinator" || true; }
  local before; before=$(elected_lines)
  while [ "$(elected_lines)" = "$before" ]; do sleep 0.05; done
  local elected; elected=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
  shard "$killed" "${servers[$killed]}"
  ps_address "$dir/shard$killed.out" >/dev/null
  for p in "${worker_pids[@]}"; do wait "$p"; done
  for s in 0 1 2; do kill "${server_pids[$s]}"; wait "${server_pids[$s]}" || true; done
  local rate=0
  for w in 0 1; do
    rate=$(awk -v a="$rate" -v b="$(metric "$dir/worker$w.json" examples_per_sec)" 'BEGIN {print a + b}')
  done
  echo "$(metric "$dir/worker0.json" test_auc) $rate $elected $(metric "$dir/worker0.json" test_logloss)"
}

# An assignment fails with its command substitution (a failed admin command
# inside run stops the bench). Rounds alternate, so that a machine slowing
# down over the bench weighs on both alike.
still_aucs=() moved_aucs=() still_rates=() moved_rates=() still_losses=() moved_losses=()
for r in $(seq 1 "$rounds"); do
  still=$(run "still$r" 0)
  read -r auc rate loss <<<"$still"; still_aucs+=("$auc"); still_rates+=("$rate"); still_losses+=("$loss")
  moved=$(run "moved$r" 1)
  read -r auc rate loss <<<"$moved"; moved_aucs+=("$auc"); moved_rates+=("$rate"); moved_losses+=("$loss")
  echo "round $r: AUC $auc with resharding, ${still_aucs[-1]} without" >&2
done
if [ "$takeover" = 1 ]; then
  taken_over=$(takeover)
  read -r takeover_auc takeover_rate takeover_seconds takeover_loss <<<"$taken_over"
  takeover_auc=$(printf '%.6f' "$takeover_auc") takeover_loss=$(printf '%.6f' "$takeover_loss")
  takeover_rate=$(printf '%.0f' "$takeover_rate")
fi
# "mean min max" of the numbers given.
summary() { printf '%s\n' "$@" | awk 'NR == 1 {lo = hi = $1} {s += $1; if ($1 < lo) lo = $1; if ($1 > hi) hi = $1} END {printf "%.6f %.6f %.6f", s / NR, lo, hi}'; }
read -r still_auc still_lo still_hi <<<"$(summary "${still_aucs[@]}")"
read -r moved_auc moved_lo moved_hi <<<"$(summary "${moved_aucs[@]}")"
read -r still_loss still_loss_lo still_loss_hi <<<"$(summary "${still_losses[@]}")"
read -r moved_loss moved_loss_lo moved_loss_hi <<<"$(summary "${moved_losses[@]}")"
read -r still_rate _ _ <<<"$(summary "${still_rates[@]}")"
read -r moved_rate _ _ <<<"$(summary "${moved_rates[@]}")"
still_rate=$(printf '%.0f' "$still_rate") moved_rate=$(printf '%.0f' "$moved_rate")
table="$work/table.md"
{
section=reshard heading="Resharding while training"
if [ "$workers" != 2 ] || [ "$staleness" != async ] || [ "$pause_workers" = 1 ] || [ "$takeover" = 0 ]; then
  section="reshard-$workers-workers-staleness-$staleness"
  heading="$heading: $workers worker(s) at --staleness=$staleness"
  [ "$pause_workers" = 0 ] || { section="$section-paused"; heading="$heading, paused during the moves"; }
  [ "$takeover" = 1 ] || section="$section-no-takeover"
fi
echo "## $heading"
echo
echo "$(date -u +%Y-%m-%d), $(nproc) cores; under etcd, a job of 2 shards + $workers workers (--staleness=$staleness)"
echo "on one machine, wide_deep, $train_lines training and $test_lines test lines (6 passes),"
echo "batch 4096. Mid-training: a third shard joins, rebalance gives it a third of the slots,"
echo "then drain-shard 2 empties it and it leaves the job. $rounds rounds of each run; the"
echo "moves and latencies below are the last round's."
[ "$pause_workers" = 0 ] || echo "The workers were stopped from the join to the leave (--pause_workers)."
echo
echo "| move | slots | snapshot rows | seconds | rows/s | changed rows (rounds) | backlog rows | pushes paused (s) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
grep '^move' "$work/moved$rounds/moves" | while read -r _ slots from_to rows seconds rate changed rounds backlog paused; do
  echo "| $from_to | $slots | $rows | $seconds | $rate | $changed ($rounds) | $backlog | $paused |"
done
echo
read -r _ left_shards left_epoch <<<"$(grep '^left' "$work/moved$rounds/moves" || echo "left ? ?")"
echo "After drain-shard 2 the job had $left_shards shards (slot map epoch $left_epoch)."
echo
echo "| shards' latency (ms) | Pull p50 | Pull p99 | Push p50 | Push p99 | Push refused |"
echo "| --- | --- | --- | --- | --- | --- |"
for phase in before during; do
  read -r _ a b c d e <<<"$(grep "^$phase" "$work/moved$rounds/moves")"
  echo "| $phase the rebalance (3 s) | $a | $b | $c | $d | $e |"
done
echo
echo "| run | test AUC, mean of $rounds (min-max) | test log loss, mean (min-max) | examples/s (all workers, mean) |"
echo "| --- | --- | --- | --- |"
echo "| no resharding | $still_auc ($still_lo-$still_hi) | $still_loss ($still_loss_lo-$still_loss_hi) | $still_rate |"
echo "| a shard joins, rebalance, drain-shard, it leaves | $moved_auc ($moved_lo-$moved_hi) | $moved_loss ($moved_loss_lo-$moved_loss_hi) | $moved_rate |"
[ "$takeover" = 0 ] || echo "| 3 shards + 2 async workers, the coordinator's shard killed (-9) and restarted | $takeover_auc | $takeover_loss | $takeover_rate |"
echo
goal="goal: within 0.003"
[ "$workers" != 1 ] || [ "$staleness" != 0 ] || goal="one synchronous worker: the same bits, so 0 exactly"
echo "AUC difference of the means: $(awk -v a="$moved_auc" -v b="$still_auc" 'BEGIN {printf "%+.6f", a - b}') ($goal);"
echo "spread of the runs without resharding: $(awk -v a="$still_hi" -v b="$still_lo" 'BEGIN {printf "%.4f", a - b}')."
if [ "$takeover" = 1 ]; then
  echo
  echo "Coordinator takeover (\`--etcd_lease_s=2\`): another shard elected $takeover_seconds s after the kill"
  echo "(its log says so); training finished on the new coordinator."
fi
} >"$table"
cat "$table"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md "$section" "$table"
