//! The client half against the real worker: the built Wasm in workerd (`wrangler dev`,
//! serving HTTPS with a certificate of the test's own CA) in front of the test origin on
//! loopback. The client trusts that CA explicitly, and only it: certificate checks stay on.
//!
//! Asynchronous acceptance (`ASYNC_ACCEPT=prefer`, on an instance of its own): the client
//! polls a job the worker accepted with 202 until its answer, and a job still pending at
//! the poll deadline is polled later with the same key.
//!
//! Also the conformance checker, run as the binary it is, against the worker (every
//! applicable check holds), against a bare origin that executes everything (it falls
//! short, exit 1), and against an origin that answers 200 with one body to everything
//! (it is not fooled).
//!
//! Needs the built worker and wrangler, as the worker's own e2e tests do
//! (`./scripts/test.sh`).

// The worker's test support, shared: this binary uses part of it, and the worker's own e2e
// binary (tests/e2e), which uses all of it, is where an unused helper is reported.
#[path = "../../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use http::Extensions;
use idempotency_edge_client::{
    AttemptSummary, Attempts, Client, ClientError, Decision, GiveUpReason, IdempotencyError,
    IdempotencyMiddleware, Operation, Response, RetryConfig, SentKey, TransportErrorKind,
};
use reqwest::Certificate;
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use support::assert::{assert_problem, PROBLEM_PREFIX};
use support::origin::Origin;
use support::requests::{register_secret, secret, unique};
use support::worker::{require_build, shared, Https, Readiness, Worker, WorkerConfig};

// ---------------------------------------------------------------------------------------
// TLS: a CA and a leaf certificate for 127.0.0.1, made for this test process

struct Tls {
    dir: PathBuf,
    ca_pem: Vec<u8>,
}

impl Tls {
    fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "idempotency-edge test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");

        let leaf_key = KeyPair::generate().expect("leaf key");
        let mut leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("leaf params");
        leaf.distinguished_name.push(DnType::CommonName, "localhost");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).expect("leaf signed by the CA");

        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("client-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("TLS directory");
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write ca.pem");
        std::fs::write(dir.join("cert.pem"), leaf_cert.pem()).expect("write cert.pem");
        std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).expect("write key.pem");
        Tls { dir, ca_pem: ca_cert.pem().into_bytes() }
    })
}

/// A reqwest client that trusts the test CA and nothing else.
/// Every request names its caller, as real clients do: the worker scopes keys by caller and
/// answers 401 `missing-credential` without one.
fn https_client(ca_pem: &[u8]) -> reqwest::Client {
    register_secret(support::http::DEFAULT_CREDENTIAL);
    let mut credential = reqwest::header::HeaderMap::new();
    credential.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_static(support::http::DEFAULT_CREDENTIAL),
    );
    reqwest::Client::builder()
        .default_headers(credential)
        .tls_certs_only([Certificate::from_pem(ca_pem).expect("the test CA")])
        .build()
        .expect("a reqwest client")
}

// ---------------------------------------------------------------------------------------
// Shared instances

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

/// Proves readiness over TLS: a GET through the worker answered by the origin. Runs on its
/// own thread with its own runtime, since the caller may be inside a test's runtime.
fn tls_probe(addr: SocketAddr) -> Result<bool, String> {
    thread::spawn(move || {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let r = https_client(&tls().ca_pem)
                .get(format!("https://127.0.0.1:{}/__e2e/ready", addr.port()))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            Ok(r.headers().contains_key("x-origin-execution"))
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the readiness probe panicked".into()))
}

fn worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let vars = [
            ("ORIGIN_URL", origin().url()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
            ("DUPLICATE_WAIT_SECONDS", "5".to_string()),
            ("ORIGIN_TIMEOUT_SECONDS", "20".to_string()),
            ("MAX_BODY_BYTES", "4096".to_string()),
            ("SCOPE_HEADER", "Authorization".to_string()),
        ];
        let tls = tls();
        Worker::start_https(
            WorkerConfig {
                name: "client-tls".into(),
                vars: vars.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
                readiness: Readiness::OriginAnswers,
            },
            Https {
                key_path: tls.dir.join("key.pem"),
                cert_path: tls.dir.join("cert.pem"),
                probe: std::sync::Arc::new(tls_probe),
            },
        )
    })
}

/// 32 bytes 0..31 in standard base64: a test key, never a real one. Asynchronous acceptance
/// stores the request (credentials included), so the worker refuses it without one.
const STORAGE_KEYS: &str =
    r#"[{"id":"client-async-test","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;

/// The same worker setup with asynchronous acceptance on (`ASYNC_ACCEPT=prefer`): a request
/// with `Prefer: respond-async` is answered 202 at once and executed from the key's alarm.
/// An instance of its own, so the other tests run against the default configuration.
fn async_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let vars = [
            ("ORIGIN_URL", origin().url()),
            ("ASYNC_ACCEPT", "prefer".to_string()),
            ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_string()),
            ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
            ("ORIGIN_TIMEOUT_SECONDS", "20".to_string()),
            ("SCOPE_HEADER", "Authorization".to_string()),
        ];
        let tls = tls();
        Worker::start_https(
            WorkerConfig {
                name: "client-async".into(),
                vars: vars.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
                readiness: Readiness::OriginAnswers,
            },
            Https {
                key_path: tls.dir.join("key.pem"),
                cert_path: tls.dir.join("cert.pem"),
                probe: std::sync::Arc::new(tls_probe),
            },
        )
    })
}

fn base_url(w: &Worker) -> String {
    format!("https://127.0.0.1:{}", w.addr.port())
}

/// Starts the worker without blocking the test's runtime.
async fn start_worker() -> &'static Worker {
    tokio::task::spawn_blocking(worker).await.expect("worker start")
}

/// The same for [`async_worker`].
async fn start_async_worker() -> &'static Worker {
    tokio::task::spawn_blocking(async_worker).await.expect("worker start")
}

/// A new key: recorded as a secret (`support::requests::secret`), so that the suite's final
/// leak scan (`scripts/scan-e2e-logs.py`) looks for it in this binary's instances' logs too.
fn new_key() -> String {
    secret("client")
}

fn new_path() -> String {
    format!("/v1/payments/{}", unique("p"))
}

const PAYMENT_BODY: &str = r#"{"amount":1000,"currency":"eur"}"#;

fn payment(path: &str, key: &str) -> Operation {
    Operation::post_json(key, path, PAYMENT_BODY).expect("a valid operation")
}

/// 100 ms base, 1 s cap, 10 attempts, 60 s deadline, 30 s per attempt (above the worker's
/// 20 s origin timeout and 5 s duplicate wait).
fn quick_retries() -> RetryConfig {
    RetryConfig::default()
        .with_base_backoff(Duration::from_millis(100))
        .with_max_backoff(Duration::from_secs(1))
        .with_max_attempts(10)
        .with_deadline(Duration::from_secs(60))
        .with_attempt_timeout(Duration::from_secs(30))
}

/// The middleware for this worker's base URL.
fn layer(w: &Worker) -> IdempotencyMiddleware {
    IdempotencyMiddleware::for_base_urls([base_url(w)]).expect("the worker's base URL")
}

fn client(w: &Worker, config: RetryConfig) -> Client {
    Client::with_http(base_url(w), https_client(&tls().ca_pem), config).expect("the worker's base URL")
}

/// The client's answer in the test support's type, for the shared assertions.
fn as_support(r: &Response) -> support::http::Response {
    support::http::Response {
        status: r.status,
        reason: String::new(),
        headers: r.headers.clone(),
        body: r.body.clone(),
    }
}

fn assert_from_origin(r: &Response, status: u16) -> serde_json::Value {
    assert_eq!(r.status, status, "expected {status} from the origin, got {r:?}");
    assert!(r.header("x-origin-execution").is_some(), "expected the origin's answer, got {r:?}");
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("origin JSON: {e}: {r:?}"))
}

/// Waits (off the runtime) until the origin has seen `n` executions of `key`.
async fn wait_for_executions(key: &str, n: usize) {
    let key = key.to_string();
    let arrived =
        tokio::task::spawn_blocking(move || origin().wait_for_executions(&key, n, Duration::from_secs(60)))
            .await
            .expect("wait");
    assert!(arrived, "the first attempt never reached the origin");
}

/// Sends one request straight through reqwest (no middleware), as another client would.
async fn send_direct(w: &Worker, path: &str, key: &str, extra: &[(&str, &str)]) -> Response {
    let mut request = https_client(&tls().ca_pem)
        .post(format!("{}{path}", base_url(w)))
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(PAYMENT_BODY);
    for (n, v) in extra {
        request = request.header(*n, *v);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("direct request: {e:?}"));
    Response::read(response).await.expect("direct answer")
}

// ---------------------------------------------------------------------------------------
// The middleware and the operation client over TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middleware_in_one_line_over_tls() {
    let w = start_worker().await;
    let o = origin();
    let path = new_path();
    let http = ClientBuilder::new(https_client(&tls().ca_pem)).with(layer(w)).build();

    // No key given: the layer adds one.
    let request = http
        .post(format!("{}{path}", base_url(w)))
        .header("Content-Type", "application/json")
        .body(PAYMENT_BODY)
        .build()
        .unwrap();
    let mut extensions = Extensions::new();
    let first = http.execute_with_extensions(request, &mut extensions).await.expect("201 from the origin");
    let SentKey(key) = extensions.get::<SentKey>().cloned().expect("the key the layer sent");
    register_secret(&key);
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.bytes().await.unwrap();
    assert_eq!(o.executions(&key), 1, "the origin saw the layer's key");

    // The same key again through the layer: the stored answer.
    let again = http
        .post(format!("{}{path}", base_url(w)))
        .header("Idempotency-Key", key.as_str())
        .header("Content-Type", "application/json")
        .body(PAYMENT_BODY)
        .send()
        .await
        .expect("the replay");
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), first_body, "the replay is byte-exact");
    assert_eq!(o.executions(&key), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_retried_and_gets_the_stored_answer() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    // The origin takes 12 s; each attempt gives up after 3 s, as a client whose reply is
    // lost would. No attempt can see an answer of its own, so the answer is a replay. The
    // margins are wide (9 s, and 3 s for a replay) so that a loaded machine changes nothing.
    let op = payment(&path, &key).header("x-test-delay-ms", "12000").unwrap();
    let config = RetryConfig::default()
        .with_attempt_timeout(Duration::from_secs(3))
        .with_base_backoff(Duration::from_millis(100))
        .with_max_backoff(Duration::from_secs(1))
        .with_max_attempts(100)
        .with_deadline(Duration::from_secs(120));
    let outcome =
        client(w, config).send(&op).await.unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));

    match &outcome.history[0].result {
        AttemptSummary::TransportFailed(e) => assert_eq!(e.kind, TransportErrorKind::Timeout, "{e}"),
        other => panic!("the first attempt should time out, got {other:?}"),
    }
    let json = assert_from_origin(&outcome.response, 201);
    assert!(outcome.replayed, "the retry gets the stored answer, replayed: {outcome:?}");
    assert_eq!(json["path"], path.as_str());
    assert_eq!(o.executions(&key), 1, "one execution for {} attempts", outcome.attempts);
    assert_eq!(o.executions_at(&path), 1, "no attempt reached the origin under another key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_joins_an_execution_in_flight() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let first = {
        let (path, key) = (path.clone(), key.clone());
        tokio::spawn(async move { send_direct(w, &path, &key, &[("x-test-delay-ms", "2000")]).await })
    };
    wait_for_executions(&key, 1).await;

    let outcome = client(w, quick_retries())
        .send(&payment(&path, &key))
        .await
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.await.expect("first request");

    assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "{first:?}");
    assert!(outcome.replayed, "the running execution's answer, replayed: {outcome:?}");
    assert_eq!(outcome.response.body, first.body, "the same answer, byte for byte");
    assert_eq!(o.executions(&key), 1, "the client's attempts join the running execution");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_is_waited_out_with_retry_after() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    // 15 s at the origin, three times the worker's 5 s duplicate wait: the client's first
    // attempt, sent once the origin has the first request, waits 5 s and gets 409.
    let first = {
        let (path, key) = (path.clone(), key.clone());
        tokio::spawn(async move { send_direct(w, &path, &key, &[("x-test-delay-ms", "15000")]).await })
    };
    wait_for_executions(&key, 1).await;

    let outcome = client(w, quick_retries())
        .send(&payment(&path, &key))
        .await
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.await.expect("first request");

    let head = &outcome.history[0];
    match &head.result {
        AttemptSummary::Answered {
            status: 409,
            problem_type: Some(t),
            retry_after: Some(retry_after),
            ..
        } => {
            assert_eq!(t, &format!("{PROBLEM_PREFIX}in-progress"));
            let wait = head.wait().unwrap_or_else(|| panic!("409 in-progress must be retried: {head:?}"));
            assert!(wait >= *retry_after, "the client honours Retry-After: {head:?}");
        }
        other => panic!("the first attempt should get 409 in-progress with Retry-After, got {other:?}"),
    }
    assert_from_origin(&first, 201);
    assert_eq!(outcome.response.body, first.body);
    assert!(outcome.replayed);
    assert_eq!(o.executions(&key), 1);
}

/// Adds headers to the first attempt only: the test origin's control headers (not part of
/// the fingerprint) make that one attempt fail, and the retry runs clean. A layer after
/// the idempotency layer runs once per attempt.
struct FirstAttemptHeaders {
    extra: Vec<(&'static str, &'static str)>,
    used: AtomicBool,
}

#[async_trait::async_trait]
impl Middleware for FirstAttemptHeaders {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if !self.used.swap(true, Ordering::SeqCst) {
            for (n, v) in &self.extra {
                req.headers_mut().insert(*n, http::HeaderValue::from_static(v));
            }
        }
        next.run(req, extensions).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_that_released_the_key_is_retried_and_executes() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let stack = ClientBuilder::new(https_client(&tls().ca_pem))
        .with(layer(w).with_config(quick_retries()))
        .with(FirstAttemptHeaders {
            extra: vec![("x-test-status", "429"), ("x-test-retry-after", "1")],
            used: AtomicBool::new(false),
        })
        .build();
    let outcome = Client::with_stack(base_url(w), stack)
        .expect("the worker's base URL")
        .send(&payment(&path, &key))
        .await
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));

    assert_eq!(outcome.attempts, 2, "{:?}", outcome.history);
    let head = &outcome.history[0];
    assert!(matches!(head.result, AttemptSummary::Answered { status: 429, .. }), "{head:?}");
    assert!(head.wait().is_some_and(|w| w >= Duration::from_secs(1)), "Retry-After honoured: {head:?}");
    assert_from_origin(&outcome.response, 201);
    assert!(!outcome.replayed, "429 released the key, so the retry executed: {outcome:?}");
    assert_eq!(o.executions(&key), 2, "the released attempt, then the retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_429_ends_in_a_give_up() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let op = payment(&path, &key)
        .header("x-test-status", "429")
        .unwrap()
        .header("x-test-retry-after", "1")
        .unwrap();
    match client(w, quick_retries().with_max_attempts(3)).send(&op).await {
        Err(ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report }) => {
            assert_eq!(report.attempts, 3, "{report:?}");
            assert_from_origin(&last, 429);
            for attempt in &report.history[..2] {
                assert!(attempt.wait().is_some_and(|w| w >= Duration::from_secs(1)), "{attempt:?}");
            }
        }
        other => panic!("expected a give-up after 3 attempts, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 3, "each 429 released the key, so each attempt executed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_unknown_is_a_typed_error_without_a_retry() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let http =
        ClientBuilder::new(https_client(&tls().ca_pem)).with(layer(w).with_config(quick_retries())).build();
    let e = http
        .post(format!("{}{path}", base_url(w)))
        .header("Idempotency-Key", key.as_str())
        .header("Content-Type", "application/json")
        .header("x-test-reset", "1")
        .body(PAYMENT_BODY)
        .send()
        .await
        .expect_err("an unknown outcome is not a response");
    let e = IdempotencyError::from_middleware(&e).unwrap_or_else(|| panic!("the layer's error: {e:?}"));
    assert!(e.needs_reconciliation(), "{e:?}");
    assert_eq!(e.key(), Some(key.as_str()));
    assert_eq!(e.report().map(|r| r.attempts), Some(1), "never retried: {e:?}");
    assert_problem(&as_support(e.response().expect("the worker's answer")), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_stored_by_the_worker_asks_for_reconciliation() {
    let w = start_worker().await;
    let o = origin();
    for status in ["500", "502", "504"] {
        let (key, path) = (new_key(), new_path());
        let op = payment(&path, &key).header("x-test-status", status).unwrap();
        let e = client(w, quick_retries()).send(&op).await.expect_err("a 5xx is no success");
        assert!(e.needs_reconciliation(), "{status}: the origin may have acted: {e:?}");
        assert_eq!(e.attempts(), 1, "{status}: {e:?}");
        assert_from_origin(e.response().expect("the origin's answer"), status.parse().unwrap());
        assert_eq!(o.executions(&key), 1, "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_reuse_and_final_4xx_are_not_retried() {
    let w = start_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    assert_from_origin(&send_direct(w, &path, &key, &[]).await, 201);
    let other = Operation::post_json(&key, &path, r#"{"amount":2000,"currency":"eur"}"#).unwrap();
    match client(w, quick_retries()).send(&other).await {
        Err(ClientError::Rejected { response, report }) => {
            assert_problem(&as_support(&response), 422, "key-reused");
            assert_eq!(report.attempts, 1, "422 is never retried: {report:?}");
        }
        other => panic!("expected a 422 rejection, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);

    let (key, path) = (new_key(), new_path());
    let op = payment(&path, &key).header("x-test-status", "400").unwrap();
    match client(w, quick_retries()).send(&op).await {
        Err(ClientError::Rejected { response, report }) => {
            assert_from_origin(&response, 400);
            assert_eq!(report.attempts, 1, "{report:?}");
        }
        other => panic!("expected a final 400, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);
}

// ---------------------------------------------------------------------------------------
// Asynchronous acceptance: the client polls the job the worker accepted

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middleware_polls_a_job_the_worker_accepted_until_its_answer() {
    let w = start_async_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let http =
        ClientBuilder::new(https_client(&tls().ca_pem)).with(layer(w).with_config(quick_retries())).build();
    // The origin takes 3 s: the worker answers 202 at once, the job's send runs from the
    // key's alarm, and every poll meanwhile gets 202 again.
    let request = http
        .post(format!("{}{path}", base_url(w)))
        .header("Idempotency-Key", key.as_str())
        .header("Prefer", "respond-async")
        .header("Content-Type", "application/json")
        .header("x-test-delay-ms", "3000")
        .body(PAYMENT_BODY)
        .build()
        .unwrap();
    let mut extensions = Extensions::new();
    let response = http
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap_or_else(|e| panic!("the job's answer, not an error: {e}\n{e:?}"));
    let history = extensions.get::<Attempts>().map(|a| a.0.clone()).unwrap_or_default();

    let response = Response::read(response).await.expect("the answer");
    let json = assert_from_origin(&response, 201);
    assert_eq!(json["path"], path.as_str());
    assert!(response.is_replayed(), "the job's stored answer, replayed: {response:?}");
    assert_eq!(o.executions(&key), 1, "one execution, however many polls: {history:?}");
    // The first answer was the acceptance; the layer polled, honouring its Retry-After.
    let first = &history[0];
    match &first.result {
        AttemptSummary::Answered { status: 202, retry_after: Some(retry_after), .. } => {
            assert!(
                matches!(first.decision, Decision::Poll { after } if after >= *retry_after),
                "polled after Retry-After: {first:?}"
            );
        }
        other => panic!("the first attempt should get 202 with Retry-After, got {other:?}"),
    }
    assert!(history.len() >= 2, "{history:?}");
    assert!(
        history[..history.len() - 1].iter().all(|a| matches!(a.decision, Decision::Poll { .. })),
        "{history:?}"
    );
    assert_eq!(history.last().map(|a| a.decision), Some(Decision::Done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_still_pending_at_the_poll_deadline_is_polled_later_with_the_same_key() {
    let w = start_async_worker().await;
    let o = origin();
    let (key, path) = (new_key(), new_path());
    let op = payment(&path, &key)
        .header("Prefer", "respond-async")
        .unwrap()
        .header("x-test-delay-ms", "6000")
        .unwrap();
    // A poll deadline of 2 s, shorter than the origin's 6 s.
    let impatient = quick_retries().with_poll_deadline(Duration::from_secs(2));
    match client(w, impatient).send(&op).await {
        Err(ClientError::StillPending { response, report }) => {
            assert_eq!(response.status, 202, "{response:?}");
            assert_eq!(response.header("preference-applied"), Some("respond-async"));
            assert!(report.attempts >= 1, "{report:?}");
        }
        other => panic!("expected StillPending, got {other:?}"),
    }
    // The job is the worker's: it executes it with the client gone. Sending the same
    // operation again (same key) polls it and gets its answer.
    let outcome = client(w, quick_retries())
        .send(&op)
        .await
        .unwrap_or_else(|e| panic!("the job's answer on a later poll: {e}\n{e:?}"));
    assert_from_origin(&outcome.response, 201);
    assert!(outcome.replayed, "{outcome:?}");
    assert_eq!(o.executions(&key), 1, "the first send's job, executed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused() {
    let w = start_worker().await;
    // The platform's roots only: the test CA is not among them.
    let http = reqwest::Client::builder().build().unwrap();
    let e = http.get(format!("{}/__e2e/ready", base_url(w))).send().await.expect_err("an unknown CA");
    assert!(e.is_connect(), "a TLS handshake failure: {e:?}");
}

// ---------------------------------------------------------------------------------------
// The conformance checker, run as a binary

struct Run {
    code: i32,
    stdout: String,
    report: serde_json::Value,
}

impl Run {
    fn result(&self, id: &str) -> String {
        let checks = self.report["checks"].as_array().cloned().unwrap_or_default();
        let check =
            checks.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no check {id}: {}", self.stdout));
        check["result"].as_str().unwrap_or_default().to_string()
    }

    fn ids_with(&self, result: &str) -> Vec<String> {
        let checks = self.report["checks"].as_array().cloned().unwrap_or_default();
        checks
            .iter()
            .filter(|c| c["result"] == result)
            .map(|c| c["id"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

fn run_checker(args: &[String]) -> Run {
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.json", unique("check-report")));
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency-edge-check"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run idempotency-edge-check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("no JSON report; stdout:\n{stdout}\nstderr:\n{stderr}"));
    let _ = std::fs::remove_file(&json);
    Run { code: output.status.code().unwrap_or(-1), stdout, report }
}

fn s(text: &str) -> String {
    text.to_string()
}

#[test]
fn the_checker_finds_every_applicable_check_holding_on_the_worker() {
    require_build();
    let w = worker();
    let base = base_url(w);
    let credential = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.txt", unique("credential")));
    // A secret (recorded for the final leak scan): the worker's log must never hold it.
    let token = secret("checker-credential");
    std::fs::write(&credential, format!("Bearer {token}\n")).expect("write the credential file");
    let run = run_checker(&[
        s("--url"),
        format!("{base}/v1/payments/{}", unique("check")),
        s("--url2"),
        format!("{base}/v1/refunds/{}", unique("check")),
        s("--credential-file"),
        credential.display().to_string(),
        s("--body"),
        s(r#"{"amount":1}"#),
        s("--slow-header"),
        s("x-test-delay-ms: 4000"),
        s("--ca-cert"),
        tls().ca_path().display().to_string(),
    ]);
    assert_eq!(run.code, 0, "every applicable check holds:\n{}", run.stdout);
    for id in [
        "replay",
        "set-cookie",
        "concurrent",
        "reuse-body",
        "reuse-path",
        "missing-key",
        "malformed-key",
        "retry-in-flight",
        "problem-json",
    ] {
        assert_eq!(run.result(id), "holds", "{id}:\n{}", run.stdout);
    }
    assert_eq!(run.report["executions_distinguishable"], true);
    assert!(!run.stdout.contains(&token), "a credential is never printed:\n{}", run.stdout);
}

#[test]
fn the_checker_fails_a_bare_origin_that_executes_everything() {
    let bare = Origin::start();
    let run = run_checker(&[
        s("--url"),
        format!("{}/v1/payments/{}", bare.url(), unique("bare")),
        s("--url2"),
        format!("{}/v1/refunds/{}", bare.url(), unique("bare")),
        s("--slow-header"),
        s("x-test-delay-ms: 1500"),
        s("--slow-lead-ms"),
        s("300"),
    ]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let mut short = run.ids_with("falls short");
    short.sort();
    assert_eq!(
        short,
        [
            "concurrent",
            "malformed-key",
            "missing-key",
            "replay",
            "retry-in-flight",
            "reuse-body",
            "reuse-path"
        ],
        "{}",
        run.stdout
    );
    assert!(run.ids_with("holds").is_empty(), "{}", run.stdout);
    assert_eq!(run.report["executions_distinguishable"], true, "the origin's answers carry a serial number");
    assert!(run.stdout.contains("falls short"), "the table names the verdicts:\n{}", run.stdout);
}

/// Answers `200 {"ok":true}` to every request, keys or not.
fn same_answer_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            thread::spawn(move || {
                stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as much body as announced.
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() - head_end < length {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = r#"{"ok":true}"#;
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    addr
}

#[test]
fn the_checker_is_not_fooled_by_one_answer_to_everything() {
    let addr = same_answer_origin();
    let run = run_checker(&[
        s("--url"),
        format!("http://{addr}/v1/payments/x"),
        s("--url2"),
        format!("http://{addr}/v1/refunds/x"),
    ]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.ids_with("holds").is_empty(),
        "nothing holds on an endpoint that ignores keys:\n{}",
        run.stdout
    );
    for id in ["replay", "reuse-body", "reuse-path", "missing-key", "malformed-key"] {
        assert_eq!(run.result(id), "falls short", "{id}:\n{}", run.stdout);
    }
    assert_eq!(
        run.result("concurrent"),
        "not applicable",
        "one body cannot count executions:\n{}",
        run.stdout
    );
    assert_eq!(run.report["executions_distinguishable"], false);

    // --json -: the report on stdout, alone; the table on stderr.
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency-edge-check"))
        .args(["--url", &format!("http://{addr}/v1/payments/x"), "--json", "-"])
        .output()
        .expect("run idempotency-edge-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is the JSON report ({e}): {stdout}"));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        (report["passed"].as_bool(), report["exit_status"].as_u64()),
        (Some(false), Some(1)),
        "{report}"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("falls short"), "the table went to stderr");
}

/// The credential the CLI tests give through the environment (`--credential-env`).
const CLI_CREDENTIAL_VAR: &str = "E2E_CLI_CREDENTIAL";
const CLI_CREDENTIAL: &str = "Bearer e2e-cli-caller";

/// `idempotency-edge-send`, run as the binary it is, with [`CLI_CREDENTIAL`] in its
/// environment: its exit status, stdout and stderr.
fn run_send(args: &[String]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency-edge-send"))
        .args(args)
        .env(CLI_CREDENTIAL_VAR, CLI_CREDENTIAL)
        .output()
        .expect("run idempotency-edge-send");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().unwrap_or(-1), stdout, stderr)
}

/// [`run_send`], stdout and stderr together.
fn run_cli(args: &[String]) -> (i32, String) {
    let (code, stdout, stderr) = run_send(args);
    (code, format!("{stdout}{stderr}"))
}

#[test]
fn the_cli_exit_status_says_what_happened() {
    let w = worker();
    let ca = tls().ca_path().display().to_string();
    let url = |path: &str| format!("{}{path}", base_url(w));
    let common = |path: &str, key: &str, data: &str| {
        vec![
            s("--url"),
            url(path),
            s("--key"),
            s(key),
            s("--data"),
            s(data),
            s("--ca-cert"),
            ca.clone(),
            s("--credential-env"),
            s(CLI_CREDENTIAL_VAR),
            s("--attempts"),
            s("3"),
            s("--base-ms"),
            s("50"),
        ]
    };
    let (path, key) = (new_path(), new_key());
    let (code, out) = run_cli(&common(&path, &key, PAYMENT_BODY));
    assert_eq!(code, 0, "success: {out}");
    assert!(!out.contains("e2e-cli-caller"), "the credential is never printed: {out}");
    // The same key with another body: 422, which the client never retries.
    let (code, out) = run_cli(&common(&path, &key, r#"{"amount":1}"#));
    assert_eq!(code, 1, "rejected: {out}");
    // An origin 500 (any 5xx that is not the worker's own problem): reconcile.
    let mut failing = common(&new_path(), &new_key(), PAYMENT_BODY);
    failing.extend([s("-H"), s("x-test-status: 500")]);
    let (code, out) = run_cli(&failing);
    assert_eq!(code, 3, "reconciliation needed: {out}");
    // Nothing listens there: nothing was sent, so every attempt is retried, then it gives up.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut unreachable = common(&new_path(), &new_key(), PAYMENT_BODY);
    unreachable[1] = format!("https://127.0.0.1:{closed}/v1/payments/x");
    let (code, out) = run_cli(&unreachable);
    assert_eq!(code, 2, "gave up: {out}");
    // The worker's certificate not trusted (no --ca-cert): the handshake fails before any
    // byte of the request is sent, so it is retried like a refused connection, then given up.
    let untrusted: Vec<String> = common(&new_path(), &new_key(), PAYMENT_BODY)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != 6 && *i != 7)
        .map(|(_, arg)| arg)
        .collect();
    let (code, out) = run_cli(&untrusted);
    assert_eq!(code, 2, "an untrusted certificate is never trusted, only retried: {out}");
    assert!(out.contains("UnknownIssuer"), "{out}");
    // Usage errors: clap's, and a credential variable that is not set.
    let (code, _) = run_cli(&[s("--url")]);
    assert_eq!(code, 64, "bad usage");
    let mut unset = common(&new_path(), &new_key(), PAYMENT_BODY);
    unset[9] = s("E2E_CLI_CREDENTIAL_NOT_SET");
    let (code, out) = run_cli(&unset);
    assert_eq!(code, 64, "{out}");
    assert!(out.contains("E2E_CLI_CREDENTIAL_NOT_SET is not set"), "{out}");
    let (code, out) = run_cli(&[s("--version")]);
    assert_eq!((code, out.trim()), (0, concat!("idempotency-edge-send ", env!("CARGO_PKG_VERSION"))));
}

#[test]
fn the_cli_writes_json_to_stdout_and_polls_an_accepted_job() {
    let w = async_worker();
    let ca = tls().ca_path().display().to_string();
    let o = origin();
    let send = |key: &str, extra: &[&str]| {
        let mut args = vec![
            s("--url"),
            format!("{}/v1/payments/{}", base_url(w), unique("cli-async")),
            s("--key"),
            s(key),
            s("--body"),
            s(PAYMENT_BODY),
            s("--ca-cert"),
            ca.clone(),
            s("--credential-env"),
            s(CLI_CREDENTIAL_VAR),
            s("--respond-async"),
            s("--json"),
            s("-"),
            s("-H"),
            s("x-test-delay-ms: 3000"),
        ];
        args.extend(extra.iter().map(|a| s(a)));
        let (code, stdout, stderr) = run_send(&args);
        let json: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}):\n{stdout}\nstderr:\n{stderr}"));
        (code, json, stderr)
    };
    // Polled until the job's answer: exit 0, the replayed 201 in the JSON.
    let key = new_key();
    let (code, json, stderr) = send(&key, &[]);
    assert_eq!(code, 0, "{json}\n{stderr}");
    assert_eq!((json["result"].as_str(), json["exit_status"].as_u64()), (Some("success"), Some(0)), "{json}");
    assert_eq!((json["status"].as_u64(), json["replayed"].as_bool()), (Some(201), Some(true)), "{json}");
    assert_eq!(json["history"][0]["status"], 202, "{json}");
    assert!(stderr.contains("accepted as a job, poll in"), "the text went to stderr: {stderr}");
    assert_eq!(o.executions(&key), 1);
    // No polling (--poll-deadline-ms 0): the job is handed back as still pending, exit 5.
    let key = new_key();
    let (code, json, stderr) = send(&key, &["--poll-deadline-ms", "0"]);
    assert_eq!(code, 5, "{json}\n{stderr}");
    assert_eq!(
        (json["result"].as_str(), json["status"].as_u64()),
        (Some("still-pending"), Some(202)),
        "{json}"
    );
    assert!(stderr.contains(&key), "the operator is told which key to poll with: {stderr}");
}
