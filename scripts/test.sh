#!/usr/bin/env bash
# The whole test suite: installs the toolchain if needed (scripts/setup.sh), builds the
# worker, checks that the fuzz targets build, then runs every test of the workspace's three
# crates: the worker's (host unit and property tests of the core; the end-to-end tests in
# tests/e2e, which start real workerd with wrangler dev in front of a real origin on
# loopback; the build's and the benchmark's JavaScript, through Node), the client's (unit
# tests, the middleware against a scripted server, doctests, and end-to-end tests against
# the worker over TLS, the checker binary included)
# and the configuration checker's (check/: its rules, the repository's wrangler.toml, and
# `wrangler deploy --dry-run` of each shipped environment).
# Ends with one line adding up every test binary's results, and the slowest e2e tests.
# Every end-to-end test has a timeout (E2E_TEST_TIMEOUT_SECONDS, default 1800; the crash
# rounds took up to 900 s inside the suite, tests/support/worker.rs): a test that overruns
# it ends its test process with its name printed.
#
#   ./scripts/test.sh                         # everything but the long reliability run
#   ./scripts/test.sh --with-reliability-run  # and the reliability run (CI does this)
#
# Other arguments go to `cargo test` (before `--`). Every random choice of the suite (the
# storm, the reliability run, and proptest's cases) is drawn from one seed: TEST_SEED when
# set, else a new one, printed at the start and again after a failure with the command
# that replays the run.
set -euo pipefail
cd "$(dirname "$0")/.."

run_reliability=
cargo_args=()
for arg in "$@"; do
  case $arg in
    --with-reliability-run) run_reliability=1 ;;
    *) cargo_args+=("$arg") ;;
  esac
done

bash scripts/setup.sh
bash scripts/build.sh
bash scripts/check-fuzz.sh

# One seed for every random choice: the e2e tests read TEST_SEED, proptest PROPTEST_RNG_SEED.
if [[ -z ${TEST_SEED:-} ]]; then
  TEST_SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fi
export TEST_SEED PROPTEST_RNG_SEED=$TEST_SEED
# Most end-to-end tests wait on workerd or an origin, not on the CPU: four at a time take
# the e2e binary from 447 s to 332 s on a 2-core machine (measured), with no test changed.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
echo "test seed: $TEST_SEED (replay: TEST_SEED=$TEST_SEED ./scripts/test.sh $*)"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The final leak scan reads the secrets recorded and the logs written from here on, where
# the tests write them: CARGO_TARGET_TMPDIR, which cargo sets to the target directory's tmp/
# (CARGO_TARGET_DIR when set, as scripts/build.sh reads it).
tests_tmp=${CARGO_TARGET_DIR:-target}/tmp
mkdir -p "$tests_tmp"
rm -f "$tests_tmp/e2e-secrets.txt"
touch "$tests_tmp/e2e-run-start"
rm -f target/e2e-times.txt
skip=(--skip reliability_run)
[[ -n $run_reliability ]] && skip=()
status=0
cargo test --workspace --no-fail-fast --lib --bins --tests "${cargo_args[@]}" -- "${skip[@]}" 2>&1 | tee "$log" || status=$?
# Doctests one crate at a time: the worker crate is a cdylib, so cargo names its rlib without
# a hash, and in one workspace-wide run two builds of it (the feature sets of different
# crates' test targets) write the same file; a doctest of the client then links against the
# wrong one (E0460, seen in a fresh-clone CI run). One crate per run builds one.
for crate in idempotency-edge idempotency-edge-protocol idempotency-edge-client idempotency-edge-config; do
  cargo test --doc -p "$crate" "${cargo_args[@]}" 2>&1 | tee -a "$log" || status=$?
done
# Every instance's log, whichever tests ran: no secret, no panic (scripts/scan-e2e-logs.py).
# When the e2e binary's own final scan ran (it starts an instance if no other test did),
# instances certainly wrote logs: finding none means the scan looked in the wrong place.
scan_args=()
if grep -q '^test zz_after_all::every_instance_log_is_free_of_secrets_and_panics ' "$log"; then
  scan_args=(--expect-logs)
fi
python3 scripts/scan-e2e-logs.py "${scan_args[@]}" "$tests_tmp" "$tests_tmp/e2e-run-start" 2>&1 | tee -a "$log" || status=1
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^leak scan \(/ { p += $(NF-3); f += $(NF-1) }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
if [[ -s target/e2e-times.txt ]]; then
  echo "slowest end-to-end tests (seconds from first use of an instance):"
  # sed reads all of sort's output (head would close the pipe early: SIGPIPE, pipefail).
  sort -rn target/e2e-times.txt | sed -n '1,10s/^/  /p'
fi
# A failed run shows the reliability run's findings, which its report keeps in a file: the
# watchdog ends the whole test process when a test overruns, before the test harness
# prints the messages of tests that failed earlier.
if [[ $status -ne 0 && target/reliability/latest.txt -nt "$tests_tmp/e2e-run-start" ]]; then
  echo "the reliability run's report (target/reliability/latest.txt):"
  sed 's/^/  /' target/reliability/latest.txt
fi
if [[ $status -ne 0 ]]; then
  echo "a test failed; replay this run's random choices with: TEST_SEED=$TEST_SEED ./scripts/test.sh $*"
fi
exit "$status"
