#!/usr/bin/env bash
# The whole test suite: installs the toolchain if needed (scripts/setup.sh), builds the
# worker, then runs every test of the workspace's two crates: the worker's (host unit and
# property tests of the core, end-to-end tests that start real workerd with wrangler dev in
# front of a real origin on loopback) and the client's (unit tests, the middleware against a
# scripted server, doctests, and end-to-end tests against the worker over TLS, the checker
# binary included). Ends with one line adding up every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
