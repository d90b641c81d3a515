#!/usr/bin/env python3
"""The leak and panic scan of every worker instance a test run started, run by
scripts/test.sh after all the tests, whichever of them ran (a filtered run included).

Reads the secrets the tests recorded (target/tmp/e2e-secrets.txt: keys, credentials, body
markers, tokens, claim values, the values of secret variables, and every key and credential
header value a test sent: tests/support/requests.rs) and the wrangler log of every
instance started since the run began (target/tmp/e2e/run-*/wrangler.log, newer than the
marker file given), and fails when a log holds any secret, or a sign of a panic. Prints one
closing line: 'leak scan: N passed, M failed' (one per log).

With --expect-logs (scripts/test.sh passes it when the e2e binary's final scan ran, which
always leaves an instance's log), finding no log at all fails: the scan looked in the wrong
directory, and passing on nothing would hide every leak.

    scripts/scan-e2e-logs.py [--expect-logs] <CARGO_TARGET_TMPDIR> <run-start marker file>
"""
import glob
import os
import re
import sys

PANIC_SIGNS = ["panicked at", "RuntimeError: unreachable", "Worker exceeded", "RangeError"]
# The panics a test asks for with PANIC_FAULT_INJECTION (tests/support/logs.rs, same rule).
INJECTED_PANICS = [
    "PANIC_FAULT_INJECTION: the Worker panics on purpose",
    "PANIC_FAULT_INJECTION: the object panics on purpose",
]


def unexpected_panic_signs(text):
    """Every sign of a panic, unless the instance announced PANIC_FAULT_INJECTION and each of
    its panics is an injected one; then the panic and its trap are expected, nothing else."""
    announced = '"panics_on_request":' in text and '"panics_on_request":0' not in text
    injected = sum(text.count(message) for message in INJECTED_PANICS)
    all_injected = announced and text.count("panicked at") == injected
    expected = {"panicked at", "RuntimeError: unreachable"} if all_injected else set()
    return [sign for sign in PANIC_SIGNS if sign in text and sign not in expected]
UNIQUE_TAIL = re.compile(r"-([0-9a-f]{24})(?![0-9a-f])")
# wrangler dev's access log, one line per request it served (tests/support/logs.rs, same
# rule): it holds the path the client chose, and is no output of the worker's.
ACCESS_LOG_LINE = re.compile(r"^\[wrangler:info\] [A-Z]+ /\S* \d{3} .*ms\)$")


def without_access_log(text):
    return "\n".join(line for line in text.splitlines() if not ACCESS_LOG_LINE.match(line.rstrip()))


def main() -> int:
    args = sys.argv[1:]
    expect_logs = "--expect-logs" in args
    args = [a for a in args if a != "--expect-logs"]
    if len(args) != 2:
        print("usage: scan-e2e-logs.py [--expect-logs] <CARGO_TARGET_TMPDIR> <run-start marker>", file=sys.stderr)
        return 2
    tmp, marker = args
    since = os.path.getmtime(marker)
    try:
        with open(os.path.join(tmp, "e2e-secrets.txt"), encoding="utf-8", errors="replace") as f:
            secrets = {line.rstrip("\n") for line in f if line.strip()}
    except FileNotFoundError:
        secrets = set()
    # A value made by the tests' unique() ends in 24 hex digits: that part alone must not
    # show either (a log that printed half a key still leaked it).
    tails = {m.group(1) for s in secrets for m in [UNIQUE_TAIL.search(s)] if m}
    others = [s for s in secrets if not UNIQUE_TAIL.search(s) and len(s) >= 8]
    logs = [
        path
        for path in glob.glob(os.path.join(tmp, "e2e", "run-*", "wrangler.log"))
        if os.path.getmtime(path) >= since
    ]
    passed = failed = 0
    for path in sorted(logs):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        printed = without_access_log(text)
        problems = []
        leaked = {m.group(1) for m in UNIQUE_TAIL.finditer(printed)} & tails
        if leaked:
            problems.append(f"{len(leaked)} secret(s) made by the tests")
        other = sum(1 for s in others if s in printed)
        if other:
            problems.append(f"{other} other secret value(s) (tokens, keys, secret variables)")
        problems += [f"a sign of a panic ({sign})" for sign in unexpected_panic_signs(text)]
        if problems:
            failed += 1
            print(f"leak scan: {path} holds {', '.join(problems)}", file=sys.stderr)
        else:
            passed += 1
    # No log at all where there must be some fails, and counts as one failure in the closing
    # line (which scripts/test.sh adds to the suite's count).
    if not logs and secrets:
        print("leak scan: secrets were recorded but no instance log was found", file=sys.stderr)
        failed += 1
    elif not logs and expect_logs:
        print(
            f"leak scan: the end-to-end tests ran but no instance log was found under {os.path.join(tmp, 'e2e')}",
            file=sys.stderr,
        )
        failed += 1
    print(f"leak scan ({len(secrets)} secrets, {len(logs)} logs): {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
