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

# worker-build runs `wasm-opt -O --debuginfo`, which keeps the `name` section (function
# names, about 127 KB raw and 35 KB gzipped). A second pass at -Oz drops it and the producers
# section. The named build is kept in target/ for the benchmark's size breakdown by crate.
wasm=build/index_bg.wasm
mkdir -p target/wasm-names
cp "$wasm" target/wasm-names/index_bg.wasm
features=(--enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int
  --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling)
"$WASM_OPT_BIN" "$wasm" -o "$wasm.tmp" "${features[@]}" -Oz --strip-debug --strip-producers
mv "$wasm.tmp" "$wasm"
touch "$stamp"
