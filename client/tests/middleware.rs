//! The middleware and the operation client against a scripted HTTP server on loopback: real
//! sockets and real reqwest, with answers the test chooses attempt by attempt. Waits are
//! recorded instead of slept, with the jitter fixed at 1.0, so each wait is exact.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use http::Extensions;
#[cfg(feature = "blocking")]
use idempotency_edge_client::blocking;
use idempotency_edge_client::{
    AttemptObserver, AttemptReport, AttemptSummary, Attempts, Client, ClientError, Decision, GiveUpReason,
    IdempotencyError, IdempotencyMiddleware, Operation, RetryConfig, SentKey,
};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};

/// What the server does with one request (one connection each).
#[derive(Clone, Debug)]
enum Action {
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then close without a word: a reply lost after the request arrived.
    Close,
    /// Read the request and say nothing for this long (past the attempt timeout).
    Hang(Duration),
}

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Action {
    Action::Answer {
        status,
        headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        body: body.to_string(),
    }
}

fn problem(status: u16, kind: &str, retry_after: Option<&str>) -> Action {
    let mut headers = vec![("content-type", "application/problem+json")];
    if let Some(seconds) = retry_after {
        headers.push(("retry-after", seconds));
    }
    let body = format!(
        r#"{{"type":"urn:idempotency-edge:problem:{kind}","title":"t","status":{status},"detail":"d"}}"#
    );
    answer(status, &headers, &body)
}

/// A request as the server read it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

struct Scripted {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    fn start(script: Vec<Action>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let record = seen.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, script) = (record.clone(), script.clone());
                thread::spawn(move || serve(stream, &seen, &script));
            }
        });
        Scripted { addr, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>, script: &Mutex<VecDeque<Action>>) {
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or("").split(' ');
    let method = request_line.next().unwrap_or("").to_string();
    let target = request_line.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() - head_end < length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf[head_end..head_end + length].to_vec();
    seen.lock().unwrap().push(Seen { method, target, headers, body });
    let action = script.lock().unwrap().pop_front().expect("the script ran out: too many attempts");
    match action {
        Action::Answer { status, headers, body } => {
            let mut out = format!("HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\n", body.len());
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str("connection: close\r\n\r\n");
            out.push_str(&body);
            let _ = stream.write_all(out.as_bytes());
        }
        Action::Close => {}
        Action::Hang(d) => thread::sleep(d),
    }
    let _ = stream.shutdown(Shutdown::Both);
}

fn config() -> RetryConfig {
    RetryConfig::default()
        .with_base_backoff(Duration::from_millis(100))
        .with_max_backoff(Duration::from_secs(1))
        .with_max_attempts(5)
        .with_deadline(Duration::from_secs(60))
        .with_attempt_timeout(Duration::from_secs(10))
}

type Waits = Arc<Mutex<Vec<Duration>>>;

/// The middleware for this base URL, with jitter 1.0 and recorded waits.
fn middleware(base: &str, config: RetryConfig) -> (IdempotencyMiddleware, Waits) {
    let waits: Waits = Arc::default();
    let record = waits.clone();
    let m = IdempotencyMiddleware::for_base_urls([base]).unwrap().with_config(config);
    let m = m.with_random(|| 1.0).with_sleep(move |d| {
        record.lock().unwrap().push(d);
        async {}
    });
    (m, waits)
}

/// A client whose middleware covers the whole scripted server.
fn stack(server: &Scripted, config: RetryConfig) -> (ClientWithMiddleware, Waits) {
    let (m, waits) = middleware(&server.url(""), config);
    (ClientBuilder::new(reqwest::Client::new()).with(m).build(), waits)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const BODY: &str = r#"{"amount":1000}"#;

fn reconciliation(e: &reqwest_middleware::Error) -> &IdempotencyError {
    IdempotencyError::from_middleware(e)
        .unwrap_or_else(|| panic!("expected the middleware's error, got {e:?}"))
}

#[tokio::test]
async fn lost_replies_are_retried_with_the_same_key_and_body() {
    let server = Scripted::start(vec![
        Action::Close,
        Action::Hang(Duration::from_secs(5)),
        answer(201, &[("Idempotent-Replayed", "true")], r#"{"id":"ch_1"}"#),
    ]);
    let (client, waits) = stack(&server, config().with_attempt_timeout(ms(500)));
    let observed: Arc<Mutex<Vec<AttemptReport>>> = Arc::default();
    let record = observed.clone();
    let response = client
        .post(server.url("/v1/charges?x=1"))
        .header("Idempotency-Key", "order-42-charge")
        .header("Authorization", "Bearer t")
        .header("Content-Type", "application/json")
        .body(BODY)
        .with_extension(AttemptObserver::new(move |a| record.lock().unwrap().push(a.clone())))
        .send()
        .await
        .expect("a replayed 201 in the end");
    assert_eq!(response.status(), 201);
    assert_eq!(response.url().as_str(), server.url("/v1/charges?x=1"), "the rebuilt response keeps its URL");
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    assert_eq!(response.text().await.unwrap(), r#"{"id":"ch_1"}"#);
    assert_eq!(*waits.lock().unwrap(), [ms(100), ms(200)]);

    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed.len(), 3);
    assert!(matches!(&observed[0].result, AttemptSummary::TransportFailed(_)), "{observed:?}");
    match &observed[1].result {
        AttemptSummary::TransportFailed(e) => {
            assert_eq!(e.kind, idempotency_edge_client::TransportErrorKind::Timeout)
        }
        other => panic!("the hanging attempt should time out: {other:?}"),
    }
    assert_eq!(observed[2].decision, Decision::Done);

    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.target, "/v1/charges?x=1");
        assert_eq!(s.header("idempotency-key"), Some("order-42-charge"), "the same key on every attempt");
        assert_eq!(s.header("authorization"), Some("Bearer t"));
        assert_eq!(s.header("content-type"), Some("application/json"));
        assert_eq!(s.body, BODY.as_bytes(), "the same body bytes on every attempt");
    }
}

#[tokio::test]
async fn a_covered_request_without_a_key_gets_one_for_all_its_attempts() {
    let server = Scripted::start(vec![answer(429, &[("Retry-After", "1")], ""), answer(201, &[], "{}")]);
    let (client, _) = stack(&server, config());
    let request = client.post(server.url("/v1/charges")).body(BODY).build().unwrap();
    let mut extensions = Extensions::new();
    let response = client.execute_with_extensions(request, &mut extensions).await.expect("201");
    assert_eq!(response.status(), 201);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let key = seen[0].header("idempotency-key").expect("a key was added").to_string();
    assert_eq!(key.len(), 36, "a UUID: {key}");
    assert_eq!(seen[1].header("idempotency-key"), Some(key.as_str()), "the retry sends the same key");
    assert_eq!(extensions.get::<SentKey>(), Some(&SentKey(key)));
    assert_eq!(extensions.get::<Attempts>().map(|a| a.0.len()), Some(2));

    // Two requests, two keys.
    let server = Scripted::start(vec![answer(201, &[], "{}"), answer(201, &[], "{}")]);
    let (client, _) = stack(&server, config());
    for _ in 0..2 {
        client.patch(server.url("/v1/charges/1")).body("{}").send().await.unwrap();
    }
    let seen = server.seen();
    assert_ne!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"));
}

#[tokio::test]
async fn uncovered_methods_pass_through_untouched() {
    let server = Scripted::start(vec![answer(503, &[("Retry-After", "1")], "busy"), answer(502, &[], "")]);
    let (client, waits) = stack(&server, config());
    let response = client.get(server.url("/v1/charges/1")).send().await.unwrap();
    assert_eq!(response.status(), 503, "not retried");
    let (custom, _) = middleware(&server.url(""), config());
    let put_only = ClientBuilder::new(reqwest::Client::new())
        .with(custom.covered_methods([reqwest::Method::PUT]))
        .build();
    let response = put_only.post(server.url("/v1/charges")).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 502, "POST is not covered here");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.header("idempotency-key").is_none()), "no key added: {seen:?}");
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn requests_outside_the_base_urls_pass_through_untouched() {
    // The worker is at /v1 of one server. Another server (another port: another origin) and
    // the first one's other paths are APIs that are not behind the worker: there a random
    // key would mean nothing and a retry could execute a payment twice.
    let worker = Scripted::start(vec![
        answer(502, &[], "bad gateway"),
        answer(502, &[], "bad gateway"),
        answer(502, &[], "bad gateway"),
        answer(429, &[("Retry-After", "1")], ""),
        answer(201, &[], "{}"),
    ]);
    let other = Scripted::start(vec![Action::Close, answer(503, &[("Retry-After", "1")], "busy")]);
    let (m, waits) = middleware(&worker.url("/v1"), config());
    let client = ClientBuilder::new(reqwest::Client::new()).with(m).build();

    // Another host: a lost reply is reqwest's own error, sent once; a 503 is handed on as
    // it is, not judged.
    let e = client.post(other.url("/v1/charges")).body(BODY).send().await.expect_err("the lost reply");
    assert!(matches!(e, reqwest_middleware::Error::Reqwest(_)), "not the layer's: {e:?}");
    let response = client.post(other.url("/v1/charges")).body(BODY).send().await.expect("handed on");
    assert_eq!(response.status(), 503);
    assert_eq!(response.text().await.unwrap(), "busy");
    // The same server, outside the base's path: a 502 is handed on, not a reconciliation.
    for path in ["/v10/charges", "/v2/charges", "/"] {
        let response = client.post(worker.url(path)).body(BODY).send().await.expect("handed on");
        assert_eq!(response.status(), 502, "{path}");
    }
    let mut untouched = other.seen();
    untouched.extend(worker.seen());
    assert_eq!(untouched.len(), 5, "each sent once: {untouched:?}");
    for s in &untouched {
        assert_eq!(s.header("idempotency-key"), None, "no key added: {s:?}");
        assert_eq!(s.body, BODY.as_bytes());
    }
    assert!(waits.lock().unwrap().is_empty(), "no retry");

    // Under the base: covered, as before.
    let response = client.post(worker.url("/v1/charges")).body(BODY).send().await.expect("201");
    assert_eq!(response.status(), 201);
    let covered = &worker.seen()[3..];
    assert_eq!(covered.len(), 2, "retried after the 429");
    assert!(covered[0].header("idempotency-key").is_some_and(|k| k.len() == 36), "{covered:?}");
    assert_eq!(covered[0].header("idempotency-key"), covered[1].header("idempotency-key"));
    assert_eq!(*waits.lock().unwrap(), [ms(1000)]);
}

#[test]
fn the_layer_covers_only_the_base_urls_it_is_given() {
    let m = IdempotencyMiddleware::for_base_urls(["https://pay.example.com/v1/", "http://127.0.0.1:8787"])
        .expect("two base URLs");
    let url = |u: &str| reqwest::Url::parse(u).unwrap();
    let post = reqwest::Method::POST;
    assert!(m.covers(&post, &url("https://pay.example.com/v1/charges")));
    assert!(m.covers(&post, &url("http://127.0.0.1:8787/anything")));
    assert!(m.covers(&reqwest::Method::PATCH, &url("https://pay.example.com:443/v1/charges/ch_1")));
    assert!(
        !m.covers(&reqwest::Method::GET, &url("https://pay.example.com/v1/charges")),
        "GET is not covered"
    );
    for other in [
        "https://pay.example.com/v10/charges",
        "https://api.example.com/v1/charges",
        "http://pay.example.com/v1/charges",
        "http://127.0.0.1:8788/v1/charges",
    ] {
        assert!(!m.covers(&post, &url(other)), "{other}");
    }
    assert_eq!(m.base_urls().len(), 2);
    // No layer covers everything, or nothing.
    let none: [&str; 0] = [];
    assert!(IdempotencyMiddleware::for_base_urls(none).is_err(), "an empty list is refused");
    for bad in ["ftp://pay.example.com", "pay.example.com", "https://pay.example.com/v1?x=1"] {
        assert!(IdempotencyMiddleware::for_base_urls(["https://pay.example.com", bad]).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn in_progress_and_429_wait_for_retry_after() {
    let server = Scripted::start(vec![
        problem(409, "in-progress", Some("3")),
        answer(429, &[("Retry-After", "2")], "{}"),
        problem(502, "origin-unreachable", Some("1")),
        problem(503, "storage-unavailable", None),
        answer(200, &[], "ok"),
    ]);
    let (client, waits) = stack(&server, config());
    let response =
        client.post(server.url("/x")).header("Idempotency-Key", "k").body("{}").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        *waits.lock().unwrap(),
        [ms(3000), ms(2000), ms(1000), ms(800)],
        "Retry-After over the backoff"
    );
    assert_eq!(server.seen().len(), 5);
}

#[tokio::test]
async fn final_answers_are_handed_on_as_they_are() {
    for (status, action) in [
        (422, problem(422, "key-reused", None)),
        (400, problem(400, "invalid-key", None)),
        (402, answer(402, &[("content-type", "application/json")], r#"{"declined":true}"#)),
        (409, answer(409, &[("content-type", "application/json")], r#"{"conflict":true}"#)),
    ] {
        let body = match &action {
            Action::Answer { body, .. } => body.clone(),
            _ => unreachable!(),
        };
        let server = Scripted::start(vec![action]);
        let (client, waits) = stack(&server, config());
        let response =
            client.post(server.url("/x")).header("Idempotency-Key", "k").body("{}").send().await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(response.text().await.unwrap(), body, "{status}: the body is handed on");
        assert_eq!(server.seen().len(), 1, "{status} is not retried");
        assert!(waits.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn outcome_unknown_is_a_typed_error_with_the_key() {
    let server = Scripted::start(vec![problem(502, "outcome-unknown", Some("1"))]);
    let (client, waits) = stack(&server, config());
    let e = client
        .post(server.url("/x"))
        .header("Idempotency-Key", "order-7-charge")
        .body("{}")
        .send()
        .await
        .expect_err("an unknown outcome is no response");
    let e = reconciliation(&e);
    assert!(e.needs_reconciliation(), "{e:?}");
    assert_eq!(e.key(), Some("order-7-charge"));
    assert_eq!(e.response().map(|r| r.status), Some(502));
    assert_eq!(e.report().map(|r| r.attempts), Some(1));
    assert!(e.to_string().contains("reconcile"), "{e}");
    assert!(!format!("{e:?}").contains("order-7-charge"), "Debug hides the key: {e:?}");
    assert!(!e.to_string().contains("order-7-charge"), "Display hides the key: {e}");
    assert_eq!(server.seen().len(), 1, "never retried");
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_5xx_that_is_not_the_workers_asks_for_reconciliation() {
    for (status, content_type) in [
        (500, "application/json"),
        (502, "text/html"),
        (503, "text/plain"),
        (504, "text/html"),
        (520, "text/html"),
        (524, "text/html"),
    ] {
        let server = Scripted::start(vec![answer(
            status,
            &[("content-type", content_type), ("Retry-After", "1")],
            "x",
        )]);
        let (client, waits) = stack(&server, config());
        let e = client
            .post(server.url("/x"))
            .header("Idempotency-Key", "k")
            .body("{}")
            .send()
            .await
            .expect_err("the request may have executed: not a final answer");
        let e = reconciliation(&e);
        assert!(e.needs_reconciliation(), "{status}: {e:?}");
        assert_eq!(e.response().map(|r| (r.status, r.text())), Some((status, "x".to_string())), "{status}");
        assert_eq!(server.seen().len(), 1, "{status} is not retried");
        assert!(waits.lock().unwrap().is_empty(), "{status}");
    }
    // The worker's own invalid-config says nothing was forwarded: a final answer.
    let server = Scripted::start(vec![problem(500, "invalid-config", None)]);
    let (client, _) = stack(&server, config());
    let response =
        client.post(server.url("/x")).header("Idempotency-Key", "k").body("{}").send().await.unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn retryable_to_the_end_is_a_give_up_with_the_last_answer() {
    let server = Scripted::start((0..3).map(|_| answer(429, &[("Retry-After", "1")], "{}")).collect());
    let (client, waits) = stack(&server, config().with_max_attempts(3));
    let e = client.post(server.url("/x")).body("{}").send().await.expect_err("gave up");
    match reconciliation(&e) {
        IdempotencyError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report, key } => {
            assert_eq!(last.status, 429);
            assert_eq!(report.attempts, 3);
            assert_eq!(key.len(), 36, "the added key is handed back, to send again later");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(*waits.lock().unwrap(), [ms(1000), ms(1000)]);

    // A Retry-After past the deadline gives up at once instead of sleeping in vain.
    let server = Scripted::start(vec![answer(429, &[("Retry-After", "120")], "{}")]);
    let (client, waits) = stack(&server, config());
    let e = client.post(server.url("/x")).body("{}").send().await.expect_err("gave up");
    assert!(matches!(
        reconciliation(&e),
        IdempotencyError::GaveUp { reason: GiveUpReason::DeadlineExceeded, .. }
    ));
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_streaming_body_is_refused_before_anything_is_sent() {
    let server = Scripted::start(vec![]);
    let (client, _) = stack(&server, config());
    let stream = futures_util::stream::iter(vec![Ok::<_, std::io::Error>("{}")]);
    let e = client
        .post(server.url("/x"))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .expect_err("a stream cannot be sent twice");
    assert!(matches!(IdempotencyError::from_middleware(&e), Some(IdempotencyError::UnbufferedBody)), "{e:?}");
    assert!(server.seen().is_empty());
}

/// Fails every request: another layer's error.
struct Refuse;

#[async_trait::async_trait]
impl Middleware for Refuse {
    async fn handle(
        &self,
        _req: reqwest::Request,
        _extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        Err(reqwest_middleware::Error::Middleware(anyhow::anyhow!("refused by policy")))
    }
}

#[tokio::test]
async fn errors_of_inner_layers_are_not_retried() {
    let (m, waits) = middleware("http://127.0.0.1:9", config());
    let client = ClientBuilder::new(reqwest::Client::new()).with(m).with(Refuse).build();
    let e = client.post("http://127.0.0.1:9/x").body("{}").send().await.expect_err("refused");
    assert!(e.to_string().contains("refused by policy"), "{e}");
    assert!(IdempotencyError::from_middleware(&e).is_none());
    assert!(waits.lock().unwrap().is_empty());
}

fn operation_client(server: &Scripted, config: RetryConfig) -> Client {
    let (m, _) = middleware(&server.url(""), config);
    Client::with_stack(
        format!("http://{}", server.addr),
        ClientBuilder::new(reqwest::Client::new()).with(m).build(),
    )
    .unwrap()
}

fn charge() -> Operation {
    Operation::post_json("order-42-charge", "/v1/charges", BODY)
        .unwrap()
        .header("Authorization", "Bearer t")
        .unwrap()
}

#[tokio::test]
async fn the_operation_client_reports_every_attempt() {
    let server = Scripted::start(vec![Action::Close, answer(201, &[("Idempotent-Replayed", "true")], "{}")]);
    let outcome = operation_client(&server, config()).send(&charge()).await.expect("201");
    assert_eq!((outcome.attempts, outcome.replayed, outcome.response.status), (2, true, 201));
    assert_eq!(outcome.history[0].wait(), Some(ms(100)));
    assert_eq!(outcome.history[1].decision, Decision::Done);
    let seen = server.seen();
    assert!(seen
        .iter()
        .all(|s| s.header("idempotency-key") == Some("order-42-charge") && s.body == BODY.as_bytes()));

    let server = Scripted::start(vec![problem(422, "key-reused", None)]);
    match operation_client(&server, config()).send(&charge()).await {
        Err(ClientError::Rejected { response, report }) => {
            assert_eq!(response.status, 422);
            assert_eq!(report.attempts, 1);
        }
        other => panic!("{other:?}"),
    }

    let server = Scripted::start(vec![problem(502, "outcome-unknown", None)]);
    let e = operation_client(&server, config()).send(&charge()).await.expect_err("unknown");
    assert!(e.needs_reconciliation() && e.attempts() == 1, "{e:?}");

    let server = Scripted::start(vec![answer(429, &[], ""), answer(429, &[], "")]);
    match operation_client(&server, config().with_max_attempts(2)).send(&charge()).await {
        Err(ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report }) => {
            assert_eq!((last.status, report.attempts), (429, 2));
        }
        other => panic!("{other:?}"),
    }
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_facade_sends_operations() {
    let server = Scripted::start(vec![answer(429, &[("Retry-After", "1")], ""), answer(201, &[], "{}")]);
    let (m, waits) = middleware(&server.url(""), config());
    let stack = ClientBuilder::new(reqwest::Client::new()).with(m).build();
    let client = Client::with_stack(format!("http://{}", server.addr), stack).unwrap();
    let client = blocking::Client::from_async(client).expect("a runtime");
    let outcome = client.send(&charge()).expect("201 after one retry");
    assert_eq!((outcome.attempts, outcome.response.status), (2, 201));
    assert_eq!(*waits.lock().unwrap(), [ms(1000)]);
}

#[tokio::test]
async fn transport_failures_keep_their_source() {
    use std::error::Error as _;
    // Through the middleware: a give-up whose last attempt got no answer.
    let server = Scripted::start(vec![Action::Close, Action::Close]);
    let (client, _) = stack(&server, config().with_max_attempts(2));
    let e = client.post(server.url("/x")).body("{}").send().await.expect_err("gave up");
    let e = reconciliation(&e);
    let transport = e
        .source()
        .and_then(|s| s.downcast_ref::<idempotency_edge_client::TransportError>())
        .unwrap_or_else(|| panic!("the last transport failure is the source: {e:?}"));
    let below = transport.source().unwrap_or_else(|| panic!("and reqwest's error below it: {transport:?}"));
    assert!(below.downcast_ref::<reqwest::Error>().is_some(), "{below:?}");
    assert!(transport.detail().starts_with(&transport.message), "{}", transport.detail());
    assert!(transport.detail().len() > transport.message.len(), "the causes too: {}", transport.detail());

    // Through the operation client: the same, as a ClientError.
    let server = Scripted::start(vec![Action::Close, Action::Close]);
    let e =
        operation_client(&server, config().with_max_attempts(2)).send(&charge()).await.expect_err("gave up");
    assert!(matches!(e, ClientError::GaveUp { last: Err(_), .. }), "{e:?}");
    let transport = e.source().and_then(|s| s.downcast_ref::<idempotency_edge_client::TransportError>());
    assert!(transport.and_then(|t| t.source()).is_some_and(|s| s.is::<reqwest::Error>()), "{e:?}");
    assert!(
        !e.to_string().contains(&transport.map(|t| t.message.clone()).unwrap_or_default()),
        "named once: {e}"
    );

    // Another layer's failure keeps it as the source.
    let (m, _) = middleware("http://127.0.0.1:9", config());
    let stack = ClientBuilder::new(reqwest::Client::new()).with(m).with(Refuse).build();
    let e =
        Client::with_stack("http://127.0.0.1:9", stack).unwrap().send(&charge()).await.expect_err("refused");
    assert!(matches!(e, ClientError::Transport { .. }), "{e:?}");
    let mut chain = Vec::new();
    let mut source = e.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    assert!(chain.iter().any(|s| s.contains("refused by policy")), "{chain:?}");
}

// ---------------------------------------------------------------------------------------
// Asynchronous acceptance: 202 with Preference-Applied: respond-async is polled

fn accepted(retry_after: &str) -> Action {
    answer(
        202,
        &[
            ("content-type", "application/json"),
            ("preference-applied", "respond-async"),
            ("retry-after", retry_after),
        ],
        r#"{"status":"pending"}"#,
    )
}

#[tokio::test]
async fn a_202_accepted_as_a_job_is_polled_until_its_answer() {
    let server = Scripted::start(vec![
        accepted("3"),
        accepted("2"),
        answer(
            201,
            &[("Idempotent-Replayed", "true"), ("content-type", "application/json")],
            r#"{"id":"ch_9"}"#,
        ),
    ]);
    let (client, waits) = stack(&server, config());
    let mut extensions = Extensions::new();
    let request = client
        .post(server.url("/v1/charges"))
        .header("Idempotency-Key", "order-9-charge")
        .header("Prefer", "respond-async")
        .header("Content-Type", "application/json")
        .body(BODY)
        .build()
        .unwrap();
    let response = client.execute_with_extensions(request, &mut extensions).await.expect("the job's answer");
    assert_eq!(response.status(), 201, "the caller gets the final answer, not the 202");
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    assert_eq!(response.text().await.unwrap(), r#"{"id":"ch_9"}"#);
    assert_eq!(*waits.lock().unwrap(), [ms(3000), ms(2000)], "each poll waits the 202's Retry-After");

    let attempts = extensions.get::<Attempts>().expect("the attempts").0.clone();
    let decisions: Vec<Decision> = attempts.iter().map(|a| a.decision).collect();
    assert_eq!(
        decisions,
        [Decision::Poll { after: ms(3000) }, Decision::Poll { after: ms(2000) }, Decision::Done]
    );
    // A poll is the same request again: same key, method, target, headers and body.
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!((s.method.as_str(), s.target.as_str()), ("POST", "/v1/charges"));
        assert_eq!(s.header("idempotency-key"), Some("order-9-charge"));
        assert_eq!(s.header("prefer"), Some("respond-async"));
        assert_eq!(s.body, BODY.as_bytes());
    }
}

#[tokio::test]
async fn polls_wait_at_least_the_poll_interval_and_survive_a_lost_reply() {
    let server = Scripted::start(vec![
        accepted("0"),
        Action::Close,
        problem(409, "in-progress", Some("1")),
        answer(201, &[("Idempotent-Replayed", "true")], "{}"),
    ]);
    let (client, waits) = stack(&server, config().with_poll_interval(ms(1500)));
    let response = client
        .post(server.url("/x"))
        .header("Idempotency-Key", "k")
        .header("Prefer", "respond-async")
        .body("{}")
        .send()
        .await
        .expect("201 in the end");
    assert_eq!(response.status(), 201);
    // The poll interval over a zero Retry-After; then the lost reply and the 409 are retried
    // as before (backoff 100 ms, then Retry-After over 200 ms).
    assert_eq!(*waits.lock().unwrap(), [ms(1500), ms(100), ms(1000)]);
    assert_eq!(server.seen().len(), 4);
}

#[tokio::test]
async fn a_202_that_is_not_a_job_is_a_final_answer() {
    // An origin's own 202, without the preference applied: handed on as it is.
    let server = Scripted::start(vec![answer(202, &[("retry-after", "1")], r#"{"queued":true}"#)]);
    let (client, waits) = stack(&server, config());
    let response =
        client.post(server.url("/x")).header("Idempotency-Key", "k").body("{}").send().await.unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(response.text().await.unwrap(), r#"{"queued":true}"#);
    assert_eq!(server.seen().len(), 1);
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_job_still_pending_at_the_poll_deadline_is_an_error_with_the_key() {
    // The real clock: polls 1 s apart, a poll deadline of 1.5 s. The first 202 waits 1 s;
    // the second would poll again at 2 s, past the deadline.
    let server = Scripted::start(vec![accepted("1"), accepted("1")]);
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(
            IdempotencyMiddleware::for_base_urls([server.url("")])
                .unwrap()
                .with_config(config().with_poll_deadline(ms(1500))),
        )
        .build();
    let started = std::time::Instant::now();
    let e = client
        .post(server.url("/v1/charges"))
        .header("Idempotency-Key", "order-11-charge")
        .header("Prefer", "respond-async")
        .body(BODY)
        .send()
        .await
        .expect_err("still pending");
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After was waited out");
    let e = reconciliation(&e);
    assert!(e.is_still_pending(), "{e:?}");
    assert!(!e.needs_reconciliation());
    assert_eq!(e.key(), Some("order-11-charge"), "the key to poll with later");
    assert_eq!(e.response().map(|r| r.status), Some(202), "the last 202");
    assert_eq!(e.report().map(|r| r.attempts), Some(2));
    let text = e.to_string();
    assert!(text.contains("still pending"), "{text}");
    assert!(text.contains("same Idempotency-Key"), "{text}");
    assert!(!text.contains("order-11-charge") && !format!("{e:?}").contains("order-11-charge"), "{e:?}");
    assert_eq!(server.seen().len(), 2);

    // A Retry-After past the poll deadline hands the job back at once, without a wait.
    let server = Scripted::start(vec![accepted("1"), accepted("600")]);
    let (client, waits) = stack(&server, config());
    let e = client
        .post(server.url("/x"))
        .header("Idempotency-Key", "k")
        .header("Prefer", "respond-async")
        .body("{}")
        .send()
        .await
        .expect_err("still pending");
    assert!(reconciliation(&e).is_still_pending(), "{e:?}");
    assert_eq!(*waits.lock().unwrap(), [ms(1000)]);

    // A zero poll deadline: no polling, the first 202 comes back as StillPending.
    let server = Scripted::start(vec![accepted("1")]);
    let (client, waits) = stack(&server, config().with_poll_deadline(Duration::ZERO));
    let e =
        client.post(server.url("/x")).header("Prefer", "respond-async").body("{}").send().await.unwrap_err();
    let e = reconciliation(&e);
    assert!(e.is_still_pending() && e.key().is_some_and(|k| k.len() == 36), "the added key: {e:?}");
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_operation_client_polls_and_reports_still_pending() {
    let server = Scripted::start(vec![accepted("1"), answer(201, &[("Idempotent-Replayed", "true")], "{}")]);
    let op = charge().header("Prefer", "respond-async").unwrap();
    let outcome = operation_client(&server, config()).send(&op).await.expect("201");
    assert_eq!((outcome.attempts, outcome.response.status, outcome.replayed), (2, 201, true));
    assert_eq!(outcome.history[0].decision, Decision::Poll { after: ms(1000) });
    assert_eq!(outcome.history[0].wait(), Some(ms(1000)));

    let server = Scripted::start(vec![accepted("1")]);
    match operation_client(&server, config().with_poll_deadline(Duration::ZERO)).send(&op).await {
        Err(ClientError::StillPending { response, report }) => {
            assert_eq!((response.status, report.attempts), (202, 1));
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The tracing events (feature `tracing`)

/// Collects every event's level and fields as text: a subscriber of the test's own, so the
/// test needs nothing beyond `tracing`.
#[cfg(feature = "tracing")]
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<String>>>);

#[cfg(feature = "tracing")]
impl tracing::Subscriber for Collect {
    /// This crate's events only (hyper's and others' are not the subject).
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("idempotency_edge_client")
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut text = Text(format!("{} {}", event.metadata().level(), event.metadata().target()));
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn tracing_events_name_each_attempt_and_never_the_key() {
    // The collector is the binary's global subscriber, not a scoped one: the other tests run
    // in parallel threads, and a callsite one of them reached first under no subscriber was
    // cached as uninteresting, so a scoped subscriber lost events (seen twice in CI runs,
    // with and without rebuilding the interest cache). Setting the global one rebuilds every
    // callsite's interest, and callsites registered later see it. Other tests' events are
    // collected too: every assertion below holds for them as well (this crate's target only,
    // and never a key or a credential), and the ones that look for events find this test's.
    static EVENTS: std::sync::OnceLock<Collect> = std::sync::OnceLock::new();
    let events = EVENTS
        .get_or_init(|| {
            let events = Collect::default();
            tracing::subscriber::set_global_default(events.clone()).expect("no other global subscriber");
            events
        })
        .clone();
    let server = Scripted::start(vec![Action::Close]);
    let (client, _) = stack(&server, config().with_max_attempts(1));
    client
        .post(server.url("/x"))
        .header("Idempotency-Key", "order-12-charge")
        .header("Authorization", "Bearer secret-token")
        .header("Prefer", "respond-async")
        .body("{}")
        .send()
        .await
        .expect_err("one attempt only: the lost reply gives up");
    let server2 = Scripted::start(vec![accepted("1"), answer(201, &[], "{}")]);
    let (client, _) = stack(&server2, config());
    client
        .post(server2.url("/x"))
        .header("Idempotency-Key", "order-12-charge")
        .header("Prefer", "respond-async")
        .body("{}")
        .send()
        .await
        .expect("polled to 201");

    let events = events.0.lock().unwrap().clone();
    let text = events.join("\n");
    assert!(events.iter().all(|e| e.contains("idempotency_edge_client")), "{text}");
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("DEBUG") && e.contains("attempt=1") && e.contains("decision=\"give-up\"")),
        "{text}"
    );
    assert!(events.iter().any(|e| e.starts_with("WARN") && e.contains("gave up")), "{text}");
    assert!(
        events.iter().any(|e| e.contains("status=202")
            && e.contains("decision=\"poll\"")
            && e.contains("wait_ms=1000")),
        "{text}"
    );
    assert!(events.iter().any(|e| e.contains("status=201") && e.contains("polling=true")), "{text}");
    assert!(
        !text.contains("order-12-charge") && !text.contains("secret-token"),
        "no key, no header value: {text}"
    );
}
