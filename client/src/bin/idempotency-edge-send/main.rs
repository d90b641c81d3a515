//! `idempotency-edge-send`: one operation through the operation client
//! (`idempotency_edge_client::Client`), every attempt shown.
//!
//! ```sh
//! cargo run -p idempotency-edge-client --features cli --bin idempotency-edge-send -- \
//!   --url https://127.0.0.1:8787/v1/charges --key order-42-charge --data '{"amount":1000}'
//! ```
//!
//! Prints each attempt (status or transport error, replayed, how long it took, the wait
//! before the next) and the final result. Exit status: 0 for a 2xx answer, 1 for a final
//! non-2xx answer, 2 when retries ran out, 3 when the outcome is unknown and needs
//! reconciliation, 4 for a transport failure that retrying cannot fix, 64 for bad usage.
//! This CLI validates its arguments before sending (every request it would build is one
//! reqwest can build) and stacks no other middleware, so 4 is a guard, not an answer it
//! gives to any input; the library's `ClientError::Transport` behind it is tested in
//! `client/tests/middleware.rs` (`errors_of_inner_layers_are_not_retried`). Connection and
//! TLS failures are retried, so they end in 2.
//! `--ca-cert FILE` trusts a private root as well (a staging deployment, `wrangler dev
//! --local-protocol https` with a certificate of your own).

use std::process::ExitCode;
use std::time::Duration;

use idempotency_edge_client::{
    key_for, AttemptReport, AttemptSummary, Client, ClientError, Decision, GiveUpReason, Operation,
    RetryConfig,
};

const USAGE: &str = "\
usage: idempotency-edge-send --url URL (--key KEY | --id BUSINESS_ID [--action ACTION]) [options]

  --url URL                 absolute https:// (or http://) URL of the covered endpoint
  --key KEY                 the operation's Idempotency-Key, sent on every attempt
  --id ID [--action A]      derive the key from a business id: ID-A (A defaults to charge)
  --data BODY               request body (sent as application/json unless -H sets a type)
  --method METHOD           default POST
  -H, --header 'Name: v'    an extra header (repeatable)
  --attempts N              attempts in all (default 8)
  --attempt-timeout-ms MS   time one attempt may take (default 35000)
  --deadline-ms MS          overall deadline (default 120000)
  --base-ms MS              backoff base (default 200)
  --cap-ms MS               backoff cap (default 10000)
  --ca-cert FILE            trust this PEM root certificate as well

exit status: 0 success, 1 rejected, 2 gave up, 3 reconciliation needed, 4 transport failure";

struct Args {
    url: String,
    key: String,
    method: String,
    data: Option<String>,
    headers: Vec<(String, String)>,
    config: RetryConfig,
    ca_cert: Option<String>,
}

fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut url = None;
    let mut key = None;
    let mut id = None;
    let mut action = "charge".to_string();
    let mut method = "POST".to_string();
    let mut data = None;
    let mut headers = Vec::new();
    let mut config = RetryConfig::default();
    let mut ca_cert = None;
    let millis = |flag: &str, value: String| -> Result<Duration, String> {
        value
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| format!("{flag} takes milliseconds, got {value:?}"))
    };
    while let Some(flag) = argv.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = Some(value),
            "--key" => key = Some(value),
            "--id" => id = Some(value),
            "--action" => action = value,
            "--method" => method = value.to_ascii_uppercase(),
            "--data" => data = Some(value),
            "-H" | "--header" => {
                let (name, v) =
                    value.split_once(':').ok_or_else(|| format!("header {value:?} is not Name: value"))?;
                headers.push((name.trim().to_string(), v.trim().to_string()));
            }
            "--attempts" => {
                config.max_attempts =
                    value.parse().map_err(|_| format!("--attempts takes a number, got {value:?}"))?
            }
            "--attempt-timeout-ms" => config.attempt_timeout = millis(&flag, value)?,
            "--deadline-ms" => config.deadline = millis(&flag, value)?,
            "--base-ms" => config.base_backoff = millis(&flag, value)?,
            "--cap-ms" => config.max_backoff = millis(&flag, value)?,
            "--ca-cert" => ca_cert = Some(value),
            other => return Err(format!("unknown option {other}")),
        }
    }
    let url = url.ok_or("--url is required")?;
    let key = match (key, id) {
        (Some(key), None) => key,
        (None, Some(id)) => key_for(id, &action),
        (Some(_), Some(_)) => return Err("give --key or --id, not both".into()),
        (None, None) => return Err("--key (or --id) is required: one key per operation".into()),
    };
    Ok(Args { url, key, method, data, headers, config, ca_cert })
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn print_attempt(a: &AttemptReport) {
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
    let next = match a.decision {
        Decision::Retry { after } => format!("retry in {} ms", ms(after)),
        Decision::Done => "done".into(),
        Decision::Fail => "final, not retried".into(),
        Decision::NeedsReconciliation => "outcome unknown, not retried".into(),
        Decision::GiveUp(GiveUpReason::AttemptsExhausted) => "no attempts left".into(),
        Decision::GiveUp(GiveUpReason::DeadlineExceeded) => "deadline reached".into(),
        _ => "stopped".into(),
    };
    println!("attempt {}: {what} in {} ms -> {next}", a.number, ms(a.took));
}

/// `scheme://authority` and the path (with query) of an absolute URL.
fn split_url(url: &str) -> Result<(String, String), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not an absolute URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?}: only http:// and https:// URLs are supported"));
    }
    let base = parsed.origin().ascii_serialization();
    let path = match parsed.query() {
        Some(query) => format!("{}?{query}", parsed.path()),
        None => parsed.path().to_string(),
    };
    Ok((base, path))
}

fn http_client(ca_cert: Option<&str>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = ca_cert {
        let pem = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let root = reqwest::Certificate::from_pem(&pem).map_err(|e| format!("{path}: {e}"))?;
        builder = builder.add_root_certificate(root);
    }
    builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))
}

fn main() -> ExitCode {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("idempotency-edge-send: cannot start the async runtime: {e}");
            ExitCode::from(70)
        }
    }
}

async fn run() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("idempotency-edge-send: {e}\n");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if e.is_empty() { 0 } else { 64 });
        }
    };
    let (base, path) = match split_url(&args.url) {
        Ok(parts) => parts,
        Err(e) => {
            eprintln!("idempotency-edge-send: {e}");
            return ExitCode::from(64);
        }
    };
    let has_type = args.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    let mut op = Operation::new(&args.key, &args.method, &path, args.data.clone().unwrap_or_default());
    if args.data.is_some() && !has_type {
        op = op.and_then(|op| op.header("Content-Type", "application/json"));
    }
    for (name, value) in &args.headers {
        op = op.and_then(|op| op.header(name, value));
    }
    let op = match op {
        Ok(op) => op,
        Err(e) => {
            eprintln!("idempotency-edge-send: {e}");
            return ExitCode::from(64);
        }
    };

    let http = match http_client(args.ca_cert.as_deref()) {
        Ok(http) => http,
        Err(e) => {
            eprintln!("idempotency-edge-send: {e}");
            return ExitCode::from(64);
        }
    };
    // The key is the operator's own input here, so showing it is no leak.
    println!("{} {}{} with Idempotency-Key: {}", op.method(), base, op.path(), op.key());
    let client = Client::with_http(base, http, args.config);
    let result = client.send_observed(&op, print_attempt).await;
    match result {
        Ok(outcome) => {
            println!(
                "result: {} after {} attempt(s) in {} ms, replayed: {}",
                outcome.response.status,
                outcome.attempts,
                ms(outcome.elapsed),
                outcome.replayed
            );
            println!("{}", outcome.response.text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("result: {e}, {} ms in all", ms(e.report().elapsed));
            if let Some(response) = e.response() {
                println!("{}", response.text());
            }
            let code = match e {
                ClientError::Rejected { .. } => 1,
                ClientError::GaveUp { .. } => {
                    println!("the same key can be sent again later: the worker replays or joins the first execution");
                    2
                }
                ClientError::ReconciliationNeeded { .. } => {
                    println!("check with the payment system whether this operation executed before doing anything else");
                    3
                }
                _ => 4,
            };
            ExitCode::from(code)
        }
    }
}
