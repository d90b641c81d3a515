#!/usr/bin/env bash
# Installs everything the worker needs to build and run locally, from the package
# registries only. Idempotent: each step is skipped when its result is already in place.
#   - the wasm32 target (rustup)
#   - wasm-bindgen-cli (the version Cargo.lock pins): the one on PATH when it is that
#     version, else installed under the repository (.tools/, `cargo install --root`), never
#     over a wasm-bindgen of the user's own
#   - wrangler (workerd), esbuild for this platform and binaryen (wasm-opt), via npm ci
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# No worker-build: scripts/build.sh takes its steps itself, which spares a fresh machine
# about nine minutes of compiling it.
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock to the patch.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)

# scripts/build.sh looks in .tools/bin first, then on PATH.
export PATH="$PWD/.tools/bin:$PATH"
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $WASM_BINDGEN_VERSION"; then
  say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION into .tools/ (several minutes, once)"
  # Not --locked: the crate's own lockfile names a webpki-roots release the registry no
  # longer serves. The version itself is pinned exactly.
  cargo install wasm-bindgen-cli --version "=$WASM_BINDGEN_VERSION" --root "$PWD/.tools"
fi

# npm installs esbuild's native binary for the platform it runs on only, so a node_modules/
# installed on another one (copied, or mounted from a container) has wrangler but no esbuild
# that runs here; scripts/build.sh needs it. Asking esbuild its version tells, on any
# platform: npm ci then installs this platform's.
if [[ ! -x node_modules/.bin/wrangler || package-lock.json -nt node_modules/.package-lock.json ]]; then
  say "installing wrangler, esbuild and binaryen (npm ci)"
  npm ci --no-audit --no-fund
elif ! node_modules/.bin/esbuild --version >/dev/null 2>&1; then
  say "node_modules/ has no esbuild that runs on $(uname -s) $(uname -m); reinstalling it (npm ci)"
  npm ci --no-audit --no-fund
fi
