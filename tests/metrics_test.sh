#!/usr/bin/env bash
# Prometheus metrics of a live shard and a live worker on loopback: scraped
# over HTTP while the worker trains and after, checked with promtool (Debian's
# prometheus package) and for the values training must have moved.
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v promtool >/dev/null || fail "promtool missing (deploy/setup.sh installs prometheus)"
scrape() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=10).read().decode())' "$1"; }
# value FILE METRIC-WITH-LABELS: the sample's value, or 0.
value() { awk -v m="$2" 'index($0, m " ") == 1 {print $NF; found = 1} END {if (!found) print 0}' "$1"; }
# wait_for FILE TEXT: up to 60 s (a loaded machine runs two tests at once).
wait_for() {
  for _ in $(seq 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no '$2' in $1: $(cat "$1")"
}

"$runfiles/worker/datagen/clicklog_gen" --out=train.tsv --lines=20000 --sample_seed=1 2>/dev/null
"$runfiles/worker/datagen/clicklog_gen" --out=test.tsv --lines=2000 --sample_seed=2 2>/dev/null
"$runfiles/server/ps_server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --data_dir="$work/shard" --durability=wal >server.out 2>server.log &
server=$!
trap 'kill $server $worker 2>/dev/null || true' EXIT
worker=
wait_for server.out "metrics on"
address=$(awk '/listening on/ {print $4}' server.out)
shard_metrics=$(awk '/metrics on/ {print $4}' server.out)

"$runfiles/worker/ps_worker" --servers="$address" --train=train.tsv --test=test.tsv \
  --batch_size=1000 --hidden=16 --embedding_dim=4 --slow_step_ms=150 --progress_every_s=1 \
  --metrics_listen=127.0.0.1:0 --metrics_out=metrics.json 2>worker.log &
worker=$!
wait_for worker.log "metrics on"
worker_metrics=$(sed -n 's/.*metrics on \([0-9.:]*\).*/\1/p' worker.log | head -1)
# Mid-training: some steps done, each stage timed.
for _ in $(seq 50); do
  scrape "$worker_metrics" >worker.prom
  [ "$(value worker.prom 'ps_worker_steps_total{worker="0"}')" != 0 ] && break
  sleep 0.2
done
promtool check metrics <worker.prom || fail "promtool rejects the worker's metrics"
steps=$(value worker.prom 'ps_worker_steps_total{worker="0"}')
awk -v s="$steps" 'BEGIN {exit !(s >= 1)}' || fail "no step counted: $(cat worker.prom)"
for stage in read wait pull compute push; do
  grep -q "^ps_worker_stage_seconds_count{worker=\"0\",stage=\"$stage\"}" worker.prom ||
    fail "no $stage stage in the worker's metrics"
done
grep -q '^ps_worker_pull_staleness_steps_count{worker="0"}' worker.prom || fail "no staleness histogram"
wait "$worker" || fail "ps_worker: $(tail -5 worker.log)"
worker=

# A checkpoint: its time shown for the overdue alert (deploy/monitoring).
"$runfiles/ops/ps_admin" --servers="$address" --dir="$work/ckpt" checkpoint >ckpt.log 2>&1 ||
  fail "ps_admin checkpoint: $(cat ckpt.log)"
# A refused call: counted under its method and code.
"$runfiles/ops/ps_admin" --servers="$address" --table=no.such.table --key=1 row \
  >/dev/null 2>&1 && fail "ps_admin row of an unknown table succeeded"
scrape "$shard_metrics" >shard.prom
promtool check metrics <shard.prom || fail "promtool rejects the shard's metrics"
# Calls under stock gRPC dashboards' names and labels.
pulls=$(value shard.prom 'grpc_server_handled_total{shard="0",grpc_code="OK",grpc_method="Pull",grpc_service="ps.ParameterServer",grpc_type="unary"}')
pushes=$(value shard.prom 'grpc_server_handled_total{shard="0",grpc_code="OK",grpc_method="Push",grpc_service="ps.ParameterServer",grpc_type="unary"}')
awk -v p="$pulls" -v q="$pushes" 'BEGIN {exit !(p >= 20 && q >= 20)}' ||
  fail "pulls $pulls, pushes $pushes counted: $(grep grpc_server_handled_total shard.prom)"
grep -q 'grpc_server_handling_seconds_count{shard="0",grpc_method="Push",grpc_service="ps.ParameterServer",grpc_type="unary"}' shard.prom ||
  fail "no push latency histogram"
refused=$(value shard.prom 'grpc_server_handled_total{shard="0",grpc_code="NOT_FOUND",grpc_method="GetRow",grpc_service="ps.Admin",grpc_type="unary"}')
[ "$refused" = 1 ] || fail "refused GetRow counted $refused times: $(grep GetRow shard.prom)"
rows=$(value shard.prom 'ps_rows_pushed_total{shard="0"}')
awk -v r="$rows" 'BEGIN {exit !(r > 1000)}' || fail "rows pushed: $rows"
# The process's own figures, from /proc, on both: the shard has used CPU
# and holds memory and files.
for file in shard.prom worker.prom; do
  cpu=$(value "$file" process_cpu_seconds_total)
  rss=$(value "$file" process_resident_memory_bytes)
  fds=$(value "$file" process_open_fds)
  start=$(value "$file" process_start_time_seconds)
  awk -v c="$cpu" -v r="$rss" -v f="$fds" -v s="$start" -v now="$(date +%s)" \
    'BEGIN {exit !(c > 0 && r > 1e6 && f >= 3 && s > now - 3600 && s <= now + 1)}' ||
    fail "$file: process cpu $cpu, rss $rss, fds $fds, start $start"
done
for series in ps_last_snapshot_timestamp_seconds ps_last_export_timestamp_seconds \
  ps_data_dir_available_bytes ps_data_dir_capacity_bytes; do
  grep -q "^$series{shard=\"0\"} " shard.prom || fail "no $series in the shard's metrics"
done
snapshot=$(value shard.prom 'ps_last_snapshot_timestamp_seconds{shard="0"}')
export_time=$(value shard.prom 'ps_last_export_timestamp_seconds{shard="0"}')
awk -v s="$snapshot" -v e="$export_time" -v now="$(date +%s)" \
  'BEGIN {exit !(s > now - 600 && s <= now + 1 && e == 0)}' ||
  fail "last snapshot at $snapshot, last export at $export_time (now $(date +%s))"
free=$(value shard.prom 'ps_data_dir_available_bytes{shard="0"}')
capacity=$(value shard.prom 'ps_data_dir_capacity_bytes{shard="0"}')
awk -v f="$free" -v c="$capacity" 'BEGIN {exit !(f > 0 && c >= f)}' ||
  fail "data dir: $free bytes free of $capacity"
log=$(value shard.prom 'ps_push_log_bytes{shard="0"}')
awk -v b="$log" 'BEGIN {exit !(b > 0)}' || fail "push-log bytes: $log"
# The build: every binary's --version, the shard's ps_build_info metric and
# ps_admin stats name the same commit.
version=$("$runfiles/server/ps_server" --version) || fail "ps_server --version exited non-zero"
commit=$(awk '{print $2}' <<<"$version")
[[ "$commit" =~ ^[0-9a-f]{12}(-dirty)?$ ]] || fail "ps_server --version: $version"
for binary in ops/ps_admin worker/ps_worker worker/datagen/clicklog_gen; do
  line=$("$runfiles/$binary" --version) || fail "$binary --version exited non-zero"
  [ "$line" = "$(basename "$binary") ${version#ps_server }" ] || fail "$binary --version: $line"
done
grep -q "^ps_build_info{shard=\"0\",commit=\"$commit\",built=\"[0-9TZ:-]*\"} 1" shard.prom ||
  fail "no ps_build_info for $commit: $(grep build_info shard.prom)"
"$runfiles/ops/ps_admin" --servers="$address" stats >stats.txt 2>&1 || fail "ps_admin stats: $(cat stats.txt)"
grep -q "^build $commit on shard 0$" stats.txt || fail "ps_admin stats: $(head -3 stats.txt)"
"$runfiles/ops/ps_admin" --servers="$address" --json stats >stats.json 2>&1
grep -q "\"build_commit\": *\"$commit\"" stats.json || fail "ps_admin --json stats: $(head -c 300 stats.json)"
echo "shard: $pulls pulls and $pushes pushes, $rows rows pushed; worker: $steps steps at the mid-run scrape; $version"
