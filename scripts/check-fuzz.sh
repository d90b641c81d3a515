#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, a crate with its own workspace), so that a change to the
# core that breaks them fails the suite.
#
#   scripts/check-fuzz.sh            # `cargo +nightly fuzz build` when nightly and cargo-fuzz
#                                    # are installed; else `cargo check` of every target
#   scripts/check-fuzz.sh --install  # first installs what is missing (rustup's nightly,
#                                    # cargo-fuzz from crates.io), then builds: what CI runs
#
# The check type-checks the same targets against the same core on stable; the nightly build
# also links them with libFuzzer and the sanitizers, as `cargo fuzz run` needs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installing is best effort: when the toolchain server or crates.io cannot give us nightly
# or cargo-fuzz, the type check below still proves that the targets build against the core.
if [[ ${1:-} == --install ]]; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal ||
    echo "fuzz: could not install nightly; falling back to cargo check" >&2
  cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked ||
    echo "fuzz: could not install cargo-fuzz; falling back to cargo check" >&2
fi

if rustup toolchain list 2>/dev/null | grep -q '^nightly' && cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo +nightly fuzz build"
  cargo +nightly fuzz build
else
  echo "fuzz: nightly or cargo-fuzz not installed; cargo check of the fuzz targets"
  cargo check --manifest-path fuzz/Cargo.toml --bins --quiet
fi
