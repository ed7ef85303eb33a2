#!/usr/bin/env bash
# README.md's "By hand" commands, run as written: the block between "By
# hand" and its closing fence, with `deploy/setup.sh` and `bazel build` left
# out (this runs inside Bazel; the build line must name every binary the
# block calls), `bazel-bin/` read from this test's runfiles, and `lines=`
# set to 20000 instead of a million. Then every worker it counts wrote its
# summary, the export has its manifest and ps_predict scored every test line.
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

block=$(awk '/^By hand/ {found = 1} found && /^```sh$/ {inside = 1; next}
             inside && /^```$/ {exit} inside {print}' "$runfiles/README.md")
[ -n "$block" ] || fail "no By hand block in README.md"
# Continuation lines joined, so that each command is one line.
commands=$(sed -e ':join' -e '/\\$/N; s/\\\n//; tjoin' <<<"$block")
build=$(grep '^bazel build ' <<<"$commands") || fail "the block builds nothing"
for used in $(grep -o 'bazel-bin/[a-z_/]*' <<<"$commands" | sort -u); do
  target="//$(dirname "${used#bazel-bin/}"):$(basename "$used")"
  grep -q -- "$target" <<<"$build" || fail "the block calls $used but does not build $target"
done
workers=$(grep -o -- '--num_workers=[0-9]*' <<<"$commands" | head -1 | cut -d= -f2)
[ -n "$workers" ] || fail "the block starts no worker"

script=$(grep -v '^deploy/setup.sh\|^bazel build ' <<<"$commands" |
  sed "s|^lines=[0-9]*|lines=20000|; s|bazel-bin/|$runfiles/|g")
cd "$work"
timeout 600 bash -euo pipefail -c "$script" >by_hand.log 2>&1 ||
  fail "the By hand commands failed: $(tail -15 by_hand.log)"
for ((w = 0; w < workers; ++w)); do
  [ -f "worker$w.json" ] || fail "worker $w of $workers wrote no summary"
  grep -q '"test_auc": 0\.[5-9]' "worker$w.json" || fail "worker $w: $(cat "worker$w.json")"
done
[ -f export/MANIFEST.json ] || fail "no export"
[ "$(wc -l <scores.txt)" = 2000 ] || fail "scores.txt has $(wc -l <scores.txt) lines, not 2000"
echo "README By hand: $workers workers trained, exported, scored $(wc -l <scores.txt) lines"
