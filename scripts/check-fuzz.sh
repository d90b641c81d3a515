#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, a crate with its own workspace), so that a change to the
# core that breaks them fails the suite, and (with --run) runs each of them for a while.
#
#   scripts/check-fuzz.sh                    # `cargo +nightly fuzz build` when nightly and
#                                            # cargo-fuzz are installed; else `cargo check` of
#                                            # every target (the type check on stable), saying so
#   scripts/check-fuzz.sh --install          # first installs nightly (rustup) and cargo-fuzz
#                                            # (crates.io); if that fails, it says so and fails
#   scripts/check-fuzz.sh --install --run 60 # and then runs every target from its seeds, for
#                                            # a fixed number of inputs (at most 60 s each); a
#                                            # crash fails (what CI runs), and so does a
#                                            # `cargo fuzz list` that fails or lists nothing
#
# The runs replay: libFuzzer's seed is TEST_SEED when set, else 1, and the number of inputs
# is fixed (FUZZ_RUNS, default 150000; the time only caps it). So CI on a commit explores
# what `scripts/check-fuzz.sh --run 60` explores on a fresh clone of it (fuzz/corpus/ is
# not committed), and a crash replays with the seed it prints. A longer search with a new
# seed: TEST_SEED=$RANDOM FUZZ_RUNS=2000000 scripts/check-fuzz.sh --run 600.
#
# The type check checks the same targets against the same core on stable; the nightly build
# also links them with libFuzzer and the sanitizers, as `cargo fuzz run` needs.
set -euo pipefail
cd "$(dirname "$0")/.."

install= run_seconds=
while (($#)); do
  case $1 in
    --install) install=1 ;;
    --run) run_seconds=${2:?--run takes a number of seconds}; shift ;;
    *) echo "check-fuzz: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

have_fuzz() { rustup toolchain list 2>/dev/null | grep -q '^nightly' && cargo +nightly fuzz --version >/dev/null 2>&1; }

if [[ -n $install ]]; then
  # Where the fuzzers must run (CI), a toolchain that cannot be had is a failure, said out
  # loud: never a silent fall back to the type check.
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal || {
    echo "fuzz: FAILED to install the nightly toolchain (rustup toolchain install nightly); the fuzz targets cannot be built or run" >&2
    exit 1
  }
  cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked || {
    echo "fuzz: FAILED to install cargo-fuzz (cargo install cargo-fuzz --locked); the fuzz targets cannot be built or run" >&2
    exit 1
  }
fi

if have_fuzz; then
  echo "fuzz: cargo +nightly fuzz build"
  cargo +nightly fuzz build
elif [[ -n $run_seconds ]]; then
  echo "fuzz: FAILED: --run needs nightly and cargo-fuzz (run with --install)" >&2
  exit 1
else
  echo "fuzz: nightly or cargo-fuzz not installed, so only a type check of the fuzz targets (cargo check); ./scripts/check-fuzz.sh --install --run 60 runs them"
  cargo check --manifest-path fuzz/Cargo.toml --bins --quiet
fi

if [[ -n $run_seconds ]]; then
  seed=${TEST_SEED:-1}
  runs=${FUZZ_RUNS:-150000}
  echo "fuzz: seed $seed, $runs inputs per target (replay: TEST_SEED=$seed FUZZ_RUNS=$runs scripts/check-fuzz.sh --run $run_seconds)"
  mkdir -p target
  # A list that cannot be had, or is empty, would run nothing and still end in success:
  # that is a failure, named with the command to look into.
  if ! targets=$(cargo +nightly fuzz list); then
    echo "fuzz: FAILED: \`cargo +nightly fuzz list\` failed, so no target ran; run it in $(pwd) to see why" >&2
    exit 1
  fi
  if [[ -z ${targets//[[:space:]]/} ]]; then
    echo "fuzz: FAILED: \`cargo +nightly fuzz list\` lists no target, so none ran; fuzz/Cargo.toml should name one per fuzz/fuzz_targets/*.rs" >&2
    exit 1
  fi
  ran=0
  for target in $targets; do
    echo "fuzz: running $target ($runs inputs, at most ${run_seconds} s)"
    mkdir -p "fuzz/corpus/$target"
    if ! cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
      -seed="$seed" -runs="$runs" -max_total_time="$run_seconds" -max_len=4096 -print_final_stats=1 \
      >"target/fuzz-$target.log" 2>&1; then
      tail -n 60 "target/fuzz-$target.log" >&2
      echo "fuzz: FAILED: $target found a crash (log: target/fuzz-$target.log; the input is under fuzz/artifacts/$target)" >&2
      exit 1
    fi
    grep -E '^stat::number_of_executed_units' "target/fuzz-$target.log" | sed "s/^/fuzz: $target: /" || true
    ran=$((ran + 1))
  done
  echo "fuzz: every target ($ran) ran without a crash"
fi
