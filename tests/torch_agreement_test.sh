#!/usr/bin/env bash
# The model graph against an independent PyTorch build of the same spec
# (tests/bench/torch_model.py, Debian's python3-torch): given the same
# parameters and batch, one step's loss and every gradient (each table's
# rows, each dense tensor) agree to 1e-4 relative, for each built-in and for
# tests/testdata/agreement_spec.pbtxt (two tables of different dims, shared
# tables, a bucketized column, MAX and MEAN pooling, a low-rank cross);
# din on lines with recent items (attention pooling, masked), and mmoe on
# lines of two labels, some unknown, weighted (down-sampled negatives).
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$runfiles"
protoc --python_out="$work" proto/model_spec.proto proto/ps.proto || exit 1
failures=0
agree() {  # agree WHAT DUMP_FLAGS...
  local what=$1
  shift
  if ! worker/graph_step_dump "$@" --out="$work/$what.json" 2>"$work/$what.log"; then
    echo "FAIL: $what: graph_step_dump: $(tail -2 "$work/$what.log")" >&2
    failures=$((failures + 1))
    return
  fi
  if ! /usr/bin/python3 tests/bench/torch_model.py --check="$work/$what.json" \
      --proto_dir="$work" >"$work/$what.txt" 2>&1; then
    echo "FAIL: $what disagrees with PyTorch:" >&2
    cat "$work/$what.txt" >&2
    failures=$((failures + 1))
    return
  fi
  echo "$what: agrees ($(wc -l <"$work/$what.txt") tensors and the loss)"
}
worker/datagen/clicklog_gen --out="$work/criteo.tsv" --lines=40 --sample_seed=3 \
  >/dev/null 2>&1 || exit 1
worker/datagen/clicklog_gen --out="$work/sequences.tsv" --lines=40 --sample_seed=3 \
  --sequence_length=6 >/dev/null 2>&1 || exit 1
# Two labels and a weight; every third line's conversion unknown (empty).
worker/datagen/clicklog_gen --out="$work/tasks_full.tsv" --lines=40 --sample_seed=3 \
  --tasks=2 --negative_keep_rate=0.5 \
  --columns=label:click,label:convert,weight,dense*13,cat*26 >/dev/null 2>&1 || exit 1
awk -F'\t' 'BEGIN { OFS = "\t" } NR % 3 == 0 { $2 = "" } { print }' \
  "$work/tasks_full.tsv" >"$work/tasks.tsv"
agree din --model=din --hidden=12,6 --embedding_dim=4 \
  --columns=label,dense*13,cat*26,seq:0 --lines="$work/sequences.tsv"
agree mmoe --model=mmoe --hidden=8,5 --embedding_dim=4 \
  --columns=label:click,label:convert,weight,dense*13,cat*26 --lines="$work/tasks.tsv"
for model in lr wide_deep deepfm dcn_v2 dlrm; do
  agree "$model" --model="$model" --hidden=12,6 --embedding_dim=4 \
    --lines="$work/criteo.tsv"
done
agree spec --model_spec=tests/testdata/agreement_spec.pbtxt --format=csv \
  --columns=label,dense*3,cat,cat,multi,multi --lines=tests/testdata/agreement_lines.csv
exit $((failures > 0))
