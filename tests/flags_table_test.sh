#!/usr/bin/env bash
# docs/flags.md is what tests/flags_table.py makes of the binaries' --helpfull:
# a flag added, renamed or given another default or help fails this test
# until the table is regenerated.
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
python3 "$runfiles/tests/flags_table.py" --bin_dir="$runfiles" \
  --out="$work/flags.md"
if ! diff -u "$runfiles/docs/flags.md" "$work/flags.md"; then
  echo "FAIL: docs/flags.md differs from the binaries' flags: run" >&2
  echo "  bazel build //... && python3 tests/flags_table.py" \
    "--bin_dir=bazel-bin --out=docs/flags.md" >&2
  exit 1
fi
echo "docs/flags.md lists every flag of the five binaries as they are"
