#!/usr/bin/env bash
# The whole test suite: installs the toolchain if needed (scripts/setup.sh), builds the
# worker, then runs the host unit and property tests of the core and the end-to-end tests,
# which start real workerd (wrangler dev) in front of a real origin on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cargo test --all-targets "$@"
