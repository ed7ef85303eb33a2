#!/usr/bin/env bash
# alerts.yaml is a valid rule file and passes its unit tests (promtool, from
# Debian's prometheus package, which deploy/setup.sh installs).
set -euo pipefail
cd "$(dirname "$0")"
command -v promtool >/dev/null || { echo "FAIL: promtool missing" >&2; exit 1; }
promtool check rules alerts.yaml
promtool test rules alerts_test.yaml
