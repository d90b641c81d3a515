//! End-to-end tests of outcomes that resolve themselves (issue 13, `ORIGIN_DEDUPLICATES`), in
//! real workerd in front of an origin that honours `Idempotency-Key` itself, as Stripe-like
//! APIs do: it executes a key once, answers 409 while that execution runs, and replays the
//! stored answer afterwards.
//!
//! - a timeout, then retries: the origin's original answer, one execution;
//! - a SIGKILL of workerd mid-flight, then a retry after the lease: the original answer;
//! - sending again stops at `MAX_ORIGIN_ATTEMPTS`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::assert_problem;
use crate::support::http::{find_head_end, header_value, parse_header_lines, split_lines, Request, Response};
use crate::support::requests::{request, unique};
use crate::support::worker::{shared as instance, Readiness, Worker, WorkerConfig};

/// What the deduplicating origin did with one key.
#[derive(Default)]
struct KeyState {
    /// Requests that arrived with the key.
    received: usize,
    /// Times the key was executed (at most once, by design of this origin).
    executions: usize,
    /// The stored answer, once the execution finished.
    answer: Option<String>,
}

/// An origin that deduplicates by `Idempotency-Key`. Control headers:
/// `x-test-delay-ms: N` (the execution takes N ms), `x-test-drop: 1` (read the request,
/// then close the connection without executing or answering).
#[derive(Clone)]
struct DedupOrigin {
    addr: SocketAddr,
    keys: Arc<Mutex<HashMap<String, KeyState>>>,
}

impl DedupOrigin {
    fn start() -> DedupOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the origin");
        let origin = DedupOrigin { addr: listener.local_addr().unwrap(), keys: Arc::default() };
        let serving = origin.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let origin = serving.clone();
                thread::spawn(move || origin.handle(stream));
            }
        });
        origin
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn executions(&self, key: &str) -> usize {
        self.keys.lock().unwrap().get(key).map_or(0, |k| k.executions)
    }

    fn received(&self, key: &str) -> usize {
        self.keys.lock().unwrap().get(key).map_or(0, |k| k.received)
    }

    fn handle(&self, mut stream: TcpStream) {
        stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(end) = find_head_end(&buf) {
                break end;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let lines = split_lines(&buf[..head_end - 4]);
        let headers = parse_header_lines(&lines[1..]);
        let length: usize =
            header_value(&headers, "content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        while buf.len() - head_end < length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let control = |name: &str| header_value(&headers, name).map(|v| v.trim().to_owned());
        let reply = |stream: &mut TcpStream, status: u16, body: &str| {
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-origin-execution: 1\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.shutdown(Shutdown::Write);
        };
        let Some(key) = control("idempotency-key") else {
            return reply(&mut stream, 200, "{\"keyless\":true}");
        };
        let existing = {
            let mut keys = self.keys.lock().unwrap();
            let state = keys.entry(key.clone()).or_default();
            state.received += 1;
            if control("x-test-drop").as_deref() == Some("1") {
                drop(keys);
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            match (&state.answer, state.executions) {
                (Some(answer), _) => Some(Ok(answer.clone())),
                (None, 1) => Some(Err(())),
                (None, _) => {
                    state.executions = 1;
                    None
                }
            }
        };
        match existing {
            Some(Ok(answer)) => reply(&mut stream, 201, &answer),
            Some(Err(())) => {
                reply(&mut stream, 409, "{\"error\":\"a request with this key is in progress\"}")
            }
            None => {
                if let Some(ms) = control("x-test-delay-ms").and_then(|v| v.parse::<u64>().ok()) {
                    thread::sleep(Duration::from_millis(ms));
                }
                let answer = format!("{{\"charge\":\"{}\"}}", unique("ch"));
                self.keys.lock().unwrap().get_mut(&key).unwrap().answer = Some(answer.clone());
                reply(&mut stream, 201, &answer);
            }
        }
    }
}

fn origin() -> &'static DedupOrigin {
    static ORIGIN: OnceLock<DedupOrigin> = OnceLock::new();
    ORIGIN.get_or_init(DedupOrigin::start)
}

fn start(name: &str) -> Result<Worker, String> {
    let vars = [
        ("ORIGIN_URL", origin().url()),
        ("ORIGIN_DEDUPLICATES", "true".to_owned()),
        ("MAX_ORIGIN_ATTEMPTS", "3".to_owned()),
        ("ORIGIN_TIMEOUT_SECONDS", "2".to_owned()),
        ("DUPLICATE_WAIT_SECONDS", "10".to_owned()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
    ];
    Worker::start(WorkerConfig {
        name: name.into(),
        vars: vars.into_iter().map(|(n, v)| (n.to_owned(), v)).collect(),
        readiness: Readiness::OriginAnswers,
    })
}

fn deduplicating() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    instance(&CELL, || start("deduplicating"))
}

fn charge(path: &str, key: &str) -> Request {
    request("POST", path).header("Idempotency-Key", key).json(r#"{"amount":2500,"currency":"eur"}"#)
}

/// Retries `request` until the answer is not a 409 or a 502, for at most a minute, and
/// returns that answer.
fn retry_until_settled(w: &Worker, request: &Request) -> Response {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = w.send(request);
        if !matches!(r.status, 409 | 502) || Instant::now() > deadline {
            return r;
        }
        thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_timeout_then_retries_get_the_origins_original_answer() {
    let (w, o) = (deduplicating(), origin());
    let key = unique("timeout");
    let path = format!("/v1/charges/{}", unique("p"));
    // The origin takes longer than the worker waits: the outcome is unknown.
    let first = w.send(&charge(&path, &key).header("x-test-delay-ms", "4000"));
    assert_problem(&first, 502, "outcome-unknown");
    // Retries send the same request again under the same key; while the origin's own first
    // execution runs it answers 409, afterwards its stored answer.
    let settled = retry_until_settled(w, &charge(&path, &key));
    assert_eq!(settled.status, 201, "{settled:?}");
    assert_eq!(o.executions(&key), 1, "the origin executed the key once");
    assert!(o.received(&key) >= 2, "the key was sent again");
    // From now on the stored answer is replayed by the edge.
    let replay = w.send(&charge(&path, &key));
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(replay.body, settled.body);
    // A different payload is still refused.
    let other = w.send(&request("POST", &path).header("Idempotency-Key", &key).json(r#"{"amount":1}"#));
    assert_problem(&other, 422, "key-reused");
}

#[test]
fn a_restart_mid_flight_then_a_retry_after_the_lease_gets_the_original_answer() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = instance(&CELL, || start("deduplicating-crash"));
    let o = origin();
    let key = unique("crash");
    let path = format!("/v1/charges/{}", unique("p"));
    let first = {
        let request = charge(&path, &key).header("x-test-delay-ms", "1500");
        let addr = w.addr;
        thread::spawn(move || request.send(addr))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while o.received(&key) == 0 {
        assert!(Instant::now() < deadline, "the first attempt never reached the origin");
        thread::sleep(Duration::from_millis(20));
    }
    w.crash();
    assert!(first.join().unwrap().is_err(), "the caller's connection dies with workerd");
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
    // The claim is orphaned: 409 until its lease ends (2 s timeout + 10 s margin), then it
    // is sent again and the origin's stored answer comes back.
    let settled = retry_until_settled(w, &charge(&path, &key));
    assert_eq!(settled.status, 201, "{settled:?}");
    assert_eq!(o.executions(&key), 1);
    assert!(w.send(&charge(&path, &key)).is_replayed());
}

#[test]
fn sending_again_stops_at_max_origin_attempts() {
    let (w, o) = (deduplicating(), origin());
    let key = unique("exhausted");
    let path = format!("/v1/charges/{}", unique("p"));
    // Every send is lost after the request went out: each outcome is unknown.
    let dropped = charge(&path, &key).header("x-test-drop", "1");
    for _ in 0..3 {
        assert_problem(&w.send(&dropped), 502, "outcome-unknown");
    }
    assert_eq!(o.received(&key), 3, "sent three times, MAX_ORIGIN_ATTEMPTS");
    let exhausted = w.send(&charge(&path, &key));
    assert_problem(&exhausted, 502, "outcome-unknown");
    assert!(exhausted.text().contains("3 times"), "{}", exhausted.text());
    assert_eq!(o.received(&key), 3, "never a fourth time");
}
