#!/usr/bin/env bash
# The performance benchmark: installs the toolchain if needed, builds the worker
# (a no-op when build/ is current), then runs `node bench/bench.mjs run`, which starts a loopback origin,
# the worker and a pass-through baseline in local workerd, measures, prints a table and
# writes target/bench/latest.json. Takes about 13 minutes on 2 cores. docs/performance.md
# explains the figures. Options go to `bench.mjs run` (--quick, --runs N, --no-ladder, --origin-ms MS,
# --no-memory, --out FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
exec node bench/bench.mjs run "$@"
