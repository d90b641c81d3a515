#!/usr/bin/env bash
# Builds the worker (release Wasm + JS shim in build/) offline, with the tools that
# scripts/setup.sh installed. wrangler.toml's [build] command runs this, so it must be fast
# when nothing changed: it skips the build when build/ is newer than every source file.
set -euo pipefail
cd "$(dirname "$0")/.."

stamp=build/worker/shim.mjs
if [[ -f $stamp && -z ${FORCE_BUILD:-} ]]; then
  newer=$(find src Cargo.toml Cargo.lock -newer "$stamp" -print -quit)
  [[ -z $newer ]] && exit 0
fi

missing=()
command -v worker-build >/dev/null || missing+=(worker-build)
command -v wasm-bindgen >/dev/null || missing+=(wasm-bindgen)
[[ -x node_modules/.bin/wasm-opt ]] || missing+=(wasm-opt)
[[ -x node_modules/@esbuild/linux-x64/bin/esbuild ]] || missing+=(esbuild)
if ((${#missing[@]})); then
  echo "build: missing ${missing[*]}; run ./scripts/setup.sh first" >&2
  exit 1
fi

# worker-build downloads these unless told where they are; this machine is offline.
export WASM_BINDGEN_BIN=$(command -v wasm-bindgen)
export ESBUILD_BIN=$PWD/node_modules/@esbuild/linux-x64/bin/esbuild
export WASM_OPT_BIN=$PWD/node_modules/.bin/wasm-opt
worker-build --release
touch "$stamp"
