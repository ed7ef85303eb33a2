#!/usr/bin/env bash
# The online loop: drifting hourly click logs followed by ps_worker, worker 0
# writing delta exports, ps_serve serving them. Per file, the AUC of a
# frozen model, a base per four files and the served deltas beside
# progressive validation; freshness; delta and base sizes; ps_serve's
# Predict and Lookup rates beside ps_predict and training. Prints the tables
# and rewrites the "online" section of BENCHMARKS.md (plot:
# docs/online_bench.png). See tests/bench/online_bench.py.
#
#   tests/bench/online_bench.sh [--files 12] [--lines_per_file 40000]
#                               [--drift 5] [--export_every 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/setup.sh >/dev/null
bazel build //server:ps_server //server:ps_serve //worker:ps_worker \
  //worker/datagen:clicklog_gen //worker/predict:ps_predict //ops:ps_admin \
  //tests/bench:serve_load 2>&1 | tail -1
section=$(mktemp)
trap 'rm -f "$section"' EXIT
/usr/bin/python3 tests/bench/online_bench.py --section_out="$section" "$@"
/usr/bin/python3 tests/bench/update_benchmarks_md.py BENCHMARKS.md online "$section"
echo "wrote the online section of BENCHMARKS.md"
