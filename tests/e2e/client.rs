//! The client half: the reference retrying client (`idempotency_edge::client`) against the
//! real worker (the main instance of `basics`), so the two halves are tested together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::basics::{admin, fresh_object, main_worker, origin, wait_for_waiters};
use crate::support::assert::{assert_from_origin, assert_problem, assert_replay_of, PROBLEM_PREFIX};
use crate::support::http::Response;
use crate::support::origin::Gate;
use crate::support::requests::{new_key, new_path, payment, DEFAULT_AUTHORIZATION, PAYMENT_BODY};
use crate::support::worker::Worker;
use idempotency_edge::client::{
    self, AttemptSummary, ClientError, GiveUpReason, HttpTransport, Operation, RetryConfig, RetryingClient,
    Transport, TransportErrorKind,
};

fn client_for(w: &Worker, config: RetryConfig) -> RetryingClient {
    RetryingClient::new(format!("http://{}", w.addr), config)
}

/// A charge as the client sends it: the key fixed here, once.
fn client_payment(path: &str, key: &str) -> Operation {
    Operation::post_json(key, path, PAYMENT_BODY)
        .and_then(|op| op.header("Authorization", DEFAULT_AUTHORIZATION))
        .expect("a valid operation")
}

/// Quick retries for tests: 100 ms base, 1 s cap, 10 attempts, 40 s deadline, 15 s per
/// attempt (above the worker's 12 s origin timeout and 5 s duplicate wait).
fn quick_retries() -> RetryConfig {
    RetryConfig {
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        max_attempts: 10,
        deadline: Duration::from_secs(40),
        attempt_timeout: Duration::from_secs(15),
    }
}

/// The client's response in the test support's type, for the shared assertions.
fn as_support(r: &client::Response) -> Response {
    Response { status: r.status, reason: String::new(), headers: r.headers.clone(), body: r.body.clone() }
}

/// Adds headers to the first attempt only: the test origin's control headers (which are
/// not part of the fingerprint) make that one attempt fail, and the retry then runs clean.
struct FirstAttemptHeaders {
    inner: HttpTransport,
    extra: Vec<(String, String)>,
    used: AtomicBool,
}

impl Transport for FirstAttemptHeaders {
    fn send(
        &self,
        request: &client::Request<'_>,
        timeout: Duration,
    ) -> Result<client::Response, client::TransportError> {
        if self.used.swap(true, Ordering::SeqCst) {
            return self.inner.send(request, timeout);
        }
        let mut headers = request.headers.to_vec();
        headers.extend(self.extra.iter().cloned());
        self.inner.send(&client::Request { headers: &headers, ..*request }, timeout)
    }
}

/// Releases a gate once the first attempt has its answer.
struct ReleaseAfterFirstAnswer {
    inner: HttpTransport,
    gate: std::sync::Arc<Gate>,
}

impl Transport for ReleaseAfterFirstAnswer {
    fn send(
        &self,
        request: &client::Request<'_>,
        timeout: Duration,
    ) -> Result<client::Response, client::TransportError> {
        let answer = self.inner.send(request, timeout);
        self.gate.release();
        answer
    }
}

#[test]
fn client_retries_a_lost_reply_and_gets_the_stored_answer() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    // The origin takes 1.5 s; each attempt gives up after 400 ms, as a client whose reply
    // is lost would.
    let op = client_payment(&path, &key).header("x-test-delay-ms", "1500").unwrap();
    let config = RetryConfig {
        attempt_timeout: Duration::from_millis(400),
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        max_attempts: 30,
        deadline: Duration::from_secs(30),
    };
    let outcome = client_for(w, config).send(&op).unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));

    assert!(outcome.attempts >= 2, "the first attempt cannot have had its reply: {:?}", outcome.history);
    match &outcome.history[0].result {
        AttemptSummary::TransportFailed(e) => assert_eq!(e.kind, TransportErrorKind::Timeout, "{e}"),
        other => panic!("the first attempt should time out, got {other:?}"),
    }
    let response = as_support(&outcome.response);
    let json = assert_from_origin(&response, 201);
    assert!(
        outcome.replayed && response.is_replayed(),
        "the retry gets the stored answer, replayed: {response:?}"
    );
    assert_eq!(json["path"], path.as_str());
    assert_eq!(o.executions(&key), 1, "one execution for {} attempts", outcome.attempts);
    assert_eq!(o.executions_at(&path), 1, "no attempt reached the origin under another key");

    // The answer the client got is the stored one.
    let again = w.send(&payment(&path, &key));
    assert_replay_of(&again, &response);
    assert_eq!(o.executions(&key), 1);
}

/// The origin holds the first attempt until the client's attempt waits on it in the
/// object (the admin view counts it): the client joins the execution.
#[test]
fn client_joins_an_execution_in_flight() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let req = payment(&path, &key);
    let object = fresh_object(w, &req, admin);
    let gate = o.gate();
    let first = gate.on(req).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");

    let client = std::thread::spawn({
        let (path, key) = (path.clone(), key.clone());
        move || client_for(w, quick_retries()).send(&client_payment(&path, &key))
    });
    wait_for_waiters(w, &object, 1, admin);
    gate.release();
    let outcome =
        client.join().expect("client thread").unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.finish().expect("the first attempt's answer");

    assert_from_origin(&first, 201);
    assert!(!first.is_replayed(), "{first:?}");
    assert_eq!(outcome.attempts, 1, "one attempt, which joined: {:?}", outcome.history);
    assert!(outcome.replayed, "the client gets the running execution's answer, replayed: {outcome:?}");
    assert_replay_of(&as_support(&outcome.response), &first);
    assert_eq!(o.executions(&key), 2, "the marker execution, then one the client joined");
}

/// The origin holds the first attempt until the client's first attempt has its 409 (the
/// transport releases the gate when that answer arrives): the client honours Retry-After
/// and then gets the answer.
#[test]
fn client_waits_out_in_progress_and_then_gets_the_answer() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let gate = std::sync::Arc::new(o.gate());
    let first = gate.on(payment(&path, &key)).start(w.addr).expect("send the first attempt");
    gate.expect_arrival("the first attempt");

    let transport = ReleaseAfterFirstAnswer { inner: HttpTransport::new(), gate: gate.clone() };
    let outcome = client_for(w, quick_retries())
        .with_transport(transport)
        .send(&client_payment(&path, &key))
        .unwrap_or_else(|e| panic!("the client failed: {e}\n{e:?}"));
    let first = first.finish().expect("the first attempt's answer");

    assert!(outcome.attempts >= 2, "{:?}", outcome.history);
    let head = &outcome.history[0];
    match &head.result {
        AttemptSummary::Answered {
            status: 409,
            problem_type: Some(t),
            retry_after: Some(retry_after),
            ..
        } => {
            assert_eq!(t, &format!("{PROBLEM_PREFIX}in-progress"));
            assert!(*retry_after >= Duration::from_secs(1), "{head:?}");
            let wait = head.wait().unwrap_or_else(|| panic!("409 in-progress must be retried: {head:?}"));
            assert!(wait >= *retry_after, "the client honours Retry-After: {head:?}");
        }
        other => panic!("the first attempt should get 409 in-progress with Retry-After, got {other:?}"),
    }
    assert_from_origin(&first, 201);
    assert_replay_of(&as_support(&outcome.response), &first);
    assert!(outcome.replayed);
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_retries_429_and_503_that_released_the_key() {
    let w = main_worker();
    let o = origin();
    for status in ["503", "429"] {
        let key = new_key();
        let path = new_path();
        let transport = FirstAttemptHeaders {
            inner: HttpTransport::new(),
            extra: vec![
                ("x-test-status".to_string(), status.to_string()),
                ("x-test-retry-after".to_string(), "1".to_string()),
            ],
            used: AtomicBool::new(false),
        };
        let client = client_for(w, quick_retries()).with_transport(transport);
        let outcome = client
            .send(&client_payment(&path, &key))
            .unwrap_or_else(|e| panic!("{status}: the client failed: {e}\n{e:?}"));

        assert_eq!(outcome.attempts, 2, "{status}: {:?}", outcome.history);
        let head = &outcome.history[0];
        assert!(
            matches!(head.result, AttemptSummary::Answered { status: s, .. } if s.to_string() == status),
            "{status}: {head:?}"
        );
        assert!(
            head.wait().is_some_and(|w| w >= Duration::from_secs(1)),
            "{status}: Retry-After honoured: {head:?}"
        );
        let json = assert_from_origin(&as_support(&outcome.response), 201);
        assert!(!outcome.replayed, "{status} released the key, so the retry executed: {outcome:?}");
        assert_eq!(json["path"], path.as_str());
        assert_eq!(o.executions(&key), 2, "{status}: the released attempt, then the retry");
    }
}

#[test]
fn client_gives_up_on_a_persistent_503_after_max_attempts() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key)
        .header("x-test-status", "503")
        .unwrap()
        .header("x-test-retry-after", "1")
        .unwrap();
    let client = client_for(w, RetryConfig { max_attempts: 3, ..quick_retries() });
    let started = Instant::now();
    match client.send(&op) {
        Err(ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted, last: Ok(last), report }) => {
            assert_eq!(report.attempts, 3, "{report:?}");
            assert_from_origin(&as_support(&last), 503);
            for attempt in &report.history[..2] {
                assert!(attempt.wait().is_some_and(|w| w >= Duration::from_secs(1)), "{attempt:?}");
            }
        }
        other => panic!("expected the client to give up after 3 attempts, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(2), "two waits of Retry-After: 1");
    assert_eq!(o.executions(&key), 3, "each 503 released the key, so each attempt executed");
}

#[test]
fn client_reports_outcome_unknown_for_reconciliation_without_retrying() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key).header("x-test-reset", "1").unwrap();
    let err = client_for(w, quick_retries()).send(&op).expect_err("an unknown outcome is not a success");
    assert!(err.needs_reconciliation(), "expected reconciliation, got {err:?}");
    assert_eq!(err.attempts(), 1, "outcome-unknown is never retried: {err:?}");
    assert_problem(&as_support(err.response().expect("the worker's answer")), 502, "outcome-unknown");
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_does_not_retry_key_reused() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let first = w.send(&payment(&path, &key));
    assert_from_origin(&first, 201);

    let other = Operation::post_json(&key, &path, r#"{"amount":2000,"currency":"eur"}"#)
        .and_then(|op| op.header("Authorization", DEFAULT_AUTHORIZATION))
        .unwrap();
    match client_for(w, quick_retries()).send(&other) {
        Err(ClientError::Rejected { response, report }) => {
            assert_problem(&as_support(&response), 422, "key-reused");
            assert_eq!(report.attempts, 1, "422 is never retried: {report:?}");
        }
        other => panic!("expected a 422 rejection, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);
}

#[test]
fn client_does_not_retry_a_final_4xx() {
    let w = main_worker();
    let o = origin();
    let key = new_key();
    let path = new_path();
    let op = client_payment(&path, &key).header("x-test-status", "400").unwrap();
    match client_for(w, quick_retries()).send(&op) {
        Err(ClientError::Rejected { response, report }) => {
            assert_from_origin(&as_support(&response), 400);
            assert_eq!(report.attempts, 1, "{report:?}");
        }
        other => panic!("expected a final 400, got {other:?}"),
    }
    assert_eq!(o.executions(&key), 1);
}
