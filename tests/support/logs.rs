//! The worker's log as the tests read it: its structured decision lines, sentinels that
//! prove the log has been written up to a point, and the scan for leaks and panics.
//!
//! wrangler writes what workerd prints a moment after the response has gone out, so a
//! check that a line is *absent* means nothing until a later line is known to be there. A
//! [`Sentinel`] is that later line: a request whose decision line can be told apart from
//! every other one (the test origin answers it with a status no other request gets), sent
//! after everything the check is about. Its line is waited for, never slept for.

use super::origin::Origin;
use super::requests::{new_key, payment, plain_secrets, request, secret_tokens, unique, unique_tails};
use super::worker::{Recorded, Worker};
use serde_json::Value;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// How long a line may take to reach the log file: generous, the machine is shared.
pub const LOG_TIMEOUT: Duration = Duration::from_secs(60);

/// Signs of a panic or a reset instance in workerd's output.
pub const PANIC_SIGNS: &[&str] =
    &["panicked at", "RuntimeError: unreachable", "Worker exceeded", "RangeError"];

/// The messages of the panics a test asks for with `PANIC_FAULT_INJECTION`.
pub const INJECTED_PANICS: &[&str] = &[
    "PANIC_FAULT_INJECTION: the Worker panics on purpose",
    "PANIC_FAULT_INJECTION: the object panics on purpose",
];

/// The signs of a panic in `log` that were not asked for: every sign, unless the instance
/// announced `PANIC_FAULT_INJECTION` and each of its panics is an injected one, in which
/// case the trap that follows an injected panic (`RuntimeError: unreachable`) is expected
/// too. A sign of another kind (an exceeded limit, a `RangeError`) is never expected.
pub fn unexpected_panic_signs(log: &str) -> Vec<&'static str> {
    let announced = log.contains("\"panics_on_request\":") && !log.contains("\"panics_on_request\":0");
    let panics = log.matches("panicked at").count();
    let injected: usize = INJECTED_PANICS.iter().map(|message| log.matches(message).count()).sum();
    let all_injected = announced && panics == injected;
    PANIC_SIGNS
        .iter()
        .copied()
        .filter(|sign| log.contains(sign))
        .filter(|sign| !(all_injected && matches!(*sign, "panicked at" | "RuntimeError: unreachable")))
        .collect()
}

/// Every structured decision line (`{"event":"idempotency",…}`) in `text`, in order.
pub fn decision_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.find("{\"event\":\"idempotency\"").map(|at| &line[at..]))
        .filter_map(|json| serde_json::from_str(json.trim_end()).ok())
        .collect()
}

/// The decision lines of one object, in order.
pub fn lines_of(w: &Worker, object: &str) -> Vec<Value> {
    decision_lines(&w.log_contents()).into_iter().filter(|line| line["object"] == object).collect()
}

/// Waits until a decision line satisfies `wanted`, and returns it.
pub fn wait_for_line(w: &Worker, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LOG_TIMEOUT;
    loop {
        if let Some(line) = decision_lines(&w.log_contents()).into_iter().find(|line| wanted(line)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no log line {what} within {LOG_TIMEOUT:?}; see {}",
            w.dir().display()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the log of `w` contains `text` (any line, not only decision lines).
pub fn wait_for_text(w: &Worker, text: &str) {
    let deadline = Instant::now() + LOG_TIMEOUT;
    while !w.log_contents().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log within {LOG_TIMEOUT:?}; see {}",
            w.dir().display()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `object` has at least `n` decision lines, and returns them.
pub fn wait_for_lines_of(w: &Worker, object: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + LOG_TIMEOUT;
    loop {
        let lines = lines_of(w, object);
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "object {object} has {} of {n} log lines after {LOG_TIMEOUT:?}; see {}",
            lines.len(),
            w.dir().display()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Sends a sentinel through `w` (whose origin is `origin`) and waits for its line: every
/// line of a request answered before this call is in the log once it returns. Returns the
/// sentinel's object id.
pub fn sentinel(w: &Worker, origin: &Origin) -> String {
    let status = w.next_marker_status();
    let key = new_key();
    let response = w.send(
        &payment(&format!("/__e2e/sentinel/{}", unique("s")), &key)
            .header("x-test-status", status.to_string()),
    );
    assert_eq!(response.status, status, "the sentinel is answered by the origin: {response:?}");
    assert_eq!(origin.executions(&key), 1, "the sentinel executed once");
    let line = wait_for_line(w, &format!("of the sentinel (origin status {status})"), |line| {
        line["decision"] == "executed" && line["origin_status"] == status
    });
    line["object"]
        .as_str()
        .unwrap_or_else(|| panic!("the sentinel's line names no object: {line}"))
        .to_string()
}

/// The object id of `key`'s object, found by executing a first request with a unique
/// status (see [`sentinel`]): `request` is sent once more with that status.
pub fn object_of(w: &Worker, request: &super::http::Request) -> String {
    let status = w.next_marker_status();
    let r = w.send(&request.clone().header("x-test-status", status.to_string()));
    assert_eq!(r.status, status, "the marked request is answered by the origin: {r:?}");
    let line = wait_for_line(w, &format!("with origin status {status}"), |line| {
        line["decision"] == "executed" && line["origin_status"] == status
    });
    line["object"].as_str().unwrap_or_else(|| panic!("no object in {line}")).to_string()
}

/// Waits until everything a recorded instance printed so far is in its log, when no
/// other test uses it: a covered request without a key (which the worker answers itself,
/// whatever its origin) must add a decision line. An instance that no longer runs has
/// printed everything already (and its port may serve another instance by now).
pub fn flush_recorded(instance: &Recorded) {
    if instance.stopped.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let log =
        || std::fs::read(&instance.log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let before = decision_lines(&log()).len();
    let probe =
        request("POST", &format!("/__e2e/flush/{}", unique("f"))).json("{}").timeout(Duration::from_secs(30));
    if probe.send(instance.addr).is_err() {
        return;
    }
    let deadline = Instant::now() + LOG_TIMEOUT;
    while decision_lines(&log()).len() <= before {
        assert!(
            Instant::now() < deadline,
            "no new log line within {LOG_TIMEOUT:?}; see {}",
            instance.dir.display()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Fails if the log of `w` (flushed by the caller) holds any secret recorded in this
/// process (keys and credentials sent, body markers, tokens: `requests::register_secret`),
/// any of `extra`, or a sign of a panic. wrangler's access log is not the worker's output
/// ([`without_access_log`]).
pub fn scan_for_leaks(w: &Worker, extra: &[&str]) -> Result<(), String> {
    scan_text(&w.name, &w.log_contents(), w.dir(), extra)
}

/// [`scan_for_leaks`] for a recorded instance's log file.
pub fn scan_log(name: &str, log: &Path, dir: &Path, extra: &[&str]) -> Result<(), String> {
    let text = std::fs::read(log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    scan_text(name, &text, dir, extra)
}

fn scan_text(name: &str, log: &str, dir: &Path, extra: &[&str]) -> Result<(), String> {
    if log.is_empty() {
        return Err(format!("the log of instance '{name}' is empty: the harness captures nothing"));
    }
    let mut problems = Vec::new();
    let printed = without_access_log(log);
    let tokens = unique_tails(&printed);
    let leaked = secret_tokens().into_iter().filter(|t| tokens.contains(t.as_str())).count();
    if leaked > 0 {
        problems.push(format!("{leaked} secret(s) (keys, credentials or bodies)"));
    }
    let plain = plain_secrets().into_iter().filter(|value| printed.contains(value.as_str())).count();
    if plain > 0 {
        problems.push(format!("{plain} other secret value(s) (tokens, keys, credentials)"));
    }
    for value in extra {
        if !value.is_empty() && log.contains(value) {
            problems.push("the value of a secret variable (ADMIN_TOKEN or similar)".to_string());
        }
    }
    for sign in unexpected_panic_signs(log) {
        problems.push(format!("a sign of a panic ({sign})"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("the log of instance '{name}' holds {}; see {}", problems.join(", "), dir.display()))
    }
}

/// `log` without wrangler dev's own access log: the line it prints for each request it
/// served (`[wrangler:info] POST /v1/charges/p-… 201 Created (12ms)`) holds the request's
/// path, which the client chose (a few tests put the key there), and is no output of the
/// worker's (a deployed worker has no such line). Everything else is scanned.
pub fn without_access_log(log: &str) -> String {
    log.lines().filter(|line| !is_access_log_line(line)).collect::<Vec<_>>().join("\n")
}

/// `[wrangler:info] METHOD /path STATUS Reason (Nms)`, as miniflare's `maybeLogRequest`
/// prints it (colours off: the harness sets `NO_COLOR`).
fn is_access_log_line(line: &str) -> bool {
    let Some(rest) = line.trim_end().strip_prefix("[wrangler:info] ") else { return false };
    let mut words = rest.split(' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let status = words.next().unwrap_or_default();
    !method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
        && path.starts_with('/')
        && status.len() == 3
        && status.bytes().all(|b| b.is_ascii_digit())
        && rest.ends_with("ms)")
}
