#!/usr/bin/env bash
# The whole test suite: installs the toolchain if needed (scripts/setup.sh), builds the
# worker, then runs the host unit and property tests of the core and the client, and the
# end-to-end tests, which start real workerd (wrangler dev) in front of a real origin on
# loopback. Ends with one line adding up every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
