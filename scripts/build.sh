#!/usr/bin/env bash
# Builds the worker (release Wasm + JS shim in build/) offline, with the tools that
# scripts/setup.sh installed. wrangler.toml's [build] command runs this, so it must be fast
# when nothing changed: it skips the build when build/ is newer than every source file.
#
# Before a deploy (wrangler sets WRANGLER_COMMAND=deploy, --dry-run included, or `versions
# upload`), or with CHECK_CONFIG=1, it first checks wrangler.toml, its top level and every
# [env.NAME], with the worker's own settings parser (check/, `idempotency-edge-config`): an
# error stops the deploy. wrangler dev, the demo and the tests skip it, so a fresh machine
# does not compile the checker (about 40 s on 2 cores) before its first demo; the test
# suite checks the repository's wrangler.toml in the checker's own tests.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${WRANGLER_COMMAND:-} in deploy* | versions*) CHECK_CONFIG=${CHECK_CONFIG:-1} ;; esac
if [[ ${CHECK_CONFIG:-} == 1 ]]; then
  if ! cargo run --quiet -p idempotency-edge-config -- check --every-env; then
    echo "build: wrangler.toml has errors (above); fix them before deploying" >&2
    exit 1
  fi
fi

stamp=build/worker/shim.mjs
if [[ -f $stamp && -z ${FORCE_BUILD:-} ]]; then
  newer=$(find src Cargo.toml Cargo.lock -newer "$stamp" -print -quit)
  [[ -z $newer ]] && exit 0
fi

# esbuild's native binary for this machine. npm installs only the host's package,
# @esbuild/<os>-<arch>, and esbuild's install script usually copies that binary over
# node_modules/.bin/esbuild too; without the copy that one is a Node script, not a binary.
case $(uname -s) in Linux) os=linux ;; Darwin) os=darwin ;; *) os= ;; esac
case $(uname -m) in x86_64 | amd64) arch=x64 ;; aarch64 | arm64) arch=arm64 ;; *) arch= ;; esac
platform_esbuild=${os:+${arch:+node_modules/@esbuild/$os-$arch/bin/esbuild}}
esbuild=
if [[ -n $platform_esbuild && -x $platform_esbuild ]]; then
  esbuild=$PWD/$platform_esbuild
elif [[ -x node_modules/.bin/esbuild && $(head -c 2 node_modules/.bin/esbuild) != '#!' ]] &&
  node_modules/.bin/esbuild --version >/dev/null 2>&1; then
  esbuild=$PWD/node_modules/.bin/esbuild
fi

missing=()
command -v worker-build >/dev/null || missing+=(worker-build)
command -v wasm-bindgen >/dev/null || missing+=(wasm-bindgen)
[[ -x node_modules/.bin/wasm-opt ]] || missing+=(wasm-opt)
if [[ -z $esbuild ]]; then
  missing+=("esbuild (${platform_esbuild:-a native node_modules/.bin/esbuild} for $(uname -s) $(uname -m))")
fi
if ((${#missing[@]})); then
  echo "build: missing ${missing[*]}; run ./scripts/setup.sh first" >&2
  # node_modules/ installed elsewhere (copied, or mounted from a container) holds another
  # platform's esbuild; setup.sh sees that esbuild does not run and reinstalls with npm ci.
  if [[ -z $esbuild && -n $platform_esbuild && -d node_modules/@esbuild && ! -d ${platform_esbuild%/bin/esbuild} ]]; then
    echo "build: node_modules/@esbuild holds $(ls node_modules/@esbuild | tr '\n' ' ')(installed on another platform); setup.sh reinstalls node_modules/ for this one with npm ci" >&2
  fi
  exit 1
fi

# worker-build downloads these unless told where they are; this machine is offline.
export WASM_BINDGEN_BIN=$(command -v wasm-bindgen)
export ESBUILD_BIN=$esbuild
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
