//! The checks, in the order they run, each with fresh keys of its own:
//!
//! 1. `replay`: a first request succeeds; the same request again gets the same status and
//!    body bytes with `Idempotent-Replayed: true` (and the first did not carry it). Two
//!    fresh keys tell whether answers differ between executions: when they do, a
//!    byte-exact second answer also proves that the retry did not execute again.
//! 2. `set-cookie`: that replay carries no `Set-Cookie`, when the first answer set one.
//! 3. `concurrent`: duplicates sent at once get one answer (or 409 while it runs), and a
//!    later retry gets it too. Needs answers that differ between executions.
//! 4. `reuse-body`: the same key with another body gets 422.
//! 5. `reuse-path`: the same key on `--url2` gets 422.
//! 6. `missing-key`: a request without a key gets 400 (unless `--keys-optional`).
//! 7. `malformed-key`: a key that is not an sf-string (an unclosed quote) gets 400.
//! 8. `retry-in-flight`: with `--slow-header`, a retry sent while the first attempt runs
//!    joins it (same answer, replayed) or gets 409 with `Retry-After`.
//! 9. `problem-json`: every refusal above (400, 409, 422) is an RFC 9457 problem document:
//!    `application/problem+json`, a JSON object, `type`/`title`/`detail` strings and
//!    `status` equal to the HTTP status where present.
//!
//! A check that cannot be judged from what the endpoint returned is not applicable, and
//! says why; a check never holds on an answer it could not read.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use idempotency_edge_client::{random_key, IDEMPOTENCY_KEY_HEADER};
use reqwest::Method;

use crate::args::Args;
use crate::report::{CheckResult, Report, Verdict};

/// One answer, read to the end.
#[derive(Clone, Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    fn replayed(&self) -> bool {
        self.header("idempotent-replayed").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The same status and body bytes.
    fn same_as(&self, other: &Answer) -> bool {
        self.status == other.status && self.body == other.body
    }
}

type Sent = Result<Answer, String>;

/// Which key a request carries.
#[derive(Clone, Copy)]
enum Key<'a> {
    None,
    /// Sent as the header value, unchanged (valid or not).
    Raw(&'a str),
}

struct Checker<'a> {
    args: &'a Args,
    http: reqwest::Client,
    method: Method,
}

impl Checker<'_> {
    async fn send(&self, url: &str, key: Key<'_>, body: &[u8], slow: bool) -> Sent {
        let mut request = self.http.request(self.method.clone(), url);
        for (name, value) in &self.args.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let (true, Some((name, value))) = (slow, &self.args.slow_header) {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Key::Raw(key) = key {
            request = request.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        let response = request.body(body.to_vec()).send().await.map_err(|e| describe(&e))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = response.bytes().await.map_err(|e| describe(&e))?.to_vec();
        Ok(Answer { status, headers, body })
    }
}

/// A reqwest error with its causes (a TLS failure names the certificate problem only there).
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn fresh_key() -> String {
    format!("check-{}", random_key())
}

fn result(id: &'static str, title: &'static str, verdict: Verdict, why: impl Into<String>) -> CheckResult {
    CheckResult { id, title, verdict, why: why.into() }
}

const REPLAY: (&str, &str) = ("replay", "executes once, then replays byte-exact with Idempotent-Replayed");
const SET_COOKIE: (&str, &str) = ("set-cookie", "Set-Cookie is not replayed");
const CONCURRENT: (&str, &str) = ("concurrent", "concurrent duplicates get one answer");
const REUSE_BODY: (&str, &str) = ("reuse-body", "the same key with another body gets 422");
const REUSE_PATH: (&str, &str) = ("reuse-path", "the same key on another path gets 422");
const MISSING_KEY: (&str, &str) = ("missing-key", "a missing key gets 400");
const MALFORMED_KEY: (&str, &str) = ("malformed-key", "a malformed key gets 400");
const RETRY_IN_FLIGHT: (&str, &str) =
    ("retry-in-flight", "a retry while the first attempt runs joins it, or gets 409 + Retry-After");
const PROBLEM_JSON: (&str, &str) = ("problem-json", "problem documents are RFC 9457");

fn check(which: (&'static str, &'static str), verdict: Verdict, why: impl Into<String>) -> CheckResult {
    result(which.0, which.1, verdict, why)
}

fn status_text(sent: &Sent) -> String {
    match sent {
        Ok(answer) => answer.status.to_string(),
        Err(e) => format!("no answer ({e})"),
    }
}

/// A body that is certainly another payload: a JSON object gets one more member, other
/// JSON is wrapped in an array, anything else gets bytes appended. (Whitespace alone would
/// not do: an implementation may compare canonical JSON.)
pub fn other_body(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut members)) => {
            members.insert("idempotency_edge_check_variant".into(), serde_json::Value::from(1));
            serde_json::Value::Object(members).to_string().into_bytes()
        }
        Ok(value) => serde_json::Value::Array(vec![value]).to_string().into_bytes(),
        Err(_) => [body, b" (another payload)"].concat(),
    }
}

/// What is wrong with a refusal as an RFC 9457 problem document, if anything.
pub fn problem_defects(status: u16, content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let media_type = content_type.and_then(|t| t.split(';').next()).map(str::trim).unwrap_or("");
    if !media_type.eq_ignore_ascii_case("application/problem+json") {
        let shown = if media_type.is_empty() { "none" } else { media_type };
        return Some(format!("content type {shown}, not application/problem+json"));
    }
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(_) => return Some("the body is not JSON".into()),
    };
    let Some(members) = value.as_object() else { return Some("the body is not a JSON object".into()) };
    for name in ["type", "title", "detail", "instance"] {
        if members.get(name).is_some_and(|v| !v.is_string()) {
            return Some(format!("\"{name}\" is not a string"));
        }
    }
    match members.get("status") {
        Some(v) if v.as_u64() != Some(u64::from(status)) => {
            Some(format!("\"status\" is {v}, the HTTP status {status}"))
        }
        _ => None,
    }
}

/// Runs every check with `http` (built from the shared endpoint arguments: `--ca-cert`,
/// `--timeout-secs`).
pub async fn run(args: &Args, http: reqwest::Client) -> Report {
    // The method was checked when the arguments were parsed.
    let method = Method::from_bytes(args.method.as_bytes()).unwrap_or(Method::POST);
    let checker = Checker { args, http, method };
    let mut report = Report {
        method: args.method.clone(),
        url: args.url.clone(),
        distinguishable: None,
        checks: Vec::new(),
    };
    run_checks(&checker, &mut report).await;
    report
}

async fn run_checks(c: &Checker<'_>, report: &mut Report) {
    use Verdict::{FallsShort, Holds, NotApplicable};
    let args = c.args;
    let url = args.url.as_str();
    let body = args.body.as_slice();
    let checks = &mut report.checks;
    // Refusals seen along the way, for the problem-document check: (what, answer).
    let mut refusals: Vec<(String, Answer)> = Vec::new();

    // 1. Baseline, retry, and a second fresh key to tell executions apart.
    let key = fresh_key();
    let first = c.send(url, Key::Raw(&key), body, false).await;
    let first = match first {
        Ok(answer) if answer.success() => answer,
        other => {
            let why = match &other {
                Ok(a) => format!(
                    "the first request got {} instead of a 2xx; the checker needs a request the endpoint accepts (--body, --header, --method)",
                    a.status
                ),
                Err(e) => format!("the first request got no answer: {e}"),
            };
            checks.push(check(REPLAY, FallsShort, why));
            let skipped = "needs a successful first request";
            for which in [
                SET_COOKIE,
                CONCURRENT,
                REUSE_BODY,
                REUSE_PATH,
                MISSING_KEY,
                MALFORMED_KEY,
                RETRY_IN_FLIGHT,
                PROBLEM_JSON,
            ] {
                checks.push(check(which, NotApplicable, skipped));
            }
            return;
        }
    };
    let retry = c.send(url, Key::Raw(&key), body, false).await;
    let other_key = fresh_key();
    let other = c.send(url, Key::Raw(&other_key), body, false).await;
    let distinguishable = match &other {
        Ok(o) if o.success() => Some(o.body != first.body),
        _ => None,
    };
    report.distinguishable = distinguishable;
    let counted = distinguishable == Some(true);
    let cannot_count = match distinguishable {
        Some(false) => {
            "two fresh keys got the same answer, so answers cannot tell one execution from two".to_string()
        }
        _ => format!(
            "a second fresh key got {}, so answers cannot tell one execution from two",
            status_text(&other)
        ),
    };

    let replay_verdict = match &retry {
        Err(e) => (FallsShort, format!("the retry got no answer: {e}")),
        Ok(r) if first.replayed() => {
            let _ = r;
            (FallsShort, "the first answer already carried Idempotent-Replayed: true".to_string())
        }
        Ok(r) if !r.same_as(&first) => {
            let what = if r.status != first.status {
                format!("status {} instead of {}", r.status, first.status)
            } else {
                "other body bytes".to_string()
            };
            let executed = if counted && r.success() { ": it executed again" } else { "" };
            (FallsShort, format!("the retry got {what}{executed}"))
        }
        Ok(r) if !r.replayed() => (FallsShort, "the retry got the same answer without Idempotent-Replayed: true".to_string()),
        Ok(_) if counted => (
            Holds,
            "the retry got the first answer byte for byte with Idempotent-Replayed: true, and a fresh key got another answer, so the retry did not execute"
                .to_string(),
        ),
        Ok(_) => (
            Holds,
            format!("the retry got the first answer byte for byte with Idempotent-Replayed: true; executions not counted: {cannot_count}"),
        ),
    };
    let replay_held = replay_verdict.0 == Holds;
    checks.push(check(REPLAY, replay_verdict.0, replay_verdict.1));

    // 2. Set-Cookie on the replay.
    checks.push(match (&retry, first.has("set-cookie")) {
        (_, false) => check(SET_COOKIE, NotApplicable, "the first answer set no cookie"),
        (Ok(r), true) if replay_held && r.has("set-cookie") => {
            check(SET_COOKIE, FallsShort, "the replay carries the first answer's Set-Cookie")
        }
        (Ok(_), true) if replay_held => {
            check(SET_COOKIE, Holds, "the first answer set a cookie; the replay carries no Set-Cookie")
        }
        _ => check(SET_COOKIE, NotApplicable, "no replay to inspect (see replay)"),
    });

    // 3. Concurrent duplicates.
    let key = fresh_key();
    let slow = args.slow_header.is_some();
    let sends = (0..args.concurrency).map(|_| c.send(url, Key::Raw(&key), body, slow));
    let answers: Vec<Sent> = join_all(sends).await;
    let failures: Vec<&String> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    let got: Vec<&Answer> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    let successes: Vec<&Answer> = got.iter().copied().filter(|a| a.success()).collect();
    let conflicts: Vec<&Answer> = got.iter().copied().filter(|a| a.status == 409).collect();
    for a in &conflicts {
        refusals.push(("409 to a concurrent duplicate".into(), (*a).clone()));
    }
    let others: Vec<u16> = got.iter().filter(|a| !a.success() && a.status != 409).map(|a| a.status).collect();
    let mut distinct: Vec<&Answer> = Vec::new();
    for a in &successes {
        if !distinct.iter().any(|d| d.same_as(a)) {
            distinct.push(a);
        }
    }
    let n = args.concurrency;
    checks.push(if let Some(e) = failures.first() {
        check(CONCURRENT, FallsShort, format!("{} of {n} duplicates got no answer: {e}", failures.len()))
    } else if !others.is_empty() {
        check(CONCURRENT, FallsShort, format!("duplicates got {others:?}, neither the answer nor 409"))
    } else if successes.is_empty() {
        check(CONCURRENT, FallsShort, format!("none of {n} duplicates got a 2xx ({} got 409)", conflicts.len()))
    } else if distinct.len() > 1 {
        let executed = if counted { ": it executed more than once" } else { "" };
        check(CONCURRENT, FallsShort, format!("{n} duplicates got {} different answers{executed}", distinct.len()))
    } else if !counted {
        check(CONCURRENT, NotApplicable, format!("all got one answer, but {cannot_count}"))
    } else {
        match c.send(url, Key::Raw(&key), body, false).await {
            Ok(later) if later.same_as(distinct[0]) => check(
                CONCURRENT,
                Holds,
                format!(
                    "{n} duplicates sent at once: {} got one answer ({} marked replayed), {} got 409; a later retry got the same answer",
                    successes.len(),
                    successes.iter().filter(|a| a.replayed()).count(),
                    conflicts.len()
                ),
            ),
            later => check(
                CONCURRENT,
                FallsShort,
                format!("the duplicates agreed, but a later retry got another answer ({})", status_text(&later)),
            ),
        }
    });

    // 4 and 5. The same key with another payload, then on another path.
    let key = fresh_key();
    let base = c.send(url, Key::Raw(&key), body, false).await;
    match &base {
        Ok(b) if b.success() => {
            let reused = c.send(url, Key::Raw(&key), &other_body(body), false).await;
            checks.push(match &reused {
                Ok(r) if r.status == 422 => {
                    refusals.push(("422 to another body".into(), r.clone()));
                    check(REUSE_BODY, Holds, "the same key with another body got 422")
                }
                Ok(r) if r.success() => check(
                    REUSE_BODY,
                    FallsShort,
                    format!("the same key with another body got {}: it was accepted", r.status),
                ),
                other => check(
                    REUSE_BODY,
                    FallsShort,
                    format!("the same key with another body got {}", status_text(other)),
                ),
            });
            checks.push(match &args.url2 {
                None => check(
                    REUSE_PATH,
                    NotApplicable,
                    "give --url2 (another covered path of the same API) to check it",
                ),
                Some(url2) => match c.send(url2, Key::Raw(&key), body, false).await {
                    Ok(r) if r.status == 422 => {
                        refusals.push(("422 to another path".into(), r.clone()));
                        check(REUSE_PATH, Holds, "the same key on --url2 got 422")
                    }
                    other => check(
                        REUSE_PATH,
                        FallsShort,
                        format!("the same key on --url2 got {}", status_text(&other)),
                    ),
                },
            });
        }
        other => {
            let why = format!("the first request under a new key got {}", status_text(other));
            checks.push(check(REUSE_BODY, NotApplicable, why.clone()));
            checks.push(check(REUSE_PATH, NotApplicable, why));
        }
    }

    // 6. No key.
    checks.push(if args.keys_optional {
        check(MISSING_KEY, NotApplicable, "--keys-optional: the endpoint executes requests without a key by design")
    } else {
        match c.send(url, Key::None, body, false).await {
            Ok(r) if r.status == 400 => {
                refusals.push(("400 to a missing key".into(), r.clone()));
                check(MISSING_KEY, Holds, "a request without Idempotency-Key got 400")
            }
            Ok(r) if r.success() => check(
                MISSING_KEY,
                FallsShort,
                format!("a request without Idempotency-Key got {}: it was executed (pass --keys-optional if that is by design)", r.status),
            ),
            other => check(MISSING_KEY, FallsShort, format!("a request without Idempotency-Key got {}", status_text(&other))),
        }
    });

    // 7. A malformed key: an sf-string without its closing quote.
    let malformed = format!("\"{}", fresh_key());
    checks.push(match c.send(url, Key::Raw(&malformed), body, false).await {
        Ok(r) if r.status == 400 => {
            refusals.push(("400 to a malformed key".into(), r.clone()));
            check(MALFORMED_KEY, Holds, "an unclosed sf-string key got 400")
        }
        other => {
            check(MALFORMED_KEY, FallsShort, format!("an unclosed sf-string key got {}", status_text(&other)))
        }
    });

    // 8. A retry while the first attempt runs.
    checks.push(match &args.slow_header {
        None => check(
            RETRY_IN_FLIGHT,
            NotApplicable,
            "give --slow-header (a header that makes the endpoint answer in several seconds) to check it",
        ),
        Some(_) => {
            let key = fresh_key();
            let started = Instant::now();
            let first = c.send(url, Key::Raw(&key), body, true);
            let second = async {
                tokio::time::sleep(args.slow_lead).await;
                (Instant::now(), c.send(url, Key::Raw(&key), body, true).await)
            };
            let first_done = async {
                let answer = first.await;
                (Instant::now(), answer)
            };
            let ((first_at, first), (retry_sent_at, retry)) = tokio::join!(first_done, second);
            let first_took = first_at.duration_since(started);
            let retry_sent = retry_sent_at.duration_since(started);
            judge_retry_in_flight(
                &first,
                &retry,
                first_took,
                retry_sent,
                args.slow_lead,
                counted,
                &mut refusals,
            )
        }
    });

    // 9. Problem documents.
    checks.push(if refusals.is_empty() {
        check(
            PROBLEM_JSON,
            NotApplicable,
            "the endpoint refused nothing, so there was no problem document to inspect",
        )
    } else {
        let defects: Vec<String> = refusals
            .iter()
            .filter_map(|(what, a)| {
                problem_defects(a.status, a.header("content-type"), &a.body).map(|d| format!("{what}: {d}"))
            })
            .collect();
        if defects.is_empty() {
            let seen: Vec<&str> = refusals.iter().map(|(what, _)| what.as_str()).collect();
            check(
                PROBLEM_JSON,
                Holds,
                format!("{} refusal(s) checked: {}", refusals.len(), dedup(&seen).join(", ")),
            )
        } else {
            check(
                PROBLEM_JSON,
                FallsShort,
                dedup(&defects.iter().map(String::as_str).collect::<Vec<_>>()).join("; "),
            )
        }
    });
}

fn dedup<'a>(items: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(item);
        }
    }
    out
}

fn judge_retry_in_flight(
    first: &Sent,
    retry: &Sent,
    first_took: Duration,
    retry_sent: Duration,
    lead: Duration,
    counted: bool,
    refusals: &mut Vec<(String, Answer)>,
) -> CheckResult {
    use Verdict::{FallsShort, Holds, NotApplicable};
    let first = match first {
        Ok(a) if a.success() => a,
        other => {
            return check(
                RETRY_IN_FLIGHT,
                NotApplicable,
                format!("the slow first attempt got {}", status_text(other)),
            )
        }
    };
    // The retry's request started after the lead; an answer before that means the slow
    // header did not make the first attempt slow.
    if first_took <= retry_sent.min(lead) {
        return check(
            RETRY_IN_FLIGHT,
            NotApplicable,
            format!(
                "the first attempt answered in {} ms, before the retry was sent: the slow header did not slow it down",
                first_took.as_millis()
            ),
        );
    }
    match retry {
        Err(e) => check(RETRY_IN_FLIGHT, FallsShort, format!("the retry got no answer: {e}")),
        Ok(r) if r.status == 409 => {
            refusals.push(("409 to a retry in flight".into(), r.clone()));
            if r.has("retry-after") {
                check(
                    RETRY_IN_FLIGHT,
                    Holds,
                    "the retry got 409 with Retry-After while the first attempt ran",
                )
            } else {
                check(RETRY_IN_FLIGHT, FallsShort, "the retry got 409 without Retry-After")
            }
        }
        Ok(r) if r.same_as(first) && r.replayed() => check(
            RETRY_IN_FLIGHT,
            Holds,
            if counted {
                "the retry joined the running attempt: its answer byte for byte, with Idempotent-Replayed: true"
            } else {
                "the retry got the running attempt's answer byte for byte, with Idempotent-Replayed: true (executions not counted)"
            },
        ),
        Ok(r) if r.success() && !r.same_as(first) => {
            let executed = if counted { ": it executed a second time" } else { "" };
            check(
                RETRY_IN_FLIGHT,
                FallsShort,
                format!("the retry got another answer ({}){executed}", r.status),
            )
        }
        Ok(r) if r.success() => check(
            RETRY_IN_FLIGHT,
            FallsShort,
            "the retry got the same answer without Idempotent-Replayed: true",
        ),
        Ok(r) => check(
            RETRY_IN_FLIGHT,
            FallsShort,
            format!("the retry got {}, neither the answer nor 409", r.status),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_body_is_another_payload() {
        assert_eq!(other_body(br#"{"amount":1}"#), br#"{"amount":1,"idempotency_edge_check_variant":1}"#);
        assert_eq!(other_body(b"{}"), br#"{"idempotency_edge_check_variant":1}"#);
        assert_eq!(other_body(b"[1]"), b"[[1]]");
        assert_eq!(other_body(b"7"), b"[7]");
        assert_eq!(other_body(b"a=1"), b"a=1 (another payload)");
        assert_eq!(other_body(b""), b" (another payload)");
    }

    #[test]
    fn problem_documents() {
        let ok = br#"{"type":"urn:x:problem:missing-key","title":"t","status":400,"detail":"d"}"#;
        assert_eq!(problem_defects(400, Some("application/problem+json"), ok), None);
        assert_eq!(problem_defects(400, Some("Application/Problem+JSON; charset=utf-8"), ok), None);
        assert_eq!(
            problem_defects(400, Some("application/problem+json"), b"{}"),
            None,
            "every member is optional"
        );
        for (status, content_type, body) in [
            (400, Some("application/json"), &ok[..]),
            (400, None, &ok[..]),
            (422, Some("application/problem+json"), &ok[..]),
            (400, Some("application/problem+json"), &b"not json"[..]),
            (400, Some("application/problem+json"), &b"[1]"[..]),
            (400, Some("application/problem+json"), &br#"{"type":7}"#[..]),
            (400, Some("application/problem+json"), &br#"{"status":"400"}"#[..]),
        ] {
            assert!(
                problem_defects(status, content_type, body).is_some(),
                "{status} {content_type:?} {body:?}"
            );
        }
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Sent {
        Ok(Answer {
            status,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn retry_in_flight_verdicts() {
        let s = Duration::from_secs;
        let judge = |first: &Sent, retry: &Sent, first_took: Duration| {
            judge_retry_in_flight(first, retry, first_took, s(1), s(1), true, &mut Vec::new()).verdict
        };
        let first = answer(201, &[], "a");
        use Verdict::*;
        assert_eq!(judge(&first, &answer(201, &[("Idempotent-Replayed", "true")], "a"), s(4)), Holds);
        assert_eq!(judge(&first, &answer(409, &[("Retry-After", "1")], "{}"), s(4)), Holds);
        assert_eq!(judge(&first, &answer(409, &[], "{}"), s(4)), FallsShort);
        assert_eq!(judge(&first, &answer(201, &[], "b"), s(4)), FallsShort, "executed twice");
        assert_eq!(judge(&first, &answer(201, &[], "a"), s(4)), FallsShort, "no replay header");
        assert_eq!(judge(&first, &answer(500, &[], "a"), s(4)), FallsShort);
        assert_eq!(judge(&first, &Err("reset".into()), s(4)), FallsShort);
        assert_eq!(
            judge(&first, &answer(201, &[], "b"), Duration::from_millis(200)),
            NotApplicable,
            "not slow"
        );
        assert_eq!(judge(&answer(400, &[], "x"), &answer(201, &[], "b"), s(4)), NotApplicable);
    }
}
