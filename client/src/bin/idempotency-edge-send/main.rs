//! `idempotency-edge-send`: one operation through the operation client
//! (`idempotency_edge_client::Client`), every attempt shown.
//!
//! ```sh
//! TEST_API_KEY='Bearer sk_test_…' idempotency-edge-send --url https://127.0.0.1:8787/v1/charges \
//!   --credential-env TEST_API_KEY --key order-42-charge --body '{"amount":1000}'
//! ```
//!
//! Prints each attempt (status or transport error, replayed, how long it took, the wait
//! before the next retry or poll) and the result; `--json FILE` (or `-` for stdout) writes
//! the same as JSON. The exit status follows the table both programs share
//! (`shared::Exit`, printed by `--help`): 0 a 2xx answer, 1 a final non-2xx answer, 2 retries
//! ran out, 3 reconciliation needed, 4 a transport failure retrying cannot fix, 5 still
//! pending at the poll deadline, 64 bad usage.
//!
//! This program validates its arguments before sending (every request it would build is
//! one reqwest can build) and stacks no other middleware, so 4 is a guard, not an answer it
//! gives to any input; the library's `ClientError::Transport` behind it is tested in
//! `client/tests/middleware.rs` (`errors_of_inner_layers_are_not_retried`). Connection and
//! TLS failures are retried, so they end in 2.

#[path = "../shared/mod.rs"]
mod shared;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use idempotency_edge_client::{
    key_for, AttemptReport, AttemptSummary, Client, ClientError, Decision, GiveUpReason, Operation,
    RetryConfig, TransportError,
};
use serde_json::json;

use shared::{Endpoint, Exit, Out, EXIT_STATUS_HELP};

/// Sends one operation under one Idempotency-Key, retrying (and polling an asynchronously
/// accepted job) exactly as far as that is safe, and shows every attempt.
#[derive(Parser, Debug)]
#[command(name = "idempotency-edge-send", version, after_help = EXIT_STATUS_HELP)]
struct Cli {
    #[command(flatten)]
    endpoint: Endpoint,

    /// The operation's Idempotency-Key, sent on every attempt
    #[arg(long, value_name = "KEY", required_unless_present = "id", conflicts_with = "id")]
    key: Option<String>,

    /// Derive the key from a business id: ID-ACTION (one key per operation)
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    /// The action part of a derived key [default: charge]
    #[arg(long, value_name = "ACTION", conflicts_with = "key")]
    action: Option<String>,

    /// The request body (sent as application/json unless -H sets a Content-Type)
    #[arg(long, visible_alias = "data", value_name = "BODY")]
    body: Option<String>,

    /// The request method
    #[arg(long, value_name = "METHOD", default_value = "POST", value_parser = shared::method)]
    method: String,

    /// Ask for asynchronous acceptance (Prefer: respond-async): where the worker runs with
    /// ASYNC_ACCEPT=prefer it answers 202 at once, and this program polls the job
    #[arg(long)]
    respond_async: bool,

    /// Attempts in all, the first included
    #[arg(long, value_name = "N", default_value_t = RetryConfig::default().max_attempts)]
    attempts: u32,

    /// Time one attempt may take
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().attempt_timeout))]
    attempt_timeout_ms: u64,

    /// Overall deadline of the retries
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().deadline))]
    deadline_ms: u64,

    /// Backoff base
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().base_backoff))]
    base_ms: u64,

    /// Backoff cap
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().max_backoff))]
    cap_ms: u64,

    /// How long to poll a job the worker accepted (from its first 202); 0: do not poll
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().poll_deadline))]
    poll_deadline_ms: u64,

    /// Shortest wait between two polls
    #[arg(long, value_name = "MS", default_value_t = ms(RetryConfig::default().poll_interval))]
    poll_interval_ms: u64,
}

impl Cli {
    fn key(&self) -> String {
        match (&self.key, &self.id) {
            (Some(key), _) => key.clone(),
            (None, Some(id)) => key_for(id, self.action.as_deref().unwrap_or("charge")),
            // clap requires one of them.
            (None, None) => String::new(),
        }
    }

    fn config(&self) -> RetryConfig {
        let d = Duration::from_millis;
        RetryConfig::default()
            .with_max_attempts(self.attempts)
            .with_attempt_timeout(d(self.attempt_timeout_ms))
            .with_deadline(d(self.deadline_ms))
            .with_base_backoff(d(self.base_ms))
            .with_max_backoff(d(self.cap_ms))
            .with_poll_deadline(d(self.poll_deadline_ms))
            .with_poll_interval(d(self.poll_interval_ms))
    }

    /// The operation, every header on it (the credential included).
    fn operation(&self, path: &str) -> Result<Operation, String> {
        let headers = self.endpoint.headers()?;
        let has_type = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
        let mut op = Operation::new(self.key(), &self.method, path, self.body.clone().unwrap_or_default());
        if self.body.is_some() && !has_type {
            op = op.and_then(|op| op.header("Content-Type", "application/json"));
        }
        if self.respond_async {
            op = op.and_then(|op| op.header("Prefer", "respond-async"));
        }
        for (name, value) in &headers {
            op = op.and_then(|op| op.header(name, value));
        }
        op.map_err(|e| e.to_string())
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `scheme://authority` and the path (with query) of an absolute URL.
fn split_url(url: &str) -> Result<(String, String), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not an absolute URL: {e}"))?;
    let base = parsed.origin().ascii_serialization();
    let path = match parsed.query() {
        Some(query) => format!("{}?{query}", parsed.path()),
        None => parsed.path().to_string(),
    };
    Ok((base, path))
}

fn describe_attempt(a: &AttemptReport) -> String {
    let what = match &a.result {
        AttemptSummary::Answered { status, replayed, problem_type, retry_after } => {
            let mut what = format!("{status}, replayed: {replayed}");
            if let Some(kind) = problem_type.as_deref().and_then(|t| t.rsplit(':').next()) {
                what.push_str(&format!(", problem: {kind}"));
            }
            if let Some(after) = retry_after {
                what.push_str(&format!(", Retry-After: {} s", after.as_secs()));
            }
            what
        }
        AttemptSummary::TransportFailed(e) => format!("no answer ({:?}: {})", e.kind, e.detail()),
        _ => "an attempt of a kind this program does not know".into(),
    };
    format!("attempt {}: {what} in {} ms -> {}", a.number, ms(a.took), describe_decision(a.decision))
}

fn describe_decision(decision: Decision) -> String {
    match decision {
        Decision::Retry { after } => format!("retry in {} ms", ms(after)),
        Decision::Poll { after } => format!("accepted as a job, poll in {} ms", ms(after)),
        Decision::Done => "done".into(),
        Decision::Fail => "final, not retried".into(),
        Decision::NeedsReconciliation => "outcome unknown, not retried".into(),
        Decision::GiveUp(GiveUpReason::AttemptsExhausted) => "no attempts left".into(),
        Decision::GiveUp(GiveUpReason::DeadlineExceeded) => "deadline reached".into(),
        Decision::StillPending => "still pending at the poll deadline".into(),
        _ => "stopped".into(),
    }
}

fn attempt_json(a: &AttemptReport) -> serde_json::Value {
    let mut value = json!({
        "number": a.number,
        "took_ms": ms(a.took),
        "decision": describe_decision(a.decision),
        "wait_ms": a.wait().map(ms),
    });
    match &a.result {
        AttemptSummary::Answered { status, replayed, problem_type, retry_after } => {
            value["status"] = json!(status);
            value["replayed"] = json!(replayed);
            value["problem_type"] = json!(problem_type);
            value["retry_after_ms"] = json!(retry_after.map(ms));
        }
        AttemptSummary::TransportFailed(e) => {
            value["transport_error"] = json!(format!("{:?}", e.kind));
            value["error"] = json!(e.detail());
        }
        _ => {}
    }
    value
}

fn main() -> ExitCode {
    let cli = match shared::parse::<Cli>() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let usage = |why: String| {
        eprintln!("idempotency-edge-send: {why}");
        ExitCode::from(Exit::Usage)
    };
    for warning in cli.endpoint.warnings() {
        eprintln!("idempotency-edge-send: warning: {warning}");
    }
    let (base, path) = match split_url(&cli.endpoint.url) {
        Ok(parts) => parts,
        Err(e) => return usage(e),
    };
    let op = match cli.operation(&path) {
        Ok(op) => op,
        Err(e) => return usage(e),
    };
    let http = match cli.endpoint.http_client(reqwest::Client::builder()) {
        Ok(http) => http,
        Err(e) => return usage(e),
    };
    // The base is the URL's own origin, so the layer covers this one request's URL.
    let client = match Client::with_http(base.as_str(), http, cli.config()) {
        Ok(client) => client,
        Err(e) => return usage(e.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("idempotency-edge-send: cannot start the async runtime: {e}");
            return Exit::Internal.into();
        }
    };
    let out = cli.endpoint.out();
    // The key is the operator's own input here, so showing it is no leak.
    out.line(format!("{} {}{} with Idempotency-Key: {}", op.method(), base, op.path(), op.key()));
    let result = runtime.block_on(client.send_observed(&op, move |a| out.line(describe_attempt(a))));
    let (exit, json) = report(&out, &op, result);
    if let Err(why) = cli.endpoint.write_json(&json) {
        eprintln!("idempotency-edge-send: {why}");
        return Exit::Output.into();
    }
    exit.into()
}

/// Prints the result and gives its exit status and JSON form.
fn report(
    out: &Out,
    op: &Operation,
    result: Result<idempotency_edge_client::Outcome, ClientError>,
) -> (Exit, serde_json::Value) {
    let mut json = json!({ "method": op.method(), "path": op.path(), "key": op.key() });
    let (exit, response, report) = match &result {
        Ok(outcome) => {
            out.line(format!(
                "result: {} after {} attempt(s) in {} ms, replayed: {}",
                outcome.response.status,
                outcome.attempts,
                ms(outcome.elapsed),
                outcome.replayed
            ));
            json["replayed"] = json!(outcome.replayed);
            json["attempts"] = json!(outcome.attempts);
            json["elapsed_ms"] = json!(ms(outcome.elapsed));
            json["history"] = outcome.history.iter().map(attempt_json).collect();
            (Exit::Success, Some(&outcome.response), None)
        }
        Err(e) => {
            out.line(format!("result: {e}, {} ms in all", ms(e.report().elapsed)));
            if let Some(cause) = std::error::Error::source(e) {
                let detail = match cause.downcast_ref::<TransportError>() {
                    Some(transport) => format!("{:?}: {}", transport.kind, transport.detail()),
                    None => shared::chain(cause),
                };
                out.line(format!("cause: {detail}"));
            }
            let exit = match e {
                ClientError::Rejected { .. } => Exit::NotSuccess,
                ClientError::GaveUp { .. } => {
                    out.line("the same key can be sent again later: the worker replays or joins the first execution");
                    Exit::GaveUp
                }
                ClientError::ReconciliationNeeded { .. } => {
                    out.line("check with the payment system whether this operation executed before doing anything else");
                    Exit::Reconcile
                }
                ClientError::StillPending { .. } => {
                    out.line(format!(
                        "the worker holds this operation as a job: run this command again later, with the same key ({}), to poll it",
                        op.key()
                    ));
                    Exit::StillPending
                }
                _ => Exit::Transport,
            };
            json["message"] = json!(e.to_string());
            (exit, e.response(), Some(e.report()))
        }
    };
    if let Some(report) = report {
        json["attempts"] = json!(report.attempts);
        json["elapsed_ms"] = json!(ms(report.elapsed));
        json["history"] = report.history.iter().map(attempt_json).collect();
    }
    if let Some(response) = response {
        out.line(response.text());
        json["status"] = json!(response.status);
        json["body"] = json!(response.text());
    }
    json["result"] = json!(exit.name());
    json["exit_status"] = json!(exit.code());
    (exit, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("idempotency-edge-send").chain(line.iter().copied()))
    }

    #[test]
    fn flags_and_defaults() {
        let cli =
            parse_line(&["--url", "https://x/v1/charges?a=1", "--id", "order-42", "--data", "{}"]).unwrap();
        assert_eq!(cli.key(), "order-42-charge");
        assert_eq!(cli.config(), RetryConfig::default(), "the library's defaults");
        let (base, path) = split_url(&cli.endpoint.url).unwrap();
        assert_eq!((base.as_str(), path.as_str()), ("https://x", "/v1/charges?a=1"));
        let op = cli.operation(&path).unwrap();
        assert_eq!(op.headers(), [("Content-Type".to_string(), "application/json".to_string())]);

        let cli = parse_line(&[
            "--url",
            "https://x/y",
            "--key",
            "k-1",
            "--respond-async",
            "--poll-deadline-ms",
            "0",
            "--attempts",
            "3",
            "-H",
            "Content-Type: text/plain",
            "--body",
            "hi",
        ])
        .unwrap();
        assert_eq!(cli.key(), "k-1");
        assert_eq!(cli.config().poll_deadline, Duration::ZERO);
        assert_eq!(cli.config().max_attempts, 3);
        let op = cli.operation("/y").unwrap();
        assert!(op.headers().contains(&("Prefer".to_string(), "respond-async".to_string())));
        assert!(!op.headers().iter().any(|(_, v)| v == "application/json"), "-H sets the type");
    }

    #[test]
    fn bad_lines_are_refused() {
        for line in [
            &["--url", "https://x/y"][..],
            &["--url", "https://x/y", "--key", "k", "--id", "i"][..],
            &["--url", "https://x/y", "--key", "k", "--action", "refund"][..],
            &["--url", "https://x/y", "--key", "k", "--attempts", "many"][..],
            &["--key", "k"][..],
        ] {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
        let help = parse_line(&["--help"]).unwrap_err().to_string();
        assert!(help.contains("Exit status") && help.contains("--credential-env"), "{help}");
    }
}
