#!/usr/bin/env bash
# The reliability run in one command: installs the toolchain if needed (scripts/setup.sh),
# builds the worker, then runs tests/e2e/reliability_run.rs against real workerd (wrangler dev)
# and a loopback origin: mixed traffic with duplicates, injected faults (SIGKILL and restart,
# origin resets, timeouts, stalled bodies, 429/503, refused connections) and hostile inputs.
# Prints the summary (also written, with the first findings of each kind, to
# target/reliability/latest.txt) and fails unless there
# were no duplicate executions, no lost outcomes and every bad input was refused correctly.
# Extra arguments go to the test binary. docs/reliability.md explains the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cargo test --test e2e reliability_run -- --nocapture "$@"
