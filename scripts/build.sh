#!/usr/bin/env bash
# Builds the worker (release Wasm + JS shim in build/) offline, with the tools that
# scripts/setup.sh installed. wrangler.toml's [build] command runs this, so it must be fast
# when nothing changed: it skips the build when build/ is newer than every source file.
#
# Before a deploy (wrangler sets WRANGLER_COMMAND=deploy, --dry-run included, or `versions
# upload`), or with CHECK_CONFIG=1, it first checks the configuration of the environment
# being deployed with the worker's own settings parser (check/, `idempotency-edge-config`):
# an error stops the deploy. Wrangler does not tell a build command which `--env` it runs
# for, so each [env.NAME] of wrangler.toml sets its own build command with
# CLOUDFLARE_ENV=NAME (an environment's typo then never blocks another's deploy); without
# it, the top level is checked. wrangler dev, the demo and the tests skip the check, so a
# fresh machine does not compile the checker (about 40 s on 2 cores) before its first demo;
# the test suite checks the repository's wrangler.toml in the checker's own tests.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${WRANGLER_COMMAND:-} in deploy* | versions*) CHECK_CONFIG=${CHECK_CONFIG:-1} ;; esac
if [[ ${CHECK_CONFIG:-} == 1 ]]; then
  if ! cargo run --quiet -p idempotency-edge-config -- check; then
    echo "build: the configuration of ${CLOUDFLARE_ENV:-the top level} has errors (above); fix them before deploying" >&2
    exit 1
  fi
fi

stamp=build/worker/shim.mjs
if [[ -f $stamp && -z ${FORCE_BUILD:-} ]]; then
  newer=$(find src Cargo.toml Cargo.lock scripts/build.sh -newer "$stamp" -print -quit)
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
wasm_opt=$PWD/node_modules/.bin/wasm-opt

# scripts/setup.sh installs wasm-bindgen under the repository unless PATH has its version.
export PATH="$PWD/.tools/bin:$PATH"
missing=()
command -v wasm-bindgen >/dev/null || missing+=(wasm-bindgen)
[[ -x $wasm_opt ]] || missing+=(wasm-opt)
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

# The four steps worker-build would take, without compiling worker-build (about nine minutes
# on a fresh 2-core machine): the crate to Wasm, wasm-bindgen's glue, wasm-opt, and one
# bundle of that glue with the entry module (src/entry.mjs).
#
# WASM_BINDGEN_USE_JS_SYS tells wasm-bindgen's macro to use js_sys's futures, as worker-build
# sets it, so both builds compile the same code and share cargo's cache.
#
# Panic messages name their source file. Cargo compiles the registry's crates from
# $CARGO_HOME/registry/src/, so without the remap their paths would carry this machine's
# home directory into the shipped Wasm, and two machines with their registries in different
# places would build different bytes from the same sources and toolchain. (The project's own
# paths are relative, and the standard library's are /rustc/<commit>/ already.) Only for the
# Wasm: host builds keep real paths. Checked by the e2e test
# hardening::the_shipped_wasm_names_no_directory_of_the_build_machine.
# Cargo splits these flags at spaces, so a home with a space in it keeps its paths, and a
# RUSTFLAGS set in the environment replaces them (cargo takes the first source of flags it
# finds); that test then says so.
registry_src=${CARGO_HOME:-$HOME/.cargo}/registry/src
case $registry_src in
  *[[:space:]]*) ;;
  *) export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS:-} --remap-path-prefix=$registry_src=registry" ;;
esac
WASM_BINDGEN_USE_JS_SYS=1 cargo build --quiet --lib --release --target wasm32-unknown-unknown
# Where cargo wrote it: a CARGO_TARGET_DIR set elsewhere must not leave an older Wasm under
# target/ to be shipped instead.
cargo_target=${CARGO_TARGET_DIR:-target}
stage=target/worker-js
rm -rf "$stage"
mkdir -p "$stage"
# The reset-state function and the abort handler are what src/entry.mjs recovers with.
wasm-bindgen "$cargo_target/wasm32-unknown-unknown/release/idempotency_edge.wasm" --out-dir "$stage" \
  --out-name index --target module --no-typescript \
  --experimental-reset-state-function --force-enable-abort-handler

# wasm-opt at -Oz keeping the `name` section (the benchmark's size breakdown by crate reads
# that copy in target/wasm-names/), then again at -Oz without names or producers for the
# shipped copy: 594,383 bytes, 261,094 gzipped, against 594,459 / 261,440 for worker-build's
# `-O` followed by one -Oz pass, and 594,898 / 261,410 for a single stripped -Oz pass.
features=(--enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int
  --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling)
#
# `-ocimfs 20` stops wasm-opt from inlining every function that has one caller, whatever its
# size (its default): that folded rarely taken branches (the admin API, observe mode, the
# data point) into the handlers, and it made the Wasm larger after gzip, not smaller:
# 272,424 -> 263,052 bytes gzipped for the same code (docs/decisions/0004-wasm-size-on-a-stable-toolchain.md).
inline=(--one-caller-inline-max-function-size 20)
#
# `--low-memory-unused` lets wasm-opt fold `load(p + c)` (c under 1 KiB) into the load's
# offset field. The two differ only where `p + c` wraps past 4 GiB, which no pointer of this
# program does (its memory is tens of MiB; Rust's stack sits at the bottom and grows down
# without wrapping): a wrapped access would trap instead of reading low memory. -975 bytes,
# -390 gzipped.
assume=(--low-memory-unused)
mkdir -p target/wasm-names
"$wasm_opt" "$stage/index_bg.wasm" -o target/wasm-names/index_bg.wasm "${features[@]}" "${assume[@]}" -Oz "${inline[@]}" --debuginfo
"$wasm_opt" target/wasm-names/index_bg.wasm -o "$stage/index_bg.wasm" "${features[@]}" "${assume[@]}" -Oz "${inline[@]}" --strip-debug --strip-producers

cp src/entry.mjs "$stage/entry.mjs"
"$esbuild" "$stage/entry.mjs" --bundle --format=esm --minify --log-level=warning \
  --external:./index_bg.wasm '--external:cloudflare:*' --outfile="$stage/bundle.js"
# wasm-bindgen imports the module in the source phase (`import source`); workerd's module
# rule hands a plain `import` of a .wasm file the compiled WebAssembly.Module already.
sed 's/import source /import /' "$stage/bundle.js" >"$stage/index.js"
grep -q 'import source ' "$stage/index.js" && { echo "build: an 'import source' survived in the bundle" >&2; exit 1; }

mkdir -p build/worker
cp "$stage/index_bg.wasm" build/index_bg.wasm
cp "$stage/index.js" build/index.js
# wrangler.toml's `main` (and the benchmark) name build/worker/shim.mjs.
printf '%s\n' "export * from '../index.js';" "export { default } from '../index.js';" >"$stamp"
